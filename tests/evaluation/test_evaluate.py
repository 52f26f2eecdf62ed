"""`vaswani evaluate` end to end, the sacreBLEU wrappers, and the best/worst report."""

from __future__ import annotations

import json

import pytest
import sacrebleu

from vaswani.cli import main
from vaswani.errors import DataError
from vaswani.evaluation.evaluate import load_test_set
from vaswani.evaluation.metrics import corpus_scores, sentence_bleu
from vaswani.evaluation.report import best_and_worst, render_markdown, sample_examples


def _evaluate(checkpoint, files, *extra: str) -> int:
    src, ref = files
    return main(["evaluate", "--checkpoint", str(checkpoint), "--src", str(src), "--ref", str(ref),
                 "--beam", "2", "--max-len-a", "0.5", "--max-len-b", "5", *extra])


def test_evaluate_command_writes_scores_signature_speed_and_report(tiny_checkpoint, test_files, capsys, device):
    assert _evaluate(tiny_checkpoint, test_files, "--json", "--device", device.type) == 0
    printed = json.loads(capsys.readouterr().out)

    out = tiny_checkpoint / "eval" / "test20-beam2"  # the default output directory
    results = json.loads((out / "results.json").read_text())
    assert results == printed
    for field in ("bleu", "chrf", "signature", "chrf_signature", "length_ratio", "speed", "search", "hardware",
                  "command", "sentence_bleu_sample"):
        assert field in results, field
    assert results["sentences"] == 20
    assert "nrefs:1" in results["signature"] and "tok:13a" in results["signature"]
    assert "case:mixed" in results["signature"] and f"version:{sacrebleu.__version__}" in results["signature"]
    assert results["chrf_signature"].startswith("nrefs:1|case:mixed")
    assert results["speed"]["sentences_per_second"] > 0 and results["speed"]["target_tokens_per_second"] > 0
    assert results["search"]["beam_size"] == 2
    assert "--beam 2" in results["command"]

    hypotheses = (out / "hypotheses.txt").read_text(encoding="utf-8").split("\n")[:-1]
    references = test_files[1].read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == 20
    # The numbers are sacreBLEU's on exactly the files written, nothing hand-made.
    assert results["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert results["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score)
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Best" in report and "## Worst" in report and results["signature"] in report
    assert len(results["sentence_bleu_sample"]) == 20  # min(32, 20)


def test_evaluate_command_prints_a_summary_into_a_chosen_directory(tiny_checkpoint, test_files, tmp_path, capsys):
    assert _evaluate(tiny_checkpoint, test_files, "--out", str(tmp_path / "ev"), "--beam", "1", "--precision", "fp32",
                     "--device", "cpu") == 0
    printed = capsys.readouterr().out
    assert "BLEU" in printed and "chrF" in printed and "nrefs:1" in printed and "best of 20" in printed
    assert {p.name for p in (tmp_path / "ev").iterdir()} == {"results.json", "hypotheses.txt", "report.md",
                                                            "vaswani.json"}
    # what evaluate hands on is the typed result its results.json reads back as, every field checked
    from vaswani.evaluation.evaluate import EvaluationResult

    result = EvaluationResult.read(tmp_path / "ev")
    assert result.sentences == 20 and result.search.beam_size == 1 and result.speed.sentences_per_second > 0
    assert f"BLEU {result.bleu:.2f}" in printed and result.command.startswith("vaswani evaluate")


def test_evaluate_command_errors_name_the_problem(tiny_checkpoint, test_files, tmp_path, capsys):
    src, _ = test_files
    short = tmp_path / "short.en"
    short.write_text("one line\n")
    assert main(["evaluate", "--checkpoint", str(tiny_checkpoint), "--src", str(src), "--ref", str(short)]) == 2
    assert "short.en" in capsys.readouterr().err
    assert main(["evaluate", "--checkpoint", str(tiny_checkpoint), "--src", str(src)]) == 2
    assert main(["evaluate", "--checkpoint", str(tiny_checkpoint), "--dataset", "multi30k"]) == 2
    assert "--split" in capsys.readouterr().err


def test_registered_test_sets_load(data_dir):
    test = load_test_set("multi30k", "test2016", data_dir=data_dir)
    assert test.name == "multi30k-test2016" and len(test.sources) == len(test.references) == 1000
    with pytest.raises(DataError):
        load_test_set("multi30k", "no-such-split", data_dir=data_dir)


