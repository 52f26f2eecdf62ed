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
