"""The user's own corpus as files: languages from suffixes, the three streamed passes, held-out validation, the
tokenizer's sample, parallel encoding, and every bad corpus named in one line with nothing cached from it."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from vaswani.cli import main
from vaswani.data import preprocess
from vaswani.data.cache import load_encoded
from vaswani.data.files import MAX_CORPUS_FILE_BYTES, FileSplit, file_part, local_corpus, read_chunks
from vaswani.data.fingerprints import fingerprint
from vaswani.data.languages import LanguagePair, code_from_suffix, pair_from_files, parse_direction
from vaswani.data.phase_clock import PhaseClock
from vaswani.data.pipeline import prepare_dataset
from vaswani.data.preprocess import prepare_files
from vaswani.errors import ConfigError

GERMAN = ["Ein Hund läuft im Park.", "Eine Katze schläft auf dem Sofa.", "Zwei Kinder spielen Fußball.",
          "Ein Mann fährt Fahrrad.", "Die Frau liest ein Buch."]
ENGLISH = ["A dog runs in the park.", "A cat sleeps on the sofa.", "Two children play football.",
           "A man rides a bike.", "The woman reads a book."]


def corpus_lines(n: int, side: list[str]) -> list[str]:
    """n distinct lines: two of the sentences and the line's number (so every pair is its own)."""
    return [f"{side[i % 5]} {side[(i // 5) % 5]} {i}" for i in range(n)]


@pytest.fixture
def pair_files(write_lines):
    def write(n: int = 200, prefix: str = "train", src: str = "de", tgt: str = "en", gz: bool = False):
        suffix = ".gz" if gz else ""
        return (write_lines(f"{prefix}.{src}{suffix}", corpus_lines(n, GERMAN)),
                write_lines(f"{prefix}.{tgt}{suffix}", corpus_lines(n, ENGLISH)))

    return write


# ---- languages -----------------------------------------------------------------------------------------------


def test_language_codes_from_suffixes_and_settings():
    assert code_from_suffix("corpus/train.fr") == "fr" and code_from_suffix("news.de-en.de.gz") == "de"
    assert code_from_suffix("pairs.tsv") is None and code_from_suffix("train.txt") is None
    assert code_from_suffix("README") is None and code_from_suffix("x.zh_Hant") == "zh_Hant"
    assert pair_from_files("a.fr", "a.en") == LanguagePair("fr", "en")
    assert pair_from_files("a.fr", "a.txt") is None
    pair = parse_direction("yue-en")
    assert (pair.source, pair.target, pair.direction, pair.name) == ("yue", "en", "yue-en", "yue → English")
    assert parse_direction("ar-he").name == "Arabic → Hebrew"
    for bad in ("french-english", "fr", "FR-en", "fr-en-de", "f1-en"):
        with pytest.raises(ConfigError, match=rf"^data.direction={re.escape(repr(bad))}(:| is not a)"):
            parse_direction(bad)


# ---- the three passes ------------------------------------------------------------------------------------------


def test_fingerprint_counts_lines_and_hashes_the_bytes_on_disk(pair_files, write_lines):
    src, tgt = pair_files(120, gz=True)
    tsv = write_lines("more.tsv", b"\xef\xbb\xbfeins\tone\r\nzwei\ttwo")  # BOM, CRLF, no final newline
    split = FileSplit("train", (file_part((src, tgt), "t"), file_part((tsv,), "t")))
    record = fingerprint(split)
    assert record.pairs == 122 and [f.lines for f in record.files] == [120, 120, 2]
    assert record.files[0].sha256 == hashlib.sha256(src.read_bytes()).hexdigest()  # the gzip bytes, as stored
    chunks = list(read_chunks(split, pairs=50))
    assert [(c.start, c.first_line, len(c)) for c in chunks] == [(0, 1, 50), (50, 51, 50), (100, 101, 20),
                                                                 (120, 1, 2)]
    assert chunks[-1].source == [b"eins", b"zwei"] and chunks[-1].target == [b"one\r", b"two"]
    # The same files paired the other way round are another corpus.
    swapped = fingerprint(FileSplit("train", (file_part((tgt, src), "t"), file_part((tsv,), "t"))))
    assert swapped.checksum != record.checksum


