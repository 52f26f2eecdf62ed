"""A trained classifier on disk, self-contained for ``classify predict``; loading never executes code::

    model.safetensors      weights
    classifier.json        ModelConfig, labels (id order), pooling, tokenizer kind and file, max_len, text columns
    tokenizer.json         the BPE tokenizer (or word_tokenizer.json for --tokenizer word)

Every file is written atomically (temporary file + rename), as the translation checkpoints are.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from safetensors.torch import save as safetensors_bytes

from vaswani.classification.encoding import TOKENIZER_FILES, TextTokenizer, load_tokenizer
from vaswani.config import ModelConfig
from vaswani.errors import VaswaniError
from vaswani.classification.model import TransformerClassifier
from vaswani.model.serialization import load_weights
from vaswani.io import atomic_write_bytes
from vaswani.model.serialization import WEIGHTS_FILE

INFO_FILE = "classifier.json"
FORMAT = "vaswani-classifier/1"


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
    def from_dict(cls, values: dict[str, Any]) -> "ClassifierInfo":
        values = dict(values)
        if values.pop("format", None) != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        for derived in ("n_classes", "tokenizer_file"):  # written for human readers, recomputed here
            values.pop(derived, None)
        values["model"] = ModelConfig.from_dict(values["model"])
        return cls(**values)


def save_classifier(
    directory: str | Path, model: TransformerClassifier, tokenizer: TextTokenizer, info: ClassifierInfo
) -> None:
    directory = Path(directory)
    tensors = {name: t.detach().contiguous().cpu() for name, t in model.state_dict().items()}
    atomic_write_bytes(directory / WEIGHTS_FILE, safetensors_bytes(tensors))
    tokenizer.save(directory / info.tokenizer_file)
    atomic_write_bytes(directory / INFO_FILE, json.dumps(info.to_dict(), indent=2).encode())


def load_classifier(directory: str | Path) -> tuple[TransformerClassifier, TextTokenizer, ClassifierInfo]:
    """The model (eval mode, CPU), its tokenizer and its info, from a directory written by :func:`save_classifier`."""
    directory = Path(directory)
    info_path = directory / INFO_FILE
    if not info_path.is_file() or not (directory / WEIGHTS_FILE).is_file():
        raise VaswaniError(
            f"{directory}: not a trained classifier (expected {INFO_FILE} and {WEIGHTS_FILE}; "
            "train one with `vaswani classify train`)"
        )
    try:
        info = ClassifierInfo.from_dict(json.loads(info_path.read_text()))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise VaswaniError(f"{info_path}: unreadable classifier description ({error})") from None
    model = TransformerClassifier(info.model, info.n_classes, info.pooling)
    load_weights(model, directory / WEIGHTS_FILE, described_by=INFO_FILE)
    tokenizer = load_tokenizer(info.tokenizer, directory / info.tokenizer_file)
    return model.eval(), tokenizer, info


__all__ = ["ClassifierInfo", "save_classifier", "load_classifier", "INFO_FILE"]
