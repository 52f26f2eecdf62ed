"""The torch engine: our Transformer searched by :func:`vaswani.decoding.search.generate`, the readable reference.

It runs every search option and every model variant, in any autocast precision, with the decoding step
optionally compiled by ``torch.compile`` (:class:`~vaswani.decoding.compiled.CompiledDecoder`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

import torch

from vaswani.decoding.compiled import CompiledDecoder
from vaswani.decoding.config import EngineOptions, SearchConfig
from vaswani.decoding.engine import TORCH, EngineDescription, Hypothesis
from vaswani.decoding.search import eval_mode, generate
from vaswani.devices import resolve_device, synchronize
from vaswani.model.serialization import load_model
from vaswani.model.transformer import Transformer
from vaswani.precision import autocast, resolve_precision

# Target positions whose logits are projected at once when scoring (37,000 words: 300 MB in float32).
SCORED_POSITIONS = 2048


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

    def search(self, sources: Sequence[list[int]], config: SearchConfig,
               prefixes: Sequence[list[int]] | None = None,
               constraints: Sequence[list[list[int]]] | None = None,
               continuations: frozenset[int] = frozenset()) -> list[list[Hypothesis]]:
        return generate(self.decoder, self._padded(sources, config.pad_id), config, prefixes, constraints,
                        continuations)

    def score(self, sources: Sequence[list[int]], targets: Sequence[list[int]],
              config: SearchConfig) -> list[list[float]]:
        """One teacher-forced pass over the batch: the decoder reads <s> y1 .. yn and is scored on
        y1 .. yn </s> (padding after a target changes nothing before it: the decoder attends causally)."""
        src = self._padded(sources, config.pad_id)
        tgt_in = self._padded([[config.bos_id, *target] for target in targets], config.pad_id)
        tgt_out = self._padded([[*target, config.eos_id] for target in targets], config.pad_id)
        precision = resolve_precision(config.precision, self.device)
        log_probs = torch.empty(tgt_out.shape)
        # The logits are projected a few rows at a time: a whole batch's (B, T, V) could take gigabytes.
        step = max(1, SCORED_POSITIONS // tgt_in.size(1))
        with torch.inference_mode(), autocast(self.device, precision), eval_mode(self.model):
            hidden = self.model.decode(tgt_in, *self.model.encode(src))
            for start in range(0, len(targets), step):
                logits = self.model.project(hidden[start : start + step]).float()
                picked = torch.log_softmax(logits, dim=-1).gather(2, tgt_out[start : start + step, :, None])
                log_probs[start : start + step] = picked.squeeze(2).cpu()
        return [row[: len(target) + 1] for row, target in zip(log_probs.tolist(), targets)]

    def _padded(self, rows: Sequence[list[int]], pad_id: int) -> torch.Tensor:
        """(len(rows), longest) ids on the engine's device, padded at the end."""
        batch = torch.full((len(rows), max(len(row) for row in rows)), pad_id, dtype=torch.long)
        for index, row in enumerate(rows):
            batch[index, : len(row)] = torch.tensor(row)
        return batch.to(self.device)

    def parameters(self) -> int:
        return self.model.num_parameters()

    def synchronize(self) -> None:
        """Wait for the device's queued work (a GPU timer would otherwise stop before the computation)."""
        synchronize(self.device)

    def describe(self) -> EngineDescription:
        return EngineDescription(self.name, str(self.device), compiled=isinstance(self.decoder, CompiledDecoder))
