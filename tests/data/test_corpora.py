"""The dataset registry against the real files, directions, local corpora and the HF hub conversion."""

from __future__ import annotations

import re
import sys

import pytest

from vaswani.data.corpora import corpus_from_hub, load_corpus, load_parallel_files, load_tsv, load_wmt17_train
from vaswani.data.registry import DATASETS
from vaswani.errors import DataError
from vaswani.io import file_sha256


def source_md_table(path) -> dict[str, tuple[int, str]]:
    """file -> (lines, sha256) from a SOURCE.md table."""
    rows = re.findall(r"^\| ([\w./-]+) \| (\d+) \| \d+ \| ([0-9a-f]{64}) \|$", path.read_text(), flags=re.M)
    return {name: (int(lines), sha) for name, lines, sha in rows}


def test_registry_matches_source_md_and_files(data_dir):
    """Every registered file exists, has the sha256 that SOURCE.md lists, and its URL names the same file."""
    checked = set()
    for spec in DATASETS.values():
        for split in spec.splits.values():
            for pair in split.parts:
                for remote in pair:
                    folder, rest = remote.path.split("/", 1)
                    table = source_md_table(data_dir / folder / "SOURCE.md")
                    assert table[rest][1] == remote.sha256, remote.path
                    assert file_sha256(data_dir / remote.path) == remote.sha256, remote.path
                    assert remote.url.startswith("https://") and remote.url.endswith("/" + rest.split("/")[-1])
                    checked.add(remote.path)
    assert len(checked) == 8 + 20 + 18  # every file of every SOURCE.md table


@pytest.mark.parametrize(
    "dataset, split, expected_split, pairs",
    [
        ("multi30k", "train", "train", 29000),
        ("multi30k", "val", "val", 1014),
        ("multi30k", "test", "test2016", 1000),
        ("multi30k", "test2017", "test2017", 1000),
        ("wmt17", "val", "newstest2016", 2999),
        ("wmt17", "test", "newstest2017", 3004),
        ("wmt17", "newstest2014", "newstest2014", 3003),
        ("wmt17", "news-test2008", "news-test2008", 2051),
        ("wmt17", "train-extra", "train-extra", 21243),
        ("iwslt", "val", "tst2013", 993),
        ("iwslt", "test", "tst2014", 1305),
        ("iwslt", "tedx-dev2012", "tedx-dev2012", 1165),
    ],
)
def test_splits_have_the_documented_sizes(data_dir, dataset, split, expected_split, pairs):
    corpus = load_corpus(dataset, split, data_dir=data_dir, download=False)
    assert (corpus.name, corpus.split, len(corpus), len(corpus.target)) == (dataset, expected_split, pairs, pairs)
    assert (corpus.src_lang, corpus.tgt_lang) == ("de", "en")


def test_first_lines_and_direction_swap(data_dir):
    de_en = load_corpus("wmt17", "test", data_dir=data_dir, download=False)
    en_de = load_corpus("wmt17", "test", direction="en-de", data_dir=data_dir, download=False)
    assert de_en.source[0] == "28-jähriger Koch in San Francisco Mall tot aufgefunden"
    assert de_en.target[0] == "28-Year-Old Chef Found Dead at San Francisco Mall"
    assert en_de.source == de_en.target and en_de.target == de_en.source
    assert (en_de.src_lang, en_de.tgt_lang, en_de.direction) == ("en", "de", "en-de")
    # Same files, other direction: a cache keyed by the checksum must not confuse the two.
    assert en_de.checksum != de_en.checksum


def test_train_extra_concatenates_the_old_test_sets_in_order(data_dir):
    extra = load_corpus("wmt17", "train-extra", data_dir=data_dir, download=False)
    first = load_corpus("wmt17", "news-test2008", data_dir=data_dir, download=False)
    last = load_corpus("wmt17", "newstest2015", data_dir=data_dir, download=False)
    assert extra.source[: len(first)] == first.source
    assert extra.target[-len(last):] == last.target


def test_iwslt_has_no_train_split(data_dir):
    with pytest.raises(DataError, match="no 'train' split.*not available.*--src/--tgt"):
        load_corpus("iwslt", "train", data_dir=data_dir)


def test_local_files_plain_and_gzip(write_lines):
    src = write_lines("a.de.gz", ["Ein Hund läuft.", "Zwei Katzen."])
    tgt = write_lines("a.en", ["A dog runs.", "Two cats."])
    corpus = load_parallel_files(src, tgt)
    assert corpus.source == ["Ein Hund läuft.", "Zwei Katzen."] and corpus.target == ["A dog runs.", "Two cats."]
    assert len(corpus.checksum) == 64 and corpus.split == "train"


def test_lines_split_only_on_newline(write_lines):
    """\\u2028, \\x0b and \\x1c are characters inside a sentence, not line ends; CRLF endings are removed."""
    src = write_lines("s.de", [])
    src.write_bytes("eins\u2028zwei\r\ndrei\x0bvier\x1c\n".encode())
    tgt = write_lines("s.en", ["one two", "three four"])
    corpus = load_parallel_files(src, tgt)
    assert corpus.source == ["eins\u2028zwei", "drei\x0bvier\x1c"]


def test_tsv(write_lines):
    corpus = load_tsv(write_lines("p.tsv", ["Hallo Welt\tHello world", "Danke\tThanks"]))
    assert corpus.source == ["Hallo Welt", "Danke"] and corpus.target == ["Hello world", "Thanks"]


def test_tsv_line_without_tab_names_the_line(write_lines):
    path = write_lines("bad.tsv", ["Hallo\tHello", "kein Tab hier"])
    with pytest.raises(DataError, match=rf"{re.escape(str(path))}:2: expected 2 tab-separated fields.*found 1"):
        load_tsv(path)


def test_hub_rows_become_a_corpus():
    datasets = pytest.importorskip("datasets")
    rows = datasets.Dataset.from_dict(
        {"translation": [{"de": "Guten Morgen", "en": "Good morning"}, {"de": "Tschüss", "en": "Bye"}] * 3}
    )
    de_en = corpus_from_hub(rows, name="wmt17", split="train", batch_size=4)  # batches cross a boundary
    en_de = corpus_from_hub(rows, name="wmt17", split="train", direction="en-de")
    assert de_en.source == ["Guten Morgen", "Tschüss"] * 3 and de_en.target == ["Good morning", "Bye"] * 3
    assert en_de.source == de_en.target and en_de.checksum != de_en.checksum
    # The same content through a plain iterable of rows gives the same corpus.
    assert corpus_from_hub(list(rows), name="wmt17", split="train").checksum == de_en.checksum


def test_hub_rows_with_wrong_schema_are_rejected():
    datasets = pytest.importorskip("datasets")
    with pytest.raises(DataError, match="expected a 'translation' column"):
        corpus_from_hub(datasets.Dataset.from_dict({"text": ["x"]}), name="wmt17", split="train")
    rows = datasets.Dataset.from_dict({"translation": [{"de": "a", "en": "b"}, {"de": "c", "en": None}]})
    with pytest.raises(DataError, match=r"row 1: expected a translation with string fields 'de' and 'en'"):
        corpus_from_hub(rows, name="wmt17", split="train")


def test_wmt17_train_without_datasets_explains_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` raise ImportError
    with pytest.raises(DataError, match=r"pip install 'vaswani\[wmt\]'.*train-extra"):
        load_wmt17_train()
