"""Translator (strings in, strings out) and `vaswani translate`, with a random tiny checkpoint and a real BPE.

Tests that compare translations with each other run in fp32 on whatever device the suite uses: "auto" precision is
bf16 on a GPU (and on CPUs with bf16 units), where batching and padding may round a near tie the other way."""

from __future__ import annotations

import io
import sys

import pytest

from vaswani.cli import main
from vaswani.decoding import EngineOptions, SearchConfig, Translator


def beam2_fp32(checkpoint, device) -> Translator:
    """The translations the `vaswani translate --beam 2 --precision fp32` commands below must print."""
    return Translator.load(checkpoint, SearchConfig(beam_size=2, precision="fp32"),
                           options=EngineOptions(device=device))


@pytest.fixture(scope="module")
def translator(tiny_checkpoint, device) -> Translator:
    config = SearchConfig(beam_size=2, nbest=2, max_len_a=0.5, max_len_b=5, precision="fp32")  # short: fast tests
    return Translator.load(tiny_checkpoint, config, batch_size=4, options=EngineOptions(device=device))


def test_output_order_equals_input_order_whatever_the_batching(translator: Translator, test_pairs) -> None:
    sources = test_pairs[0][:8]
    batched = translator.translate(sources)
    alone = [translator.translate([s])[0] for s in sources]
    assert batched == alone  # sorting by length, batching and padding change nothing
    assert translator.translate(sources[::-1]) == batched[::-1]
    assert len(set(batched)) > 1  # different sources, different outputs: results are not shuffled copies


def test_progress_in_a_log_is_lines_and_changes_no_translation(translator: Translator, test_pairs,
                                                                monkeypatch, capsys) -> None:
    monkeypatch.setenv("VASWANI_PROGRESS_SECONDS", "1e-9")  # a line after every batch (batch_size 4)
    sources = test_pairs[0][:8]
    quiet = translator.translate(sources)
    assert capsys.readouterr().err == ""
    assert translator.translate(sources, progress=True) == quiet
    lines = capsys.readouterr().err.splitlines()  # captured: stderr is no terminal
    counts = [line.split(" (")[0] for line in lines[:2]]
    assert counts == ["translating: 4/8 sentences", "translating: 8/8 sentences"]
    assert lines[-1].startswith("translating: 8 sentences in ") and len(lines) == 3


def test_nbest_is_scored_best_first_and_blank_lines_stay_blank(translator: Translator, test_pairs) -> None:
    sources = [test_pairs[0][0], "", "   ", test_pairs[0][1]]
    nbest = translator.translate_nbest(sources)
    assert [len(n) for n in nbest] == [2, 1, 1, 2]
    assert nbest[1][0].text == nbest[2][0].text == ""
    for n in (nbest[0], nbest[3]):
        assert n[0].score >= n[1].score
        assert all(t.length >= 1 and t.log_prob <= 0 for t in n)


def test_batches_are_length_sorted_within_both_budgets(translator: Translator) -> None:
    sources = [[5] * n for n in (3, 10, 7, 1, 10, 2, 8)]
    translator.max_tokens = 2 * 10 * 2  # beam 2: two sentences of 10 tokens fill a batch
    try:
        groups = list(translator.batches(sources))
    finally:
        translator.max_tokens = 8192
    assert sorted(i for g in groups for i in g) == list(range(len(sources)))
    assert all(len(g) <= translator.batch_size for g in groups)
    assert groups[0] == [1, 4]  # the two longest together, within 40 padded tokens × beams
    lengths = [len(sources[i]) for g in groups for i in g]
    assert lengths == sorted(lengths, reverse=True)


def test_translate_command_file_to_file(tiny_checkpoint, test_pairs, tmp_path, device) -> None:
    source = tmp_path / "test.de"
    source.write_text("\n".join(test_pairs[0]) + "\n", encoding="utf-8")
    output = tmp_path / "out" / "test.en"
    code = main(["translate", "--checkpoint", str(tiny_checkpoint), "--input", str(source), "--output",
                 str(output), "--beam", "2", "--device", device.type, "--precision", "fp32", "--batch-size", "8"])
    assert code == 0
    lines = output.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(lines) == 20
    expected = beam2_fp32(tiny_checkpoint, device).translate(test_pairs[0])
    assert lines == expected