def test_a_line_past_the_bound_is_dropped_in_pieces_and_the_pairs_stay_aligned(write_lines, monkeypatch):
    """A line past MAX_LINE_BYTES (here 8) is never held whole: it comes back empty, in its own place, so its pair
    is dropped like any pair with an empty side, and every other pair keeps its partner."""
    from vaswani.data import files

    monkeypatch.setattr(files, "MAX_LINE_BYTES", 8)
    exactly, longer = b"x" * 8, b"y" * 9
    src = write_lines("a.de.gz", ["eins", exactly.decode(), "z" * 30, "vier", "fünf", longer.decode()])
    tgt = write_lines("a.en", ["one", "two", "three", "y" * 17, "five", "six"])  # the last one without a newline
    tgt.write_bytes(tgt.read_bytes()[:-1])
    split = FileSplit("train", (file_part((src, tgt), "t"),))
    assert fingerprint(split).pairs == 6
    for pairs in (1, 2, 6):  # however the chunks fall
        chunks = list(read_chunks(split, pairs=pairs))
        assert [line for chunk in chunks for line in chunk.source] == [b"eins", exactly, b"", b"vier",
                                                                        "fünf".encode(), b""]
        assert [line for chunk in chunks for line in chunk.target] == [b"one", b"two", b"three", b"", b"five",
                                                                        b"six"]


BAD = {
    "different line counts": (lambda w: (w("a.de", ["eins", "zwei", "drei"]), w("a.en", ["one", "two"]))),
    "invalid UTF-8": (lambda w: (w("a.de", b"eins\nzwei \xff\n" + b"drei\n" * 30), w("a.en", ["one"] * 32))),
    "empty file": (lambda w: (w("a.de", b"\n \n"), w("a.en", ["one", "two"]))),
    "gzip cut short": (lambda w: (w("a.de", gzip.compress(b"eins\nzwei\n" * 50)[:-30]), w("a.en", ["x"] * 100))),
    "a file past the bound": (lambda w: (sparse(w("a.de", b""), MAX_CORPUS_FILE_BYTES + 1), w("a.en", ["one"]))),
}


def sparse(path, size: int):
    """``path`` made ``size`` bytes long without taking disk space: nothing may read it."""
    with open(path, "r+b") as handle:
        handle.truncate(size)
    return path