def test_corpus_scores_are_sacrebleu():
    hyps = ["The cat sat on the mat.", "A dog runs in the park!"]
    refs = ["The cat sat on the mat.", "A dog is running in a park."]
    scores = corpus_scores(hyps, refs)
    assert scores.bleu == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert scores.chrf == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)
    assert scores.length_ratio == pytest.approx(scores.hyp_len / scores.ref_len)
    assert corpus_scores(refs, refs).bleu == pytest.approx(100.0)
    assert sentence_bleu(refs[0], refs[0]) == pytest.approx(100.0)
    with pytest.raises(DataError):
        corpus_scores(hyps, refs[:1])


def test_best_worst_sample_is_seeded_ranked_and_rendered():
    sources = [f"quelle {i}" for i in range(100)]
    refs = [f"the reference sentence number {i} is here" for i in range(100)]
    hyps = [r if i % 3 == 0 else f"something else {i}" for i, r in enumerate(refs)]
    sample = sample_examples(sources, hyps, refs, size=32, seed=7)
    assert len(sample) == 32 and len({e.index for e in sample}) == 32
    assert [e.index for e in sample] == [e.index for e in sample_examples(sources, hyps, refs, size=32, seed=7)]
    assert [e.index for e in sample] != [e.index for e in sample_examples(sources, hyps, refs, size=32, seed=8)]
    assert [e.bleu for e in sample] == sorted((e.bleu for e in sample), reverse=True)
    best, worst = best_and_worst(sample, 3)
    assert best[0].bleu == pytest.approx(100.0) and best[0].hypothesis == best[0].reference
    assert worst[0].bleu == min(e.bleu for e in sample)
    from vaswani.decoding.config import SearchConfig
    from vaswani.decoding.engine import EngineDescription
    from vaswani.evaluation.evaluate import EvaluationResult, EvaluationSpeed

    result = EvaluationResult(
        test_set="t", checkpoint="c", sentences=100, bleu=1.0, chrf=2.0, signature="sig", chrf_signature="csig",
        length_ratio=1.0, brevity_penalty=1.0, precisions=[1.0] * 4, hyp_len=10, ref_len=10,
        speed=EvaluationSpeed(1.0, 1.0, 2, 2.0, "cpu", None, None), report_seed=7, sentence_bleu_sample=sample,
        search=SearchConfig(beam_size=4, length_norm="gnmt", alpha=0.6, precision="fp32"),
        engine=EngineDescription("torch", "cpu"))
    markdown = render_markdown(result, sample, 3)
    assert best[0].source in markdown and worst[0].reference in markdown and "beam 4, gnmt α=0.6, fp32" in markdown


def test_compare_tabulates_evaluations_with_their_commands(tiny_checkpoint, test_files, tmp_path, capsys):
    greedy, beam = tmp_path / "greedy", tmp_path / "beam"
    assert _evaluate(tiny_checkpoint, test_files, "--beam", "1", "--out", str(greedy), "--precision", "fp32") == 0
    assert _evaluate(tiny_checkpoint, test_files, "--beam", "3", "--repetition-penalty", "1.3", "--out", str(beam),
                     "--precision", "fp32") == 0
    capsys.readouterr()
    assert main(["compare", str(greedy), str(beam / "results.json"), "--out", str(tmp_path / "table")]) == 0
    table = (tmp_path / "table" / "table.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| greedy") or line.startswith("| beam 3")]
    assert len(rows) == 2 and "repetition penalty 1.3" in rows[1]
    summary = json.loads((tmp_path / "table" / "results.json").read_text())
    expected = json.loads((greedy / "results.json").read_text())["bleu"]
    assert summary[0]["bleu"] == expected and "vaswani evaluate" in summary[1]["command"]
    assert main(["compare", str(tmp_path / "missing"), "--out", str(tmp_path / "x")]) == 2


def test_a_reference_line_longer_than_any_translation_is_cut_like_the_sources(tiny_checkpoint, test_files,
                                                                             tmp_path, capsys):
    from vaswani.decoding.translator import Translator
    from vaswani.evaluation.evaluate import longest_hypothesis_chars

    src, ref = test_files
    limit = longest_hypothesis_chars(Translator.load(tiny_checkpoint))
    lines = ref.read_text(encoding="utf-8").splitlines()
    lines[3] = "a dog " * (limit // 6 + 1000)  # far past any translation of the tiny model
    huge = tmp_path / "test20.en"
    huge.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["evaluate", "--checkpoint", str(tiny_checkpoint), "--src", str(src), "--ref", str(huge),
                 "--out", str(tmp_path / "ev"), "--json", "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    assert (f"warning: 1 reference line(s) longer than {limit:,} characters, more than any translation can "
            "be, were cut there (the first: line 4)") in captured.err
    hypotheses = (tmp_path / "ev" / "hypotheses.txt").read_text(encoding="utf-8").split("\n")[:-1]
    cut = lines[:3] + [lines[3][:limit]] + lines[4:]
    assert json.loads(captured.out)["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [cut]).score)