def test_translate_command_nbest_from_stdin(tiny_checkpoint, test_pairs, monkeypatch, capsys, device) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(test_pairs[0][:3]) + "\n"))
    code = main(["translate", "--checkpoint", str(tiny_checkpoint), "--beam", "3", "--nbest", "2",
                 "--device", device.type])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6
    for line, expected_index in zip(lines, [0, 0, 1, 1, 2, 2]):
        index, hypothesis, score = line.split(" ||| ")
        assert int(index) == expected_index
        assert float(score) <= 0.0


# A byte-order mark, a CRLF line and a lone \r inside a line: three sentences, as evaluate and prepare read them.
AWKWARD_TEXT = "\ufeffEin Mann fährt Fahrrad.\r\nZwei\rHunde spielen.\nEine Frau.\n".encode("utf-8")


def test_translate_reads_files_and_stdin_line_for_line_like_evaluate(tiny_checkpoint, tmp_path, monkeypatch, capsys,
                                                                     device) -> None:
    from vaswani.data.textfiles import read_text_file

    source = tmp_path / "awkward.de"
    source.write_bytes(AWKWARD_TEXT)
    sentences = read_text_file(source).lines  # what evaluate translates
    assert sentences == ["Ein Mann fährt Fahrrad.", "Zwei\rHunde spielen.", "Eine Frau."]
    expected = beam2_fp32(tiny_checkpoint, device).translate(sentences)
    options = ["--checkpoint", str(tiny_checkpoint), "--beam", "2", "--device", device.type, "--precision", "fp32"]

    assert main(["translate", *options, "--input", str(source), "--output", str(tmp_path / "out.en")]) == 0
    assert (tmp_path / "out.en").read_text(encoding="utf-8") == "".join(line + "\n" for line in expected)
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(AWKWARD_TEXT), encoding="utf-8"))
    assert main(["translate", *options]) == 0
    assert capsys.readouterr().out == "".join(line + "\n" for line in expected)


class Terminal(io.TextIOWrapper):
    """Typed lines as a terminal delivers them under a UTF-8 locale: bytes that are not UTF-8 become surrogates."""

    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data), encoding="utf-8", errors="surrogateescape")

    def isatty(self) -> bool:
        return True


def test_interactive_translation_skips_a_typed_line_that_is_not_utf8(tiny_checkpoint, monkeypatch, capsys,
                                                                     device) -> None:
    monkeypatch.setattr(sys, "stdin", Terminal(b"Ein Mann.\nEin M\xe4nn.\nZwei Hunde.\n"))
    code = main(["translate", "--checkpoint", str(tiny_checkpoint), "--beam", "2", "--device", device.type,
                 "--precision", "fp32"])
    assert code == 0
    captured = capsys.readouterr()
    first, third = beam2_fp32(tiny_checkpoint, device).translate(
        ["Ein Mann.", "Zwei Hunde."])
    assert captured.out == f"> {first}\n> > {third}\n> "  # a prompt per line; line 2 is not translated
    assert ("standard input:2: not translated: invalid UTF-8 (byte(s) e4); the text must be UTF-8 encoded"
            in captured.err.splitlines())
    assert "Traceback" not in captured.err


def test_translate_command_reports_bad_input(tiny_checkpoint, tmp_path, capsys) -> None:
    code = main(["translate", "--checkpoint", str(tiny_checkpoint), "--input", str(tmp_path / "missing.de")])
    assert code == 2
    assert "missing.de" in capsys.readouterr().err
    code = main(["translate", "--checkpoint", str(tmp_path), "--input", str(tmp_path / "missing.de")])
    assert code == 2


