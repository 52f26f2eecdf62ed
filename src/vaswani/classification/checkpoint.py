"""A trained classifier on disk, self-contained for ``classify predict``; loading never executes code::

    model.safetensors      weights
    classifier.json        ModelConfig, labels (id order), pooling, tokenizer kind and file, max_len, text columns
    tokenizer.json         the BPE tokenizer (or word_tokenizer.json for --tokenizer word)
    vaswani.json           the manifest: "classifier", each file's size and sha256

The commands write the directory whole (see vaswani.io.directory_written_whole). Loading checks the files against
the manifest and every field of classifier.json against what training writes: a label list given as a string, a
pooling or tokenizer that does not exist, a max_len the model cannot take is one error naming the file and field.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from safetensors.torch import save as safetensors_bytes

from vaswani.classification.encoding import TOKENIZER_FILES, TextTokenizer, load_tokenizer
from vaswani.classification.model import TransformerClassifier
from vaswani.config import ModelConfig
from vaswani.errors import VaswaniError
from vaswani.io import MANIFEST_FILE, atomic_write_bytes, read_json, read_manifest, verify_files
from vaswani.model.serialization import WEIGHTS_FILE, load_weights

INFO_FILE = "classifier.json"
FORMAT = "vaswani-classifier/1"
CLASSIFIER_KIND = "classifier"
POOLINGS = ("cls", "mean")


@dataclass
class ClassifierInfo:
    """Everything besides the weights that prediction needs to turn a CSV row into the model's input."""

    model: ModelConfig
    labels: list[str]  # class id i is labels[i]
    pooling: str
    tokenizer: str  # "bpe" | "word"
    max_len: int
    lowercase: bool = True
    text_column: str = "text"
    extra_text_columns: list[str] = field(default_factory=list)
    label_column: str = "target"

    @property
    def n_classes(self) -> int:
        return len(self.labels)

    @property
    def tokenizer_file(self) -> str:
        return TOKENIZER_FILES[self.tokenizer]

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["model"] = self.model.to_dict()
        return {"format": FORMAT, "n_classes": self.n_classes, "tokenizer_file": self.tokenizer_file, **values}

    @classmethod
    def from_dict(cls, values: Any) -> "ClassifierInfo":
        """The info in a parsed classifier.json; a missing, unknown or ill-typed field is a VaswaniError naming it."""
        if not isinstance(values, dict):
            raise VaswaniError("not a JSON object")
        values = dict(values)
        if values.pop("format", None) != FORMAT:
            raise VaswaniError(f'"format" is not {FORMAT!r}')
        derived = {name: values.pop(name) for name in ("n_classes", "tokenizer_file") if name in values}
        expected = {f.name for f in fields(cls)}
        unknown, missing = sorted(set(values) - expected), sorted(
            f.name for f in fields(cls) if f.name not in values and f.default is MISSING
            and f.default_factory is MISSING)
        if unknown or missing:
            raise VaswaniError(f"unknown field(s) {unknown}" if unknown else f"missing field(s) {missing}")
        try:
            values["model"] = ModelConfig.from_dict(values["model"])
        except (VaswaniError, TypeError) as error:
            raise VaswaniError(f'"model": {error}') from None
        problem = _field_problem(values)
        if problem:
            raise VaswaniError(problem)
        info = cls(**values)
        if derived.get("n_classes", info.n_classes) != info.n_classes:
            raise VaswaniError(f'"n_classes" is {derived["n_classes"]!r} but "labels" has {info.n_classes}')
        if derived.get("tokenizer_file", info.tokenizer_file) != info.tokenizer_file:
            raise VaswaniError(f'"tokenizer_file" is {derived["tokenizer_file"]!r}; a {info.tokenizer} tokenizer is '
                               f"{info.tokenizer_file!r}")
        return info


def _field_problem(values: dict[str, Any]) -> str | None:
    """What is wrong with the fields of a classifier.json besides "model" (checked by ModelConfig), or None."""
    labels = values["labels"]
    if not isinstance(labels, list) or not labels or not all(isinstance(label, str) for label in labels):
        return f'"labels" is {_shown(labels)}, not a list of label strings'
    if len(set(labels)) != len(labels):
        return f'"labels" {_shown(labels)} names a label twice'
    for name, allowed in (("pooling", POOLINGS), ("tokenizer", tuple(TOKENIZER_FILES))):
        if values[name] not in allowed:
            return f'"{name}" is {_shown(values[name])}, not one of {list(allowed)}'
    max_len, model_len = values["max_len"], values["model"].max_len
    if isinstance(max_len, bool) or not isinstance(max_len, int) or not 3 <= max_len <= model_len:
        return f'"max_len" is {_shown(max_len)}, not a whole number from 3 to the model\'s max_len {model_len}'
    for name in ("text_column", "label_column"):
        if not isinstance(values.get(name, ""), str):
            return f'"{name}" is {_shown(values[name])}, not a string'
    if "lowercase" in values and not isinstance(values["lowercase"], bool):
        return f'"lowercase" is {_shown(values["lowercase"])}, not true or false'
    extra = values.get("extra_text_columns", [])
    if not isinstance(extra, list) or not all(isinstance(column, str) for column in extra):
        return f'"extra_text_columns" is {_shown(extra)}, not a list of column names'
    return None


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def save_classifier(
    directory: str | Path, model: TransformerClassifier, tokenizer: TextTokenizer, info: ClassifierInfo
) -> None:
    directory = Path(directory)
    tensors = {name: t.detach().contiguous().cpu() for name, t in model.state_dict().items()}
    atomic_write_bytes(directory / WEIGHTS_FILE, safetensors_bytes(tensors))
    tokenizer.save(directory / info.tokenizer_file)
    atomic_write_bytes(directory / INFO_FILE, json.dumps(info.to_dict(), indent=2).encode())


def load_classifier(directory: str | Path) -> tuple[TransformerClassifier, TextTokenizer, ClassifierInfo]:
    """The model (eval mode, CPU), its tokenizer and its info, from a directory written by :func:`save_classifier`,
    after checking its files against its manifest."""
    directory = Path(directory)
    info_path = directory / INFO_FILE
    manifest = read_manifest(directory) if directory.is_dir() else None
    if manifest is not None and manifest.kind != CLASSIFIER_KIND:
        raise VaswaniError(f"{directory} is a {manifest.kind} (see its {MANIFEST_FILE}), not a trained classifier; "
                           "train one with `vaswani classify train`")
    if not info_path.is_file() or not (directory / WEIGHTS_FILE).is_file():
        raise VaswaniError(
            f"{directory}: not a trained classifier (expected {INFO_FILE} and {WEIGHTS_FILE}; "
            "train one with `vaswani classify train`)"
        )
    if manifest is not None:
        verify_files(directory, manifest)
    try:
        info = ClassifierInfo.from_dict(read_json(info_path, "classifier description"))
    except VaswaniError as error:
        raise VaswaniError(f"{info_path}: {error}") from None
    model = TransformerClassifier(info.model, info.n_classes, info.pooling)
    load_weights(model, directory / WEIGHTS_FILE, described_by=INFO_FILE)
    tokenizer = load_tokenizer(info.tokenizer, directory / info.tokenizer_file)
    return model.eval(), tokenizer, info


__all__ = ["CLASSIFIER_KIND", "ClassifierInfo", "save_classifier", "load_classifier", "INFO_FILE"]
