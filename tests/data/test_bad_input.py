"""Bad input is a DataError whose message names the file, the line when there is one, and the problem."""

from __future__ import annotations

import io
import re

import pytest

from vaswani.data.cache import load_encoded
from vaswani.data.corpora import ParallelCorpus, load_corpus, load_parallel_files
from vaswani.data.preprocess import prepare
from vaswani.data.textfiles import check_unicode_text, read_lines, read_stream_lines, read_text_file, unicode_problem
from vaswani.data.tokenizer import Tokenizer
from vaswani.errors import DataError


def test_different_line_counts_name_both_files_and_counts(write_lines):
    src = write_lines("train.de", ["eins", "zwei", "drei"])
    tgt = write_lines("train.en.gz", ["one", "two"])
    with pytest.raises(DataError) as error:
        load_parallel_files(src, tgt)
    message = str(error.value)
    assert f"{src} has 3 lines" in message and f"{tgt} has 2" in message


def test_invalid_utf8_names_file_and_line(write_lines):
    src = write_lines("bad.de", b"gut\nauch gut\nkaputt \xff\xfe hier\n")
    tgt = write_lines("ok.en", ["good", "also good", "broken here"])
    with pytest.raises(DataError, match=rf"^{re.escape(str(src))}:3: invalid UTF-8 \(byte\(s\) ff\)"):
        load_parallel_files(src, tgt)


def test_invalid_utf8_inside_gzip_names_the_line(write_lines):
    src = write_lines("bad.de.gz", b"eins\nzwei\xc3\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(src))}:2: invalid UTF-8"):
        load_parallel_files(src, write_lines("ok.en", ["one", "two"]))


def test_stdin_is_read_like_a_file(write_lines):
    """translate reads stdin, evaluate and prepare read files: the same lines from the same bytes."""
    data = "\ufeffeins\r\nzwei\rdrei\nvier".encode()  # byte-order mark, CRLF, a lone \r inside a line
    expected = ["eins", "zwei\rdrei", "vier"]
    for name in ("plain.de", "packed.de.gz"):
        path = write_lines(name, data)
        assert read_text_file(path).lines == read_lines(path) == expected
        assert read_stream_lines(io.TextIOWrapper(io.BytesIO(path.read_bytes()), encoding="utf-8")) == expected
    with pytest.raises(DataError, match=r"^standard input:2: invalid UTF-8 \(byte\(s\) e4\)"):
        read_stream_lines(io.TextIOWrapper(io.BytesIO(b"eins\nM\xe4nn\n"), encoding="utf-8"))


def test_text_python_decoded_from_bad_bytes_names_those_bytes():
    assert check_unicode_text("Männer", "--text") == "Männer"
    with pytest.raises(DataError, match=r"^--text: invalid UTF-8 \(byte\(s\) e4\); the text must be UTF-8"):
        check_unicode_text("M\udce4nn", "--text")  # argv b"M\xe4nn" under a UTF-8 locale
    assert unicode_problem("ab\ud800") == ("lone surrogate \\ud800 at character 3 is not a Unicode character; "
                                           "send Unicode text")  # from a JSON escape: no byte behind it
    assert unicode_problem("Männer") is None


def test_empty_file(write_lines):
    src = write_lines("empty.de", b"\n  \n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(src))}: file is empty"):
        load_parallel_files(src, write_lines("ok.en", ["one"]))


def test_missing_file(tmp_path, write_lines):
    missing = tmp_path / "nope.de"
    with pytest.raises(DataError, match=rf"^{re.escape(str(missing))}: file not found"):
        load_parallel_files(missing, write_lines("ok.en", ["one"]))


def test_corrupt_gzip(write_lines):
    src = write_lines("cut.de", b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(DataError, match=rf"^{re.escape(str(src))}: corrupt or truncated gzip"):
        load_parallel_files(src, write_lines("ok.en", ["one"]))


def test_unknown_dataset_lists_the_valid_ones():
    with pytest.raises(DataError, match=r"unknown dataset 'wmt14'; valid datasets: multi30k, wmt17, iwslt"):
        load_corpus("wmt14", "train")


def test_unknown_split_lists_the_valid_ones():
    with pytest.raises(DataError) as error:
        load_corpus("multi30k", "dev2010")
    message = str(error.value)
    assert "dataset 'multi30k' has no split 'dev2010'" in message
    for name in ("train", "val", "test2016", "test2017", "test (= test2016)"):
        assert name in message


def test_registered_file_with_wrong_content(tmp_path):
    """A data dir holding a different file under a registered name is refused, not silently used."""
    (tmp_path / "multi30k").mkdir()
    for lang in ("de", "en"):
        (tmp_path / "multi30k" / f"val.{lang}.gz").write_bytes(b"not the real file\n")
    with pytest.raises(DataError, match=r"multi30k/val.de.gz: sha256 is [0-9a-f]{64} but f0cba2f9\w+ was expected"):
        load_corpus("multi30k", "val", data_dir=tmp_path)


def test_cache_written_by_another_tokenizer(tokenizer, tmp_path):
    corpus = ParallelCorpus("toy", "train", ["Ein Hund läuft."], ["A dog runs."], "de", "en", checksum="toy")
    encoded = prepare(corpus, tokenizer, tmp_path)
    other = Tokenizer.train(["ganz andere Wörter", "other words"] * 3, vocab_size=300)
    with pytest.raises(DataError) as error:
        load_encoded(encoded.path, other)
    message = str(error.value)
    assert str(encoded.path / "meta.json") in message and "written by another tokenizer" in message
    assert tokenizer.fingerprint[:12] in message and other.fingerprint[:12] in message


def test_a_gzip_file_that_decompresses_past_the_limit_is_refused_while_it_is_read(tmp_path, monkeypatch):
    import gzip

    from vaswani.data import textfiles

    bomb = tmp_path / "bomb.de.gz"
    bomb.write_bytes(gzip.compress(b"a" * (3 << 20) + b"\n"))  # 3 MB of text in 3 KB
    assert bomb.stat().st_size < 10_000
    monkeypatch.setattr(textfiles, "MAX_TEXT_BYTES", 1 << 20)
    read = []
    real_read = gzip.GzipFile.read

    def counting(self, size=-1):  # noqa: ANN001 - GzipFile.read's
        chunk = real_read(self, size)
        read.append(len(chunk))
        return chunk

    monkeypatch.setattr(gzip.GzipFile, "read", counting)
    with pytest.raises(DataError, match=rf"{bomb}: decompresses to more than 1,048,576 bytes"):
        textfiles.read_lines(bomb)
    assert sum(read) <= (1 << 20) + textfiles.GZIP_CHUNK  # stopped a chunk past the limit, not at the end
    monkeypatch.setattr(textfiles, "MAX_TEXT_BYTES", 4 << 20)
    assert textfiles.read_lines(bomb) == ["a" * (3 << 20)]  # within the limit: read whole, as before