def test_long_sources_are_cut_for_learned_positions(tiny_checkpoint, test_pairs, capsys) -> None:
    from vaswani.config import ModelConfig
    from vaswani.data.tokenizer import Tokenizer
    from vaswani.model import Transformer

    tokenizer = Tokenizer.load(tiny_checkpoint / "tokenizer.json")
    config = ModelConfig.preset("tiny", dropout=0.0, vocab_size=tokenizer.vocab_size, positions="learned", max_len=8)
    translator = Translator(Transformer(config), tokenizer, SearchConfig(beam_size=2),
                            options=EngineOptions(device="cpu"))
    sources = translator.encode(test_pairs[0][:2])
    assert all(len(s) == 8 and s[-1] == tokenizer.eos_id for s in sources)
    assert "cut" in capsys.readouterr().err
    nbest = translator.translate_nbest(test_pairs[0][:2])  # no position past the learned table
    assert all(n[0].length <= 8 for n in nbest)


def test_a_huge_line_is_cut_not_a_crash_for_positions_that_extrapolate(translator: Translator, capsys) -> None:
    """A 100,000-word line would ask standard attention for 160 GB; it is cut, the file still translates."""
    from vaswani.decoding.translator import LONGEST_SOURCE

    assert translator.model.config.positions == "sinusoidal" and translator.model.config.max_len < LONGEST_SOURCE
    lines = ["Ein Hund.", "Hund " * 5000, "Zwei Katzen."]
    sources = translator.encode(lines)
    assert [len(s) for s in sources][1] == LONGEST_SOURCE and sources[1][-1] == translator.config.eos_id
    assert len(sources[0]) < 10 and len(sources[2]) < 10
    err = capsys.readouterr().err
    assert f"1 source sentence(s) longer than {LONGEST_SOURCE} tokens were cut there (the first: sentence 2)" in err


def test_translate_command_with_a_compiled_decoding_step(tiny_checkpoint, test_pairs, tmp_path, device) -> None:
    """--compile runs the decoding step through torch.compile's code generator: the same translations."""
    import torch

    torch.compiler.reset()  # a fresh start: no earlier test's graphs count against torch.compile's recompile limit
    source = tmp_path / "test.de"
    source.write_text("\n".join(test_pairs[0]) + "\n", encoding="utf-8")
    output = tmp_path / "test.en"
    code = main(["translate", "--checkpoint", str(tiny_checkpoint), "--input", str(source), "--output",
                 str(output), "--beam", "2", "--device", device.type, "--precision", "fp32", "--batch-size", "8",
                 "--compile"])
    assert code == 0
    expected = beam2_fp32(tiny_checkpoint, device).translate(test_pairs[0])
    assert output.read_text(encoding="utf-8").split("\n")[:-1] == expected


def test_compile_without_a_cpp_compiler_is_a_one_line_error(tiny_checkpoint, tmp_path, monkeypatch, capsys) -> None:
    import vaswani.decoding.compiled as compiled

    monkeypatch.setattr(compiled.shutil, "which", lambda name: None)
    source = tmp_path / "test.de"
    source.write_text("Ein Mann.\n", encoding="utf-8")
    code = main(["translate", "--checkpoint", str(tiny_checkpoint), "--input", str(source), "--device", "cpu",
                 "--compile"])
    assert code == 2
    err = capsys.readouterr().err
    assert "C++ compiler" in err and "--compile" in err and "Traceback" not in err


def test_with_search_shares_the_model_and_its_compiled_step(tiny_checkpoint) -> None:
    """The server's per-batch copies must reuse one compiled step: a new one per batch would recompile every time."""
    translator = Translator.load(tiny_checkpoint, SearchConfig(beam_size=2),
                                 options=EngineOptions(device="cpu", compile=True))
    copy = translator.with_search(SearchConfig(beam_size=3, bos_id=7, precision="auto"), batch_size=5, max_tokens=None)
    assert copy.engine is translator.engine and copy.engine.decoder is translator.engine.decoder
    assert (copy.config.beam_size, copy.batch_size, copy.max_tokens) == (3, 5, None)
    # Bound as in load: the tokenizer's ids, and "auto" decided for the translator's device.
    assert copy.config.bos_id == translator.tokenizer.bos_id
    assert copy.config.precision == translator.config.precision != "auto"
    assert (translator.config.beam_size, translator.batch_size) == (2, 64)  # the original is unchanged
