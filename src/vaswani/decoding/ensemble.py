"""Ensembles: several models searched as one. At every step each model scores the next token from its own
key/value cache, and the ensemble's log-probabilities are the models' weighted mean (a log-linear
combination, as Marian and OpenNMT-py combine theirs; the search renormalises them). The models must share
the tokenizer (the same ids mean the same subwords); their architectures may differ. CTranslate2 searches one
model, so an ensemble runs on the torch engine.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import torch

from vaswani.decoding.config import EngineOptions, SearchConfig
from vaswani.decoding.engine import EngineDescription
from vaswani.decoding.search import DecodingState
from vaswani.decoding.torch_engine import TorchEngine
from vaswani.errors import ConfigError
from vaswani.model.transformer import Transformer


class EnsembleState:
    """Each model's decoding state, reordered together."""

    def __init__(self, states: list[DecodingState]):
        self.states = states

    def reorder(self, index: torch.Tensor) -> "EnsembleState":
        return EnsembleState([state.reorder(index) for state in self.states])

    def reorder_beams(self, rows: torch.Tensor, sentences: torch.Tensor | None) -> "EnsembleState":
        return EnsembleState([state.reorder_beams(rows, sentences) for state in self.states])


class Ensemble:
    """The searchable model (search.SearchableModel) of several Transformers, with weights summing to 1."""

    def __init__(self, models: Sequence[Transformer], weights: Sequence[float] | None = None):
        if weights is not None and len(weights) != len(models):
            raise ConfigError(f"{len(weights)} weights for {len(models)} models: give one weight per model",
                              field="weights")
        raw = list(weights) if weights is not None else [1.0] * len(models)
        if not all(weight > 0 and weight < float("inf") for weight in raw):
            raise ConfigError(f"weights {raw}: each must be a positive number", field="weights")
        self.models = list(models)
        self.weights = [weight / sum(raw) for weight in raw]
        # The output limit follows the shortest learned position table among the models (search.py reads it).
        self.config = min((model.config for model in models), key=lambda config: (
            config.max_len if config.positions == "learned" else float("inf")))

    @property
    def training(self) -> bool:
        return any(model.training for model in self.models)

    def eval(self) -> "Ensemble":
        for model in self.models:
            model.eval()
        return self

    def train(self, mode: bool = True) -> "Ensemble":
        for model in self.models:
            model.train(mode)
        return self

    def start_decoding(self, src: torch.Tensor, capacity: int | None = None) -> EnsembleState:
        return EnsembleState([model.start_decoding(src, capacity) for model in self.models])

    def decode_step(self, tokens: torch.Tensor, state: EnsembleState) -> torch.Tensor:
        combined = None
        for model, weight, model_state in zip(self.models, self.weights, state.states):
            log_probs = weight * torch.log_softmax(model.decode_step(tokens, model_state).float(), dim=-1)
            combined = log_probs if combined is None else combined + log_probs
        return combined  # type: ignore[return-value]


class EnsembleEngine(TorchEngine):
    """The torch engine searching an :class:`Ensemble` (its first model answers for ``model``)."""

    def __init__(self, models: Sequence[Transformer], options: EngineOptions = EngineOptions(),
                 weights: Sequence[float] | None = None):
        if options.compile:
            raise ConfigError("`compile` compiles one model's decoding step; an ensemble runs uncompiled "
                              "(leave out `compile`)", field="compile")
        super().__init__(models[0], options)
        self.models = [model.to(self.device) for model in models]
        self.decoder = Ensemble(self.models, weights)

    def score(self, sources: Sequence[list[int]], targets: Sequence[list[int]],
              config: SearchConfig) -> list[list[float]]:
        raise ConfigError("scoring runs one model; score with each checkpoint on its own", field="checkpoint")

    def parameters(self) -> int:
        return sum(model.num_parameters() for model in self.models)

    def describe(self) -> EngineDescription:
        return dataclasses.replace(super().describe(), ensemble=len(self.models), weights=list(self.decoder.weights))
