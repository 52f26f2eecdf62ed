"""The CTranslate2 engine on a GPU: it runs where CTranslate2's CUDA build sees a device, in the GPU quantizations,
and in float32 gives the torch engine's translations on the same GPU.

Skipped without a GPU, or without a ctranslate2 built for the machine's CUDA (``pip install ctranslate2``; its wheels
need CUDA 12's cuBLAS, see docs/engines.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2", reason="needs ctranslate2")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available() or ctranslate2.get_cuda_device_count()
                                                  == 0, reason="needs a CUDA GPU that CTranslate2 sees")]

from vaswani.decoding import EngineOptions, SearchConfig, Translator  # noqa: E402


def test_auto_device_is_the_gpu_and_float32_translates_like_the_torch_engine(trained_checkpoint: Path,
                                                                              sentences: list[str]) -> None:
    search = SearchConfig(beam_size=4, length_norm="power")
    ours = Translator.load(trained_checkpoint, SearchConfig(beam_size=4, length_norm="power", precision="fp32"),
                           options=EngineOptions(device="cuda", engine="torch"))  # float32 on both: no autocast
    theirs = Translator.load(trained_checkpoint, search,
                             options=EngineOptions(engine="ctranslate2"))  # device auto: the GPU
    assert theirs.engine.describe().device == "cuda:0"
    assert theirs.translate(sentences) == ours.translate(sentences)


@pytest.mark.parametrize("quantization", ["float16", "int8_float16", "bfloat16"])
def test_the_gpu_quantizations_translate(trained_checkpoint: Path, sentences: list[str], quantization: str) -> None:
    if quantization not in ctranslate2.get_supported_compute_types("cuda"):
        pytest.skip(f"this GPU does not compute {quantization}")
    translator = Translator.load(trained_checkpoint, SearchConfig(beam_size=4, length_norm="power"),
                                 options=EngineOptions(engine="ctranslate2", quantization=quantization))
    assert translator.engine.translator.device == "cuda" and all(translator.translate(sentences))
