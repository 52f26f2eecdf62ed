"""Embeddings, encoder, decoder and the encoder-decoder model with its incremental-decoding API.

Shapes: B batch, S source length, T target length, D d_model, V vocabulary.

    model = Transformer(ModelConfig.preset("tiny"))
    logits = model(src, tgt_in)                       # (B, T, V), teacher forcing
    state = model.start_decoding(src)                 # encoder once, cross-attention K/V once
    logits = model.decode_step(next_tokens, state)    # (B, V), one position at a time with a KV cache
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from vaswani.config import ModelConfig
from vaswani.model.blocks import DecoderLayer, EncoderLayer
from vaswani.model.dropout import Dropout
from vaswani.model.kv_cache import KVCache
from vaswani.model.masks import padding_mask
from vaswani.model.positions import LearnedPositions, RotaryEmbedding, SinusoidalPositions


class Embeddings(nn.Module):
    """Token embedding (optionally shared) × √d_model, plus absolute positions, then dropout."""

    def __init__(self, config: ModelConfig, tokens: nn.Embedding):
        super().__init__()
        self.tokens = tokens
        self.scale = math.sqrt(config.d_model) if config.scale_embeddings else 1.0
        if config.positions == "sinusoidal":
            self.positions: nn.Module | None = SinusoidalPositions(config.d_model, config.max_len)
        elif config.positions == "learned":
            self.positions = LearnedPositions(config.d_model, config.max_len)
        else:  # rope lives inside attention; none has no positions at all
            self.positions = None
        self.dropout = Dropout(config.dropout)

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:  # (B, L) -> (B, L, D)
        x = self.tokens(ids) * self.scale
        if self.positions is not None:
            x = self.positions(x, offset)
        return self.dropout(x)


def token_embedding(config: ModelConfig) -> nn.Embedding:
    embedding = nn.Embedding(config.vocab_size, config.d_model)
    # std d^-1/2: after the √d scaling the inputs have unit variance, and as the tied output matrix the initial
    # logits stay O(1).
    nn.init.normal_(embedding.weight, mean=0.0, std=config.d_model**-0.5)
    return embedding


class Encoder(nn.Module):
    def __init__(self, config: ModelConfig, tokens: nn.Embedding):
        super().__init__()
        self.config = config
        self.embed = Embeddings(config, tokens)
        rotary = RotaryEmbedding(config.head_dim, config.rope_base) if config.positions == "rope" else None
        self.layers = nn.ModuleList(EncoderLayer(config, rotary) for _ in range(config.n_encoder_layers))
        self.final_norm = nn.LayerNorm(config.d_model) if config.norm == "pre" else None

    def forward(self, src: torch.Tensor) -> torch.Tensor:  # (B, S) -> (B, S, D)
        mask = padding_mask(src, self.config.pad_id)  # real keys only; a sliding window is the layers' own
        x = self.embed(src)
        for layer in self.layers:
            x = layer(x, mask)
        return self.final_norm(x) if self.final_norm is not None else x


class Decoder(nn.Module):
    def __init__(self, config: ModelConfig, tokens: nn.Embedding):
        super().__init__()
        self.config = config
        self.embed = Embeddings(config, tokens)
        rotary = RotaryEmbedding(config.head_dim, config.rope_base) if config.positions == "rope" else None
        self.layers = nn.ModuleList(DecoderLayer(config, rotary) for _ in range(config.n_decoder_layers))
        self.final_norm = nn.LayerNorm(config.d_model) if config.norm == "pre" else None

    def forward(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor,
    ) -> torch.Tensor:  # (B, T) -> (B, T, D)
        x = self.embed(tgt_in)
        for layer in self.layers:
            x = layer(x, memory, memory_mask)
        return self.final_norm(x) if self.final_norm is not None else x


@dataclass
class DecoderState:
    """Everything incremental decoding carries from step to step, per batch row (hypothesis)."""

    memory_mask: torch.Tensor  # (B, 1, 1, S)
    cross_kv: list[KVCache]  # per layer, computed once from the encoder output
    self_kv: list[KVCache]  # per layer, grows by one position per step, in place
    step: int = 0  # absolute position of the next token

    def reorder(self, index: torch.Tensor) -> "DecoderState":
        """Keep/duplicate batch rows, e.g. beam search selecting surviving hypotheses or expanding to k beams."""
        return DecoderState(
            memory_mask=self.memory_mask.index_select(0, index),
            cross_kv=[kv.reorder(index) for kv in self.cross_kv],
            self_kv=[kv.reorder(index) for kv in self.self_kv],
            step=self.step,
        )

    def reorder_beams(self, rows: torch.Tensor, sentences: torch.Tensor | None) -> "DecoderState":
        """Beam search's reorder: row i of the result continues row ``rows[i]``.

        All beams of a sentence share its cross-attention keys/values and source mask, so moving beams *within* a
        sentence leaves those untouched: only the self-attention caches are gathered every step. ``sentences``
        (a row of the same sentence for each new row, its beams in order) selects the per-sentence tensors when
        sentences leave the batch; None when every sentence stays (they are the largest part of the state for
        short outputs).
        """
        memory_mask, cross_kv = self.memory_mask, self.cross_kv
        if sentences is not None:
            memory_mask, cross_kv = memory_mask.index_select(0, sentences), [kv.reorder(sentences) for kv in cross_kv]
        return DecoderState(memory_mask, cross_kv, [kv.reorder(rows) for kv in self.self_kv], self.step)


class Transformer(nn.Module):
    """The encoder-decoder of "Attention Is All You Need", every variant selected by :class:`ModelConfig`."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        shared = token_embedding(config)
        tying = config.tie_embeddings
        encoder_tokens = shared if tying == "all-three" else token_embedding(config)
        self.encoder = Encoder(config, encoder_tokens)
        self.decoder = Decoder(config, shared)
        self.output = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if tying == "none":
            nn.init.normal_(self.output.weight, std=config.d_model**-0.5)
        else:  # pre-softmax projection shares the decoder's embedding matrix
            self.output.weight = shared.weight
        self._init_linear_layers()

    def _init_linear_layers(self) -> None:
        # Xavier-uniform for every projection, as in the reference implementations of the paper.
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear) and module is not self.output:
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    # ---- full passes (training, scoring) -------------------------------------------------------------------
    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, S) -> (memory (B, S, D), memory_mask (B, 1, 1, S))."""
        return self.encoder(src), padding_mask(src, self.config.pad_id)

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor) -> torch.Tensor:
        """Teacher-forced decoder states (B, T, D); pass them through :meth:`project` for logits."""
        return self.decoder(tgt_in, memory, memory_mask)

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """(…, D) -> (…, V) logits. Training can call it on non-padding positions only."""
        return self.output(hidden)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """src (B, S), tgt_in (B, T) = <s> y1 … -> logits (B, T, V)."""
        memory, memory_mask = self.encode(src)
        return self.project(self.decode(tgt_in, memory, memory_mask))

    @torch.no_grad()
    def cross_attention_weights(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """src (B, S), tgt_in (B, T) = <s> y1 … -> (layers, B, heads, T, S) cross-attention weights.

        Row t is what the decoder looks at in the source while predicting y_{t+1}. Computed in eval mode (no
        dropout) with the plain softmax formula whatever the attention backend; each row sums to 1 over the real
        source tokens and is 0 on padding. Each layer's cross-attention module computes them from the very inputs
        it receives in an ordinary teacher-forced pass.
        """
        weights: list[torch.Tensor] = []

        def record(module: nn.Module, args: tuple[torch.Tensor, ...], kwargs: dict[str, object]) -> None:
            weights.append(module.attention_weights(*args, **kwargs))

        hooks = [layer.cross_attn.register_forward_pre_hook(record, with_kwargs=True)
                 for layer in self.decoder.layers]
        was_training = self.training
        self.eval()
        try:
            self.decode(tgt_in, *self.encode(src))
            return torch.stack(weights)
        finally:
            self.train(was_training)
            for hook in hooks:
                hook.remove()

    # ---- incremental decoding (search) ---------------------------------------------------------------------
    def start_decoding(self, src: torch.Tensor, capacity: int | None = None) -> DecoderState:
        """Run the encoder once and precompute every layer's cross-attention keys/values.

        ``capacity``: the most positions the search will decode (its length limit); the self-attention caches
        are allocated for that many up front and written in place. Without it they grow by a copy per step.
        """
        memory, memory_mask = self.encode(src)
        return DecoderState(
            memory_mask=memory_mask,
            cross_kv=[layer.cross_attn.project_context(memory) for layer in self.decoder.layers],
            self_kv=[KVCache.empty(capacity, self.config.sliding_window) for _ in self.decoder.layers],
        )

    def decode_step(self, tokens: torch.Tensor, state: DecoderState) -> torch.Tensor:
        """tokens (B,) at position ``state.step`` -> next-token logits (B, V); ``state`` advances in place."""
        x = self.decoder.embed(tokens[:, None], offset=state.step)  # (B, 1, D)
        for layer, cross_kv, self_kv in zip(self.decoder.layers, state.cross_kv, state.self_kv):
            x = layer(x, cross_kv, state.memory_mask, cache=self_kv, position_offset=state.step)
        if self.decoder.final_norm is not None:
            x = self.decoder.final_norm(x)
        state.step += 1
        return self.project(x[:, 0])

    # ---- bookkeeping ---------------------------------------------------------------------------------------
    def num_parameters(self) -> int:
        """Trainable parameters, each shared matrix counted once."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
