"""The settings that name a run's corpus files (``data.train_files``, ``valid_files``, ``test_files``), from YAML
or from a ``--set`` string, checked into tuples of paths; a malformed one is a ConfigError naming its field."""

from __future__ import annotations

from typing import Any

from vaswani.errors import ConfigError, VaswaniError
from vaswani.io import check_name


def file_parts(value: Any, setting: str) -> tuple[tuple[str, ...], ...]:
    """The parts of a split, from YAML (``[[a.fr, a.en], [b.tsv]]``, or one part as ``[a.fr, a.en]``) or a ``--set``
    string (``a.fr,a.en;b.tsv``: ``;`` between parts, ``,`` between a part's files)."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        value = [piece.split(",") for piece in value.split(";") if piece.strip()]
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{setting}: expected a list of parts, each [source, target] or [pairs.tsv], got "
                          f"{value!r:.60}", field=setting)
    if value and all(isinstance(item, str) for item in value):
        value = [value]  # one part written flat
    return tuple(one_part(part, setting) for part in value)


def one_part(value: Any, setting: str) -> tuple[str, ...]:
    """One part: ``[source, target]`` or ``[pairs.tsv]`` (a ``--set`` string: ``source,target``)."""
    if value is None or (isinstance(value, (str, list, tuple)) and not value):
        return ()
    parts = value.split(",") if isinstance(value, str) else value
    if not isinstance(parts, (list, tuple)) or not all(isinstance(p, str) and p.strip() for p in parts) or \
            len(parts) not in (1, 2):
        raise ConfigError(f"{setting}: expected [source, target] (two aligned files) or [pairs.tsv], got "
                          f"{value!r:.60}", field=setting)
    return tuple(p.strip() for p in parts)


def named_parts(value: Any, setting: str) -> dict[str, tuple[str, ...]]:
    """Named test sets: a YAML mapping ``{name: [source, target]}`` or a ``--set`` string
    ``name=source,target;name2=pairs.tsv``."""
    if value is None or (isinstance(value, (str, dict)) and not value):
        return {}
    if isinstance(value, str):
        value = dict(piece.split("=", 1) if "=" in piece else ("", piece) for piece in value.split(";")
                     if piece.strip())
    if not isinstance(value, dict):
        raise ConfigError(f"{setting}: expected a mapping of test set name to [source, target] or [pairs.tsv], got "
                          f"{value!r:.60}", field=setting)
    named = {}
    for name, part in value.items():
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{setting}: every test set needs a name (name=source,target)", field=setting)
        try:
            check_name(name.strip(), setting)
        except VaswaniError as error:
            raise ConfigError(str(error), field=setting) from None
        named[name.strip()] = one_part(part, f"{setting}.{name}")
    return named