@pytest.mark.parametrize("case", BAD)
def test_a_bad_corpus_is_one_line_and_nothing_is_cached(case, write_lines, tmp_path, capsys):
    src, tgt = BAD[case](write_lines)
    out = tmp_path / "prepared"
    assert main(["prepare", "--src", str(src), "--tgt", str(tgt), "--out", str(out), "--vocab-size", "300"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    expected = {
        "different line counts": f"{src} has 3 lines but {tgt} has 2",
        "invalid UTF-8": f"{src}:2: invalid UTF-8 (byte(s) ff)",
        "empty file": f"{src}: file is empty",
        "gzip cut short": f"{src}: corrupt or truncated gzip file",
        "a file past the bound": f"{src}: {MAX_CORPUS_FILE_BYTES + 1:,} bytes, more than the",
    }[case]
    assert expected in err
    assert not (out / "tokenizer.json").exists() and not list(out.glob("cache/*"))


def test_a_tsv_line_without_a_tab_names_file_and_line(write_lines, tmp_path, capsys):
    tsv = write_lines("pairs.tsv", ["eins\tone", "zwei\ttwo", "drei three"] + ["vier\tfour"] * 20)
    out = tmp_path / "prepared"
    code = main(["prepare", "--tsv", str(tsv), "--src-lang", "de", "--tgt-lang", "en", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.endswith(f"{tsv}:3: expected 2 tab-separated fields (source<TAB>target), found 1")
    assert not (out / "tokenizer.json").exists()


def test_languages_that_cannot_be_told_or_are_no_codes(write_lines, tmp_path, capsys):
    src, tgt = write_lines("a.txt", ["eins"] * 20), write_lines("b.txt", ["one"] * 20)
    assert main(["prepare", "--src", str(src), "--tgt", str(tgt), "--out", str(tmp_path / "p")]) == 2
    assert "cannot tell the languages from" in capsys.readouterr().err
    assert main(["prepare", "--src", str(src), "--tgt", str(tgt), "--src-lang", "German", "--tgt-lang", "en",
                 "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip()
    assert "'German-en' is not a language code" in err or "'German' is not a language code" in err, err


def test_a_test_set_that_repeats_training_pairs_is_warned_about(pair_files, write_lines, tmp_path, caplog):
    src, tgt = pair_files(200)
    test = write_lines("test.tsv", [f"{s}\t{t}" for s, t in zip(corpus_lines(200, GERMAN)[:7],
                                                                 corpus_lines(200, ENGLISH)[:7])] + ["neu\tnew"])
    files = local_corpus([(src, tgt)], tests={"test": (test,)})
    with caplog.at_level("WARNING"):
        data = prepare_dataset(files=files, out_dir=tmp_path / "p", vocab_size=300)
    assert "test sets test: 7 of their pairs also occur in the training data" in caplog.text
    assert list(data.splits) == ["train", "valid", "test"] and data.splits["test"].stats.pairs_in == 8


# ---- validation held out, the tokenizer's sample -----------------------------------------------------------------


def test_held_out_validation_and_the_tokenizer_sample_are_reproducible_and_recorded(pair_files, tmp_path):
    src, tgt = pair_files(400)
    files = local_corpus([(src, tgt)], holdout=25)

    def prepared(name: str, seed: int):
        return prepare_dataset(files=files, out_dir=tmp_path / name, vocab_size=300, tokenizer_sample=100, seed=seed)

    first, again, other = prepared("a", 0), prepared("b", 0), prepared("c", 1)
    held = sorted(set(range(400)) - set(first.splits["train"].line_index.tolist()))
    assert first.held_out.pairs == len(held) == 25 and first.splits["valid"].stats.pairs_in == 25
    assert first.corpora["valid"].source == [corpus_lines(400, GERMAN)[i] for i in held]
    assert first.corpora["valid"].target == [corpus_lines(400, ENGLISH)[i] for i in held]
    info = json.loads((tmp_path / "a" / "tokenizer_info.json").read_text())
    assert info["trained_on"]["sample"]["pairs"] == 100 and info["trained_on"]["sample"]["of"] == 375
    assert info["trained_on"]["sample"]["seed"] == 0 and len(info["trained_on"]["sample"]["indices_sha256"]) == 64
    assert again.tokenizer.fingerprint == first.tokenizer.fingerprint  # the same seed, the same sample
    np.testing.assert_array_equal(again.splits["train"].line_index, first.splits["train"].line_index)
    assert other.splits["train"].line_index.tolist() != first.splits["train"].line_index.tolist()
    # Prepared again: everything comes from the cache, the held-out text included.
    cached = prepared("a", 0)
    assert not cached.tokenizer_trained and cached.splits["train"].stats.from_cache
    assert cached.corpora["valid"].source == first.corpora["valid"].source


def test_without_a_sample_limit_the_tokenizer_learns_every_training_pair(pair_files, tmp_path):
    src, tgt = pair_files(100)
    data = prepare_dataset(files=local_corpus([(src, tgt)]), out_dir=tmp_path / "p", vocab_size=300,
                           tokenizer_sample=None)
    info = json.loads((tmp_path / "p" / "tokenizer_info.json").read_text())
    assert info["trained_on"]["sample"] == {"pairs": 90, "of": 90, "seed": None} and data.held_out.pairs == 10


def test_a_phase_counts_the_cpu_seconds_of_the_workers_it_waited_for():
    clock = PhaseClock()
    with clock("encoding"):  # a worker's work: a process of its own, ended within the phase
        subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    with clock("reading"):
        time.sleep(0.2)  # waiting is no CPU
    assert list(clock.seconds) == list(clock.cpu_seconds) == ["encoding", "reading"]
    assert clock.cpu_seconds["encoding"] >= 0.1  # the worker's, counted though this process only waited
    assert clock.seconds["reading"] >= 0.2 and clock.cpu_seconds["reading"] < 0.1


def test_parallel_encoding_writes_the_same_cache_as_one_process(pair_files, tokenizer, tmp_path, monkeypatch):
    src, tgt = pair_files(3000, gz=True)
    split = FileSplit("train", (file_part((src, tgt), "t"),))
    record = fingerprint(split)
    exclude = np.array([3, 17, 2999])
    monkeypatch.setattr(preprocess, "PARALLEL_MIN_PAIRS", 1)
    monkeypatch.setattr(preprocess, "read_chunks", lambda split: read_chunks(split, pairs=700))  # several chunks

    def encode(name: str, workers: int):
        from vaswani.data.corpora import CorpusInfo

        info = CorpusInfo("local", "train", "de", "en", f"{record.checksum}-{name}")
        return prepare_files(split, info, record.pairs, tokenizer, tmp_path / name, max_len=16, exclude=exclude,
                             workers=workers)

    one, two = encode("one", 1), encode("two", 2)
    assert one.stats.pairs_in == 2997 and one.stats.dropped["too_long"] > 0  # max_len 16 drops the long lines
    for name in ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets", "line_index"):
        np.testing.assert_array_equal(getattr(one, name), getattr(two, name))
    assert not set(exclude) & set(one.line_index.tolist())
    line = int(one.line_index[5])
    assert one.source(5).tolist() == tokenizer.encode(corpus_lines(3000, GERMAN)[line])
    reloaded = load_encoded(two.path, tokenizer)  # what was streamed to disk is a whole cache
    assert (reloaded.stats.pairs_kept, reloaded.stats.dropped) == (two.stats.pairs_kept, two.stats.dropped)
    assert reloaded.stats.from_cache and len(reloaded) == len(one)
