"""Reading labelled CSV files: every kind of bad input is a DataError that names the file, line and column."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from vaswani.classification.data import read_csv, read_labeled_csv, sorted_labels, stratified_split
from vaswani.errors import DataError


def test_quoted_newlines_crlf_bom_and_string_labels(tmp_path: Path, csv_file) -> None:
    path = csv_file(tmp_path / "a.csv", ["id", "text", "label"], [
        ["1", "first line\nsecond line, with a comma", "spam"],
        ["2", 'she said "hi"', "ham"],
        ["3", "third", "spam"],
    ])
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())  # spreadsheet programs write a byte-order mark
    data = read_labeled_csv(path, "text", "label")
    assert data.texts == ["first line\nsecond line, with a comma", 'she said "hi"', "third"]
    assert data.labels == ["spam", "ham", "spam"]
    assert read_csv(path).lines == [3, 4, 5]  # the first record spans lines 2-3


def test_extra_text_columns_are_prepended(tmp_path: Path, csv_file) -> None:
    path = csv_file(tmp_path / "a.csv", ["keyword", "text", "y"], [["fire", "it burns", "1"], ["", "calm", "0"]])
    assert read_labeled_csv(path, "text", "y", ["keyword"]).texts == ["fire it burns", "calm"]


def test_missing_file() -> None:
    with pytest.raises(DataError, match="nowhere.csv: file not found"):
        read_labeled_csv("nowhere.csv", "text", "target")


def test_empty_file_and_header_only(tmp_path: Path, csv_file) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataError, match="empty.csv: the file is empty"):
        read_labeled_csv(empty, "text", "target")
    header_only = tmp_path / "header.csv"
    header_only.write_text("text,target\r\n")
    with pytest.raises(DataError, match="header.csv: the file has a header .* but no data rows"):
        read_labeled_csv(header_only, "text", "target")


def test_missing_column_is_named_and_available_columns_listed(tmp_path: Path, csv_file) -> None:
    path = csv_file(tmp_path / "a.csv", ["id", "tweet", "target"], [["1", "x", "0"], ["2", "y", "1"]])
    with pytest.raises(DataError) as error:
        read_labeled_csv(path, "text", "target")
    message = str(error.value)
    assert "a.csv" in message and "no column 'text'" in message
    assert "available columns: 'id', 'tweet', 'target'" in message


def test_single_class_is_refused(tmp_path: Path, csv_file) -> None:
    path = csv_file(tmp_path / "a.csv", ["text", "target"], [["a", "1"], ["b", "1"], ["c", "1"]])
    with pytest.raises(DataError, match=r"column 'target' has a single class \('1'\) in all 3 usable rows"):
        read_labeled_csv(path, "text", "target")


def test_rows_with_empty_text_or_label_are_skipped_and_counted(tmp_path: Path, csv_file) -> None:
    path = csv_file(tmp_path / "a.csv", ["text", "target"], [
        ["a", "0"], ["   ", "1"], ["", "0"], ["b", ""], ["c", "1"],
    ])
    data = read_labeled_csv(path, "text", "target")
    assert (data.texts, data.labels) == (["a", "c"], ["0", "1"])
    assert (data.skipped_empty_text, data.skipped_empty_label) == (2, 1)
    nothing = csv_file(tmp_path / "b.csv", ["text", "target"], [["", "0"], [" ", "1"]])
    with pytest.raises(DataError, match="none of the 2 rows has both a text"):
        read_labeled_csv(nothing, "text", "target")


def test_wrong_field_count_names_the_line(tmp_path: Path, csv_file) -> None:
    path = tmp_path / "a.csv"
    path.write_text('text,target\r\n"ok",1\r\n"multi\nline",0\r\ntoo,many,fields\r\n')
    with pytest.raises(DataError, match=r"a.csv: line 5 \(record 3\): 3 fields, but the header has 2"):
        read_labeled_csv(path, "text", "target")


def test_not_utf8(tmp_path: Path, csv_file) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes("text,target\nfa\xe7ade,1\n".encode("latin-1"))
    with pytest.raises(DataError, match="latin1.csv: not UTF-8"):
        read_csv(path)


def test_labels_sort_numerically_when_they_are_numbers() -> None:
    assert sorted_labels(["10", "2", "1", "2"]) == ["1", "2", "10"]
    assert sorted_labels(["pos", "neg", "neutral"]) == ["neg", "neutral", "pos"]


def test_stratified_split_keeps_proportions_and_follows_the_seed() -> None:
    labels = ["a"] * 60 + ["b"] * 30 + ["c"] * 10
    train, val = stratified_split(labels, 0.2, seed=3)
    assert sorted(train + val) == list(range(100)) and not set(train) & set(val)
    assert Counter(labels[i] for i in val) == {"a": 12, "b": 6, "c": 2}
    assert stratified_split(labels, 0.2, seed=3) == (train, val)
    assert stratified_split(labels, 0.2, seed=4) != (train, val)
    with pytest.raises(DataError, match="'z' occur only once"):
        stratified_split(labels + ["z"], 0.2, seed=0)


def test_the_real_disaster_tweets_file(tweets_csv: Path) -> None:
    data = read_labeled_csv(tweets_csv, "text", "target")
    assert len(data.texts) == 7613 and Counter(data.labels) == {"0": 4342, "1": 3271}
    assert sum("\n" in t for t in data.texts) == 435  # quoted newlines survived, inside their texts
    train, val = stratified_split(data.labels, 0.15, seed=0)
    assert (len(train), len(val)) == (6471, 1142)
    assert Counter(data.labels[i] for i in val)["1"] == round(1142 * 3271 / 7613)
