"""Class probabilities from a model: batched inference in the input's order, on texts or on a whole CSV file.

    classifier = Classifier.load("runs/tweets")
    classifier.predict(["Forest fire near La Ronge Sask. Canada"])    # ['1']
"""

from __future__ import annotations

import csv
import io
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from vaswani.classification.checkpoint import ClassifierInfo, load_classifier
from vaswani.classification.data import join_text, read_csv
from vaswani.classification.encoding import TextEncoder, TextTokenizer, pad_batch
from vaswani.classification.model import TransformerClassifier
from vaswani.io import atomic_write_bytes


@torch.no_grad()
def predict_proba(
    model: TransformerClassifier, sequences: Sequence[Sequence[int]], batch_size: int = 256
) -> np.ndarray:
    """(N, C) probabilities, row i for ``sequences[i]``. Always fp32: inference is cheap, and the numbers a saved
    model reports must be the ones ``classify predict`` reproduces."""
    was_training = model.training
    model.eval()
    # Batch texts of similar length together so little compute goes to padding, then put rows back in order.
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    probs = np.zeros((len(sequences), model.n_classes), dtype=np.float32)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        ids = pad_batch([sequences[i] for i in rows], model.config.pad_id)
        probs[rows] = torch.softmax(model(ids).float(), dim=-1).numpy()
    model.train(was_training)
    return probs


class Classifier:
    """A trained model with its tokenizer and labels: text in, label and probabilities out."""

    def __init__(self, model: TransformerClassifier, tokenizer: TextTokenizer, info: ClassifierInfo):
        self.model, self.tokenizer, self.info = model.eval(), tokenizer, info
        self.encode = TextEncoder(tokenizer, info.max_len, info.lowercase)

    @classmethod
    def load(cls, directory: str | Path) -> "Classifier":
        return cls(*load_classifier(directory))

    @property
    def labels(self) -> list[str]:
        return self.info.labels

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        return predict_proba(self.model, self.encode(texts))

    def predict(self, texts: Sequence[str]) -> list[str]:
        return [self.labels[i] for i in self.predict_proba(texts).argmax(axis=1)]


@dataclass
class CsvPredictions:
    rows: int
    empty_text: int  # rows left without a prediction


def predict_csv(
    classifier: Classifier,
    csv_path: str | Path,
    output: str | Path | None = None,
    text_column: str | None = None,
) -> CsvPredictions:
    """Write the input rows, in order, plus ``predicted`` and ``prob_<label>`` per class to ``output`` (a CSV
    file; stdout when None). Rows with an empty text keep empty prediction cells rather than being dropped, so
    output row i is always input row i."""
    table = read_csv(csv_path)
    text_index = table.column(text_column or classifier.info.text_column)
    extra = [table.column(name) for name in classifier.info.extra_text_columns]
    keep = [i for i, row in enumerate(table.rows) if row[text_index].strip()]
    probs = classifier.predict_proba([join_text(table.rows[i], text_index, extra) for i in keep])

    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([*table.header, "predicted", *(f"prob_{label}" for label in classifier.labels)])
    cells = {i: [classifier.labels[int(p.argmax())], *(f"{x:.6f}" for x in p)] for i, p in zip(keep, probs)}
    blank = [""] * (1 + len(classifier.labels))
    for i, row in enumerate(table.rows):
        writer.writerow([*row, *cells.get(i, blank)])
    if output is None:
        sys.stdout.write(buffer.getvalue())
    else:
        atomic_write_bytes(Path(output), buffer.getvalue().encode("utf-8"))
    return CsvPredictions(rows=len(table.rows), empty_text=len(table.rows) - len(keep))


__all__ = ["Classifier", "CsvPredictions", "predict_proba", "predict_csv"]
