"""Encoding once: the length rule, statistics, the on-disk cache and its checks."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from vaswani.data.cache import load_encoded
from vaswani.data.corpora import ParallelCorpus, load_corpus
from vaswani.data.preprocess import encode_corpus, prepare
from vaswani.data.tokenizer import Tokenizer
from vaswani.errors import DataError


def make_corpus(source, target, name="toy") -> ParallelCorpus:
    return ParallelCorpus(name, "train", list(source), list(target), "de", "en", checksum=f"{name}-{len(source)}")


def test_length_rule_counts_the_added_special_token(tokenizer):
    """A side with n BPE tokens needs n + 1 positions: kept iff n + 1 <= max_len."""
    text = "Ein kleiner Hund rennt über die grüne Wiese."
    n = len(tokenizer.encode(text))
    corpus = make_corpus(
        [text, "  ", "Hallo", text, "Guten Tag"],
        ["A small dog runs across the green meadow.", "Empty source", "", "ok", "Good day"],
    )
    n_tgt = len(tokenizer.encode("A small dog runs across the green meadow."))
    max_len = max(n, n_tgt) + 1  # exactly fits pair 0
    enc = encode_corpus(corpus, tokenizer, max_len=max_len)
    assert enc.line_index.tolist() == [0, 3, 4]
    assert enc.stats.dropped == {"empty": 2, "too_long": 0}
    shorter = encode_corpus(corpus, tokenizer, max_len=max_len - 1)
    assert shorter.line_index.tolist() == [3, 4]
    assert shorter.stats.dropped == {"empty": 2, "too_long": 1}
    assert (shorter.stats.pairs_in, shorter.stats.pairs_kept) == (5, 2)
    # Views give back exactly the encoder's ids, as compact unsigned ints.
    assert enc.source(0).tolist() == tokenizer.encode(text) and enc.target(2).tolist() == tokenizer.encode("Good day")
    assert enc.src_ids.dtype == np.uint16 and enc.src_offsets.dtype == np.int64
    assert enc.src_lengths.tolist() == [n, len(tokenizer.encode(text)), len(tokenizer.encode("Guten Tag"))]


def test_statistics(tokenizer):
    corpus = make_corpus(["eins zwei drei", "vier"], ["one two three", "four"])
    stats = encode_corpus(corpus, tokenizer).stats
    src = [len(tokenizer.encode(t)) for t in corpus.source]
    assert stats.src_tokens_max == max(src) and stats.src_tokens_mean == pytest.approx(np.mean(src))
    assert stats.vocab_size == tokenizer.vocab_size and stats.max_len == 64
    assert "2/2 pairs kept" in stats.summary()


def test_repeated_words_and_lines_get_the_tokenizers_ids(tokenizer):
    """The encoder remembers words it has seen: what it copies is what the tokenizer gives each line."""
    source = ["Ein Hund.", "Eine Katze.", "Ein Hund.", "", "Ein  Hund\tbellt.", "Zwei Vögel."] * 3
    target = ["A dog.", "A cat.", "A dog.", "x", "A dog  barks.", "Two birds."] * 3
    encoded = encode_corpus(make_corpus(source, target), tokenizer)
    kept = [i for i, text in enumerate(source) if text]
    assert encoded.line_index.tolist() == kept
    for pair, line in enumerate(kept):
        assert encoded.source(pair).tolist() == tokenizer.encode(source[line])
        assert encoded.target(pair).tolist() == tokenizer.encode(target[line])


def test_second_call_loads_the_cache_without_encoding(tokenizer, data_dir, tmp_path, monkeypatch):
    corpus = load_corpus("multi30k", "val", data_dir=data_dir, download=False)
    first = prepare(corpus, tokenizer, tmp_path)
    assert not first.stats.from_cache and first.stats.pairs_in == 1014
    assert first.stats.pairs_kept + sum(first.stats.dropped.values()) == 1014

    def fail(*args, **kwargs):
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(Tokenizer, "encode_batch", fail)
    second = prepare(corpus, tokenizer, tmp_path)
    assert second.stats.from_cache and second.path == first.path
    assert len(second) == len(first) and isinstance(second.src_ids, np.memmap)
    np.testing.assert_array_equal(second.tgt_ids, first.tgt_ids)
    np.testing.assert_array_equal(second.src_offsets, first.src_offsets)
    assert second.target(5).tolist() == first.target(5).tolist()
    # Other settings get another cache entry rather than a wrong one.
    monkeypatch.undo()
    assert prepare(corpus, tokenizer, tmp_path, max_len=20).path != first.path


def test_damaged_cache_is_a_data_error(tokenizer, tmp_path):
    encoded = prepare(make_corpus(["Ein Hund."], ["A dog."]), tokenizer, tmp_path)
    (encoded.path / "tgt_ids.npy").unlink()
    with pytest.raises(DataError, match=r"tgt_ids.npy: missing, though .*vaswani.json lists it; delete"):
        load_encoded(encoded.path, tokenizer)
    with pytest.raises(DataError, match="not a preprocessed-data cache"):
        load_encoded(tmp_path / "nothing", tokenizer)


def test_pickled_cache_backed_corpus_carries_the_path_not_the_arrays(tokenizer, tmp_path):
    corpus = make_corpus(["Ein Hund läuft schnell."] * 2000, ["A dog runs fast."] * 2000)
    encoded = load_encoded(prepare(corpus, tokenizer, tmp_path).path)
    blob = pickle.dumps(encoded)
    assert len(blob) < encoded.src_ids.nbytes
    copy = pickle.loads(blob)
    np.testing.assert_array_equal(copy.src_ids, encoded.src_ids)
    assert copy[1999][2].tolist() == tokenizer.encode("A dog runs fast.")


def test_a_corpus_where_nothing_survives(tokenizer):
    with pytest.raises(DataError, match=r"no pair survives preprocessing \(1 with an empty side"):
        encode_corpus(make_corpus([""], ["x"]), tokenizer)
