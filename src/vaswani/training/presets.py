"""Where a run's settings come from: a preset (``vaswani/configs/NAME.yaml``) or a YAML file of the same shape,
read as a bounded UTF-8 document, and the ``section.key=value`` settings given with ``--set``."""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path

from vaswani.errors import ConfigError, VaswaniError
from vaswani.io import MAX_DOCUMENT_BYTES, absolute_path, parse_yaml
from vaswani.settings import apply_overrides, parse_settings
from vaswani.training.config import RunConfig


def preset_names() -> list[str]:
    return sorted(p.name[: -len(".yaml")] for p in resources.files("vaswani.configs").iterdir()
                  if p.name.endswith(".yaml"))


def load_preset(name_or_path: str) -> RunConfig:
    """A preset name (``multi30k-cpu``) or the path of a YAML file of the same shape."""
    path = Path(name_or_path)
    if path.suffix in {".yaml", ".yml"} and path.exists():
        text, source = read_config_text(path, "preset"), str(path)
    else:
        candidate = resources.files("vaswani.configs") / f"{name_or_path}.yaml"
        if not candidate.is_file():
            raise ConfigError(f"unknown preset {name_or_path!r}; choose from {preset_names()} or give a YAML file")
        text, source = candidate.read_text(), f"preset {name_or_path}"
    try:
        values = parse_yaml(text, source, "preset") or {}
    except VaswaniError as error:
        raise ConfigError(str(error)) from None
    config = RunConfig.from_dict(values, source)  # a YAML file's relative paths name files beside it
    return _anchored(config, path.parent) if source == str(path) else config


def _anchored(config: RunConfig, folder: Path) -> RunConfig:
    def place(*part: str | None) -> tuple:
        return tuple(str(absolute_path(value, folder)) if value else None for value in part)
    data = dataclasses.replace(config.data, train_files=tuple(place(*part) for part in config.data.train_files),
                               valid_files=place(*config.data.valid_files), data_dir=place(config.data.data_dir)[0],
                               test_files={name: place(*part) for name, part in config.data.test_files.items()})
    return RunConfig(config.model, data, dataclasses.replace(config.train, init_from=place(config.train.init_from)[0]))


def read_config_text(path: Path, what: str) -> str:
    """A UTF-8 text file's content (a regular file of at most MAX_DOCUMENT_BYTES, checked before it is read), or a
    ConfigError naming the file and what is wrong with it."""
    try:
        if path.is_file() and path.stat().st_size > MAX_DOCUMENT_BYTES:
            raise ConfigError(f"{path}: {path.stat().st_size:,} bytes, more than the {MAX_DOCUMENT_BYTES:,} a {what} "
                              "may hold")
        if path.exists() and not path.is_file() and not path.is_dir():
            raise ConfigError(f"{path}: not a regular file, so not a {what} file")
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: {what} is not UTF-8 text ({error.reason} at byte {error.start})") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a {what} file") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the {what} ({error.strerror})") from None


def apply_settings(config: RunConfig, settings: list[str]) -> RunConfig:
    """Apply ``section.key=value`` strings; an unknown section or key is an error that names it."""
    grouped = parse_settings(settings, ("model", "data", "train"))
    return RunConfig(
        model=apply_overrides(config.model, grouped["model"], "model"),
        data=apply_overrides(config.data, grouped["data"], "data"),
        train=apply_overrides(config.train, grouped["train"], "train"),
    )
