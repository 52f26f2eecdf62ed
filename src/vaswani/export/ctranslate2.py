"""Export a checkpoint as a CTranslate2 model, and translate text with it using our tokenizer.

CTranslate2 is the usual CPU inference engine for Transformer translators (int8 weights, fused kernels). The
conversion is the core's (:mod:`vaswani.decoding.ct2_model`, the one the CTranslate2 engine of ``translate``,
``evaluate`` and ``serve`` loads); the export writes it into a directory of its own with our ``tokenizer.json``
beside it, for use outside this project.

Translating (the snippet of docs/engines.md; the test runs exactly this function)::

    translator = Ct2Translator("exported/ct2")           # the export directory: model.bin + tokenizer.json
    translator.translate(["Ein Hund rennt."], beam_size=4)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from vaswani.data.tokenizer import Tokenizer
from vaswani.decoding.config import QUANTIZATIONS
from vaswani.decoding.ct2_model import cannot_express, token_string, write_converted_model
from vaswani.errors import VaswaniError
from vaswani.io import atomic_write_text
from vaswani.model.serialization import TOKENIZER_FILE, resolve_checkpoint


def token_id(tokenizer: Tokenizer, token: str) -> int:
    """Inverse of :func:`~vaswani.decoding.ct2_model.token_string`."""
    found = tokenizer.backend.token_to_id(token)
    if found is not None:
        return found
    if token.startswith("<unused") and token.endswith(">") and token[7:-1].isdigit():
        return int(token[7:-1])
    return tokenizer.unk_id


def export_ctranslate2(checkpoint: str | Path, out: str | Path, quantization: str = "float32") -> Path:
    """Write ``model.bin``, ``config.json``, the vocabularies and our ``tokenizer.json`` into ``out``."""
    if quantization not in QUANTIZATIONS:
        raise VaswaniError(f"--quantization {quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    directory = resolve_checkpoint(checkpoint)
    out = write_converted_model(directory, Path(out), quantization)
    atomic_write_text(out / TOKENIZER_FILE, (directory / TOKENIZER_FILE).read_text(encoding="utf-8"))
    return out


class Ct2Translator:
    """Text in, text out with a CTranslate2 export and our tokenizer (the one saved beside the model)."""

    def __init__(self, directory: str | Path, device: str = "cpu", compute_type: str = "default",
                 intra_threads: int = 0, inter_threads: int = 1):
        import ctranslate2

        directory = Path(directory)
        if not (directory / "model.bin").is_file() or not (directory / TOKENIZER_FILE).is_file():
            raise VaswaniError(f"{directory}: not a CTranslate2 export (expected model.bin and {TOKENIZER_FILE})")
        self.tokenizer = Tokenizer.load(directory / TOKENIZER_FILE)
        self.translator = ctranslate2.Translator(str(directory), device=device, compute_type=compute_type,
                                                 intra_threads=intra_threads, inter_threads=inter_threads)

    def translate(self, texts: Sequence[str], beam_size: int = 4, **options: Any) -> list[str]:
        """One translation per input (a blank line gives ""), as ``vaswani translate`` prints them; ``options`` go
        to ``ctranslate2.Translator.translate_batch`` (e.g. max_decoding_length, length_penalty)."""
        real = [i for i, text in enumerate(texts) if text.strip()]
        results = self.translate_ids([self.tokenizer.encode(texts[i].strip()) for i in real], beam_size, **options)
        out = [""] * len(texts)
        for i, text in zip(real, self.tokenizer.decode_batch(results)):
            out[i] = " ".join(text.splitlines())  # one line per translation, like our Translator
        return out

    def translate_ids(self, sources: Sequence[list[int]], beam_size: int = 4, **options: Any) -> list[list[int]]:
        """Token ids (without </s>, which the model config appends) -> the best hypothesis' ids, no </s>."""
        tok = self.tokenizer
        batch = [[token_string(tok, i) for i in ids] for ids in sources]
        results = self.translator.translate_batch(batch, beam_size=beam_size, **options)
        return [[token_id(tok, token) for token in result.hypotheses[0]] for result in results]


__all__ = ["export_ctranslate2", "token_id", "cannot_express", "Ct2Translator", "QUANTIZATIONS"]
