"""Labelled texts from a CSV file: reading, validation, label ids and the stratified train/validation split.

    data = load_dataset("train.csv", TrainSettings(text_column="text", label_column="target"))
    train_texts, train_ids = data.split("train")

Any CSV with a header works: one column holds the text, one the label (binary or multi-class, numbers or
strings). Files are read with the ``csv`` module because real exports (the Kaggle tweets among them) quote fields
that contain newlines, so a record can span several lines; messages name the *line* where a record ends, which
is what an editor shows, and the record number.
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from vaswani.classification.settings import TrainSettings
from vaswani.data.textfiles import MAX_TEXT_BYTES
from vaswani.errors import DataError


@dataclass
class CsvTable:
    path: Path
    header: list[str]
    rows: list[list[str]]
    lines: list[int]  # line number (1-based) on which each record ends, for error messages

    def column(self, name: str) -> int:
        """Index of a column, or a DataError that lists the columns the file does have."""
        if name not in self.header:
            available = ", ".join(repr(c) for c in self.header)
            raise DataError(f"{self.path}: no column {name!r} in the header; available columns: {available}")
        return self.header.index(name)


@dataclass
class LabeledTexts:
    texts: list[str]
    labels: list[str]  # as written in the file
    skipped_empty_text: int  # rows whose text was empty or whitespace, left out
    skipped_empty_label: int  # rows without a label, left out


def read_csv(path: str | Path) -> CsvTable:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found" if not path.exists() else f"{path}: not a file")
    if path.stat().st_size > MAX_TEXT_BYTES:
        raise DataError(f"{path}: {path.stat().st_size:,} bytes, more than the {MAX_TEXT_BYTES:,} vaswani reads from "
                        "one text file; split it")
    header: list[str] | None = None
    rows, lines = [], []
    try:
        # utf-8-sig drops the byte-order mark spreadsheet programs put first; newline="" lets csv handle CRLF and
        # newlines inside quoted fields.
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            for record in reader:
                if header is None:
                    header = [name.strip() for name in record]
                    continue
                if not record:  # a blank line between records
                    continue
                if len(record) != len(header):
                    raise DataError(
                        f"{path}: line {reader.line_num} (record {len(rows) + 1}): {len(record)} fields, but the "
                        f"header has {len(header)} ({', '.join(header)}); check the quoting of that record"
                    )
                rows.append(record)
                lines.append(reader.line_num)
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text (byte {error.start}: {error.reason}); re-save it as UTF-8") from None
    except csv.Error as error:
        raise DataError(f"{path}: unreadable CSV ({error})") from None
    if header is None or not any(header):
        raise DataError(f"{path}: the file is empty; expected a header line and data rows")
    if not rows:
        raise DataError(f"{path}: the file has a header ({', '.join(header)}) but no data rows")
    return CsvTable(path, header, rows, lines)


def join_text(row: Sequence[str], text_index: int, extra_indices: Sequence[int] = ()) -> str:
    """The text the model sees: optional extra columns (e.g. a keyword) first, then the text column."""
    parts = [row[i].strip() for i in extra_indices] + [row[text_index].strip()]
    return " ".join(p for p in parts if p)


def read_labeled_csv(
    path: str | Path,
    text_column: str,
    label_column: str,
    extra_text_columns: Sequence[str] = (),
) -> LabeledTexts:
    """Texts and labels of every usable row. Rows with an empty text or label are skipped and counted."""
    table = read_csv(path)
    text_index, label_index = table.column(text_column), table.column(label_column)
    extra = [table.column(name) for name in extra_text_columns]
    texts, labels = [], []
    empty_text = empty_label = 0
    for row in table.rows:
        if not row[text_index].strip():
            empty_text += 1
        elif not row[label_index].strip():
            empty_label += 1
        else:
            texts.append(join_text(row, text_index, extra))
            labels.append(row[label_index].strip())
    if not texts:
        raise DataError(
            f"{table.path}: none of the {len(table.rows)} rows has both a text in column {text_column!r} and a "
            f"label in column {label_column!r}"
        )
    classes = sorted_labels(labels)
    if len(classes) < 2:
        raise DataError(
            f"{table.path}: column {label_column!r} has a single class ({classes[0]!r}) in all {len(texts)} usable "
            "rows; a classifier needs at least two"
        )
    return LabeledTexts(texts, labels, empty_text, empty_label)


def sorted_labels(labels: Sequence[str]) -> list[str]:
    """Distinct labels in a stable order: numerically if they are all integers ("2" before "10"), else by text."""
    distinct = set(labels)
    try:
        return sorted(distinct, key=int)
    except ValueError:
        return sorted(distinct)


def stratified_split(labels: Sequence[str], val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Row indices (train, validation), each class in the same proportion on both sides, fixed by ``seed``."""
    from sklearn.model_selection import train_test_split

    if not 0.0 < val_fraction < 1.0:
        raise DataError(f"--val-fraction must be between 0 and 1, got {val_fraction}")
    counts = Counter(labels)
    rare = sorted(label for label, n in counts.items() if n < 2)
    if rare:
        raise DataError(
            f"label(s) {', '.join(map(repr, rare))} occur only once; a stratified train/validation split needs at "
            "least two rows of every class"
        )
    n_val = round(len(labels) * val_fraction)
    if n_val < len(counts) or len(labels) - n_val < len(counts):
        raise DataError(
            f"{len(labels)} rows are too few to hold out {val_fraction:.0%} for validation with {len(counts)} "
            "classes on each side"
        )
    indices = list(range(len(labels)))
    train, val = train_test_split(indices, test_size=n_val, stratify=list(labels), random_state=seed)
    return sorted(train), sorted(val)


@dataclass
class Dataset:
    """Usable rows of the CSV with label ids, and which of them are training and validation rows."""

    texts: list[str]
    label_ids: list[int]
    labels: list[str]  # id -> label as written in the file
    train_index: list[int]
    val_index: list[int]
    skipped_empty_text: int = 0
    skipped_empty_label: int = 0

    def split(self, which: str) -> tuple[list[str], list[int]]:
        index = self.train_index if which == "train" else self.val_index
        return [self.texts[i] for i in index], [self.label_ids[i] for i in index]


def load_dataset(csv_path: str | Path, settings: TrainSettings) -> Dataset:
    labelled = read_labeled_csv(csv_path, settings.text_column, settings.label_column, settings.extra_text_columns)
    labels = sorted_labels(labelled.labels)
    label_id = {label: i for i, label in enumerate(labels)}
    label_ids = [label_id[label] for label in labelled.labels]
    split_seed = settings.seed if settings.split_seed is None else settings.split_seed
    train_index, val_index = stratified_split(labelled.labels, settings.val_fraction, split_seed)
    return Dataset(
        labelled.texts, label_ids, labels, train_index, val_index,
        labelled.skipped_empty_text, labelled.skipped_empty_label,
    )


__all__ = [
    "CsvTable", "LabeledTexts", "Dataset", "load_dataset", "read_csv", "read_labeled_csv", "join_text",
    "sorted_labels", "stratified_split",
]
