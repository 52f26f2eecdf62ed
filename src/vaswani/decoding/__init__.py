"""Turning a trained model into translations: greedy and beam search with a key/value cache, penalties, two
engines that run them, and a text-to-text :class:`Translator`.

    config.py       SearchConfig: beam size, length normalisation, length limit, penalties, bf16; search.json;
                    EngineOptions: which engine runs it, on which device, with how many threads
    engine.py       the Engine interface both engines offer, the rules they share, choosing one (auto)
    penalties.py    length normalisation, CTRL repetition penalty, no-repeat-n-gram blocking
    search.py       batched greedy and beam search over model.start_decoding / model.decode_step
    torch_engine.py TorchEngine: our model and search.py, the readable reference
    ct2_model.py    the checkpoint converted to CTranslate2, built once next to it (export reuses it)
    ct2_engine.py   CTranslate2Engine: the converted model, float32 or quantized, with the same outputs
    delegating_model.py DelegatingModel: a model behind the same decoding interface, the base of the two below
    reference.py    UncachedModel: the same interface recomputing the whole prefix (tests, benchmark)
    compiled.py     CompiledDecoder: the same interface with the decoding step compiled by torch.compile
    ensemble.py     Ensemble: several models searched as one, log-probs averaged per step, a cache each
    stored_ensemble.py  a checkpoint that is an ensemble: ensemble.json naming its member checkpoints
    alignment.py    Pharaoh word alignments from the penultimate decoder layer's cross-attention
    sampling.py     Sampler: a token drawn from the top-k / top-p of the tempered distribution, seeded
    scoring.py      PairScore: a given translation's log-probability (force decoding), to filter or rerank
    translator.py   Translator: tokenizer + engine + search, strings in, strings out
    commands.py     `vaswani translate`, and the search and engine options evaluate shares
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Imported on first use: `vaswani --help` should not pay for importing torch.
_EXPORTS = {
    "SearchConfig": "vaswani.decoding.config",
    "EngineOptions": "vaswani.decoding.config",
    "Hypothesis": "vaswani.decoding.engine",
    "Engine": "vaswani.decoding.engine",
    "output_limits": "vaswani.decoding.engine",
    "TorchEngine": "vaswani.decoding.torch_engine",
    "CTranslate2Engine": "vaswani.decoding.ct2_engine",
    "generate": "vaswani.decoding.search",
    "greedy_search": "vaswani.decoding.search",
    "beam_search": "vaswani.decoding.search",
    "max_output_lengths": "vaswani.decoding.search",
    "UncachedModel": "vaswani.decoding.reference",
    "CompiledDecoder": "vaswani.decoding.compiled",
    "PairScore": "vaswani.decoding.scoring",
    "UnscorableText": "vaswani.decoding.scoring",
    "Translator": "vaswani.decoding.translator",
    "Translation": "vaswani.decoding.translator",
    "UnusablePrefix": "vaswani.decoding.terminology",
    "StoredEnsemble": "vaswani.decoding.stored_ensemble",
    "read_stored_ensemble": "vaswani.decoding.stored_ensemble",
    "constrained_beam_search": "vaswani.decoding.constraints",
    "UnusableConstraint": "vaswani.decoding.terminology",
    "read_constraints": "vaswani.decoding.terminology",
    "glossary_constraints": "vaswani.decoding.terminology",
    "parse_glossary": "vaswani.decoding.terminology",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'vaswani.decoding' has no attribute {name!r}")
