"""`vaswani bench engines` compares `vaswani translate` with a bare CTranslate2 script doing the same work: the
script must translate exactly as the CTranslate2 engine does, on the same converted model."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ctranslate2", reason="the engines benchmark needs ctranslate2: pip install 'vaswani[export]'")

from vaswani.benchmarks.engines import BARE_SCRIPT  # noqa: E402
from vaswani.decoding import EngineOptions, SearchConfig, Translator  # noqa: E402
from vaswani.decoding.ct2_engine import length_exponent  # noqa: E402


@pytest.mark.parametrize("quantization", ["float32", "int8"])
def test_the_bare_script_translates_as_the_ctranslate2_engine(trained_checkpoint: Path, sentences: list[str],
                                                              tmp_path: Path, quantization: str) -> None:
    checkpoint = Path(shutil.copytree(trained_checkpoint, tmp_path / "checkpoint",
                                      ignore=shutil.ignore_patterns("ctranslate2")))
    search = SearchConfig(beam_size=4, length_norm="power", alpha=1.0)
    engine = Translator.load(checkpoint, search,
                             options=EngineOptions(device="cpu", engine="ctranslate2", quantization=quantization))
    (tmp_path / "in.de").write_text("".join(f"{s}\n" for s in sentences), encoding="utf-8")
    subprocess.run([sys.executable, str(BARE_SCRIPT), str(engine.engine.directory), str(checkpoint / "tokenizer.json"),
                    str(tmp_path / "in.de"), str(tmp_path / "out.en"), "--beam", "4", "--length-penalty",
                    repr(length_exponent(search)), "--threads", "1"], check=True, env={**os.environ})
    assert (tmp_path / "out.en").read_text(encoding="utf-8").splitlines() == engine.translate(sentences)
    if quantization == "float32":  # batches in arrival order, two side by side: the same translations
        subprocess.run([sys.executable, str(BARE_SCRIPT), str(engine.engine.directory),
                        str(checkpoint / "tokenizer.json"), str(tmp_path / "in.de"), str(tmp_path / "in-order.en"),
                        "--beam", "4", "--length-penalty", repr(length_exponent(search)), "--threads", "1",
                        "--inter-threads", "2", "--batch-size", "3", "--in-order"], check=True, env={**os.environ})
        assert (tmp_path / "in-order.en").read_text(encoding="utf-8").splitlines() == engine.translate(sentences)


def test_the_report_gives_the_ratio_over_the_bare_script_per_repeat_with_or_without_torch() -> None:
    import argparse

    from vaswani.benchmarks.engines import EngineRun, Stamp, _report, command_environment, render_table
    from vaswani.provenance import provenance

    names = ["vaswani translate, ctranslate2 int8", "bare ctranslate2 script, int8"]
    seconds = {(names[0], 0): 10.0, (names[1], 0): 9.0, (names[0], 1): 8.0, (names[1], 1): 8.4}
    runs = [EngineRun(name, repeat, value, 0.3 if "vaswani" in name else 0.2)
            for (name, repeat), value in seconds.items()]
    args = argparse.Namespace(dataset="multi30k", split="test2016", threads=2, device="cpu", repeats=2)
    search = SearchConfig(beam_size=5, length_norm="power")
    report = _report(Stamp(**provenance("cpu").to_json()), args, Path("ck"), search,
                     dict.fromkeys(names), runs, dict.fromkeys(names, 30.0), {name: "a\nb\n" for name in names}, 100)
    (ratio,) = report.ratios
    assert ratio.over_bare == pytest.approx(8.7 / 9.0, abs=1e-3)  # medians: 8.7 s bare against 9.0 s ours
    assert ratio.over_bare_per_repeat == [0.9, 1.05] and ratio.start_up_over_bare == pytest.approx(0.667, 1e-3)
    assert ratio.over_torch is None
    assert ("0.97× the bare script's sentences/s on the same converted model (per repeat 0.90–1.05)"
            in render_table(report))
    env = command_environment(Path("/tmp/bytecode"))  # the timed commands keep their bytecode, outside the tree
    assert env["PYTHONPYCACHEPREFIX"] == "/tmp/bytecode" and "PYTHONDONTWRITEBYTECODE" not in env
