"""The torch engine: our Transformer searched by :func:`vaswani.decoding.search.generate`, the readable reference.

It runs every search option and every model variant, in any autocast precision, with the decoding step
optionally compiled by ``torch.compile`` (:class:`~vaswani.decoding.compiled.CompiledDecoder`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import torch

from vaswani.decoding.compiled import CompiledDecoder
from vaswani.decoding.config import EngineOptions, SearchConfig
from vaswani.decoding.engine import TORCH, Hypothesis
from vaswani.decoding.search import generate
from vaswani.devices import resolve_device, synchronize
from vaswani.model.serialization import load_model
from vaswani.model.transformer import Transformer
from vaswani.precision import resolve_precision


class TorchEngine:
    name = TORCH

    def __init__(self, model: Transformer, options: EngineOptions = EngineOptions()):
        """``model`` searched on ``options.device`` (None: where its weights are), its decoding step compiled when
        ``options.compile``; ``options.threads`` > 0 sets torch's intra-op threads (for the whole process)."""
        weights = next(model.parameters()).device
        self.device = resolve_device(options.device) if options.device is not None else weights
        if options.threads > 0:
            torch.set_num_threads(options.threads)
        # No .eval() here: a trainer may wrap its live model for validation; generate() switches dropout off
        # for the search and restores the caller's mode afterwards.
        self.model = model.to(self.device)
        self.model_config = model.config
        # What the search drives: the model, or the model with its decoding step compiled (see compiled.py).
        self.decoder = CompiledDecoder(self.model) if options.compile else self.model

    @classmethod
    def load(cls, checkpoint: str | Path, options: EngineOptions = EngineOptions()) -> "TorchEngine":
        """The engine for a checkpoint, on ``options.device`` (None: auto)."""
        device = resolve_device(options.device)
        return cls(load_model(checkpoint, device=device).eval(), dataclasses.replace(options, device=str(device)))

    def bind(self, config: SearchConfig) -> SearchConfig:
        # "auto" precision is decided once, for this device, so results record what really ran.
        return dataclasses.replace(config, precision=resolve_precision(config.precision, self.device))

    def search(self, sources: Sequence[list[int]], config: SearchConfig) -> list[list[Hypothesis]]:
        width = max(len(source) for source in sources)
        src = torch.full((len(sources), width), config.pad_id, dtype=torch.long)
        for row, source in enumerate(sources):
            src[row, : len(source)] = torch.tensor(source)
        return generate(self.decoder, src.to(self.device), config)

    def parameters(self) -> int:
        return self.model.num_parameters()

    def synchronize(self) -> None:
        """Wait for the device's queued work (a GPU timer would otherwise stop before the computation)."""
        synchronize(self.device)

    def describe(self) -> dict[str, Any]:
        return {"engine": self.name, "device": str(self.device), "quantization": None,
                "compiled": isinstance(self.decoder, CompiledDecoder)}
