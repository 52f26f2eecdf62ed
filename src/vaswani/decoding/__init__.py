"""Turning a trained model into translations: greedy and beam search with a key/value cache, penalties, and a
text-to-text :class:`Translator`.

    config.py      SearchConfig: beam size, length normalisation, length limit, penalties, bf16
    penalties.py   length normalisation, CTRL repetition penalty, no-repeat-n-gram blocking
    search.py      batched greedy and beam search over model.start_decoding / model.decode_step
    wrapped.py     WrappedModel: the base of the stand-ins below (a model behind the same decoding interface)
    reference.py   UncachedModel: the same interface recomputing the whole prefix (tests, benchmark)
    compiled.py    CompiledDecoder: the same interface with the decoding step compiled by torch.compile
    translator.py  Translator: checkpoint + tokenizer + search, strings in, strings out
    commands.py    `vaswani translate`
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Imported on first use: `vaswani --help` should not pay for importing torch.
_EXPORTS = {
    "SearchConfig": "vaswani.decoding.config",
    "Hypothesis": "vaswani.decoding.search",
    "generate": "vaswani.decoding.search",
    "greedy_search": "vaswani.decoding.search",
    "beam_search": "vaswani.decoding.search",
    "max_output_lengths": "vaswani.decoding.search",
    "UncachedModel": "vaswani.decoding.reference",
    "CompiledDecoder": "vaswani.decoding.compiled",
    "Translator": "vaswani.decoding.translator",
    "Translation": "vaswani.decoding.translator",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'vaswani.decoding' has no attribute {name!r}")
