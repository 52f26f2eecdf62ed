"""Training memory of a config and batch, estimated from first principles: every byte a training step holds.

- the training state: fp32 parameters, their gradients and AdamW's two moments, 4 × 4 bytes per parameter
  (plus, under bf16/fp16 autocast, the 2-byte weight copies that autocast caches and backward keeps);
- the activations each operation saves for backward, enumerated layer by layer from what autograd keeps (see
  :func:`_sublayer_attention` and friends): Linear inputs, Q/K/V, the B·H·T² attention probabilities (with
  their dropout mask and dropped copy) of the standard backend, the FFN hidden layer, dropout masks, LayerNorm
  inputs;
- the logits: the N×V fp32 logits and the log-probabilities the loss saves from them (backward turns those
  into the gradient in place, so no third N×V tensor appears), and the N×d gradient of the decoder states that
  the output projection's backward allocates while that gradient is still alive: the peak is there.

The *peak* is not the sum of all of them: the trainer frees gradients to None after every update, so when
backward starts every activation is live and no gradient exists yet, and by the optimizer step the activations
are gone. Peak = parameters + moments (+ autocast copies) + max(activations + logits, gradients).

Known gaps: on CPU with bf16 and SDPA + dropout, PyTorch's math fallback computes in fp32 internally and the
estimate is ~10 % low; cuBLAS/cuDNN workspaces and the CUDA context are not tensors and are not counted.
`vaswani experiment memory` (``memory.py``) measures the real peak beside this estimate.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from vaswani.config import ModelConfig
from vaswani.model import Transformer

# Categories of the breakdown, in the order the stacked bars draw them.
CATEGORIES = (
    "parameters",
    "gradients",
    "adamw moments",
    "autocast weight copies",
    "linear-layer inputs",
    "attention q/k/v/out",
    "attention scores (B·H·T²)",
    "ffn hidden",
    "dropout masks",
    "layernorm inputs",
    "masks and indices",
    "logits",
)
TRAINING_STATE = ("parameters", "gradients", "adamw moments")
ALWAYS_LIVE = ("parameters", "adamw moments", "autocast weight copies")  # live through the whole step
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


@dataclass(frozen=True)
class BatchShape:
    """A batch of ``batch_size`` pairs, every position a real token (no padding): N = batch_size × tgt_len."""

    batch_size: int
    src_len: int
    tgt_len: int

    @property
    def tokens(self) -> int:
        return self.batch_size * max(self.src_len, self.tgt_len)

    @property
    def target_tokens(self) -> int:
        return self.batch_size * self.tgt_len


@dataclass
class MemoryEstimate:
    parts: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # category -> bytes
    encoder_layer: dict[str, float] = field(default_factory=dict)  # activations of one layer, by category
    decoder_layer: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        """Every part at once: an upper bound (gradients and activations are never all live together)."""
        return sum(self.parts.values())

    @property
    def activations(self) -> float:
        """Saved activations and the logits: everything that scales with the batch."""
        return sum(v for k, v in self.parts.items() if k not in TRAINING_STATE and k != "autocast weight copies")

    @property
    def peak(self) -> float:
        """The estimate of the peak: parameters, moments (and autocast copies) are always live; on top comes
        the larger of the activations (all live when backward starts, before any gradient exists: gradients
        are freed to None after every step) and the gradients (all live in the optimizer step, when the
        activations are gone)."""
        always = self.total - self.activations - self.parts.get("gradients", 0.0)
        return always + max(self.activations, self.parts.get("gradients", 0.0))


@dataclass(frozen=True)
class _Dtypes:
    """Bytes per element of what a training step stores, for one precision on one device type."""

    act: int  # outputs of matmuls (autocast dtype)
    mask_cuda: bool  # F.dropout (on the attention weights) saves a 1-byte mask on CUDA, a noise tensor on CPU
    stream: int = 4  # residual stream, LayerNorm inputs/outputs, softmax of the standard backend: fp32 always

    def dropout_mask(self, input_bytes: int) -> int:
        return 1 if self.mask_cuda else input_bytes


class _Tally:
    def __init__(self) -> None:
        self.parts: dict[str, float] = defaultdict(float)

    def add(self, category: str, elements: float, bytes_per_element: int) -> None:
        self.parts[category] += float(elements) * bytes_per_element


def sdpa_is_fused(device_type: str, dropout: float) -> bool:
    """Does F.scaled_dot_product_attention run a fused kernel (no B·H·T² tensors saved) in training?

    On CUDA the flash / memory-efficient kernels handle dropout and masks. On CPU the fused (flash) kernel
    requires dropout_p == 0; with dropout PyTorch falls back to its composite "math" implementation, which
    saves the attention probabilities like the standard backend does.
    """
    return device_type == "cuda" or dropout == 0.0


def _sublayer_attention(t: _Tally, c: ModelConfig, dt: _Dtypes, batch: int, n_q: int, n_k: int, cross: bool,
                        mask_elements: int, device_type: str, dropout: float) -> None:
    """What one attention module saves (its input is counted by the residual sublayer that calls it)."""
    a, d, h = dt.act, c.d_model, c.n_heads
    scores = batch * h * n_q * n_k
    if cross:
        t.add("attention q/k/v/out", batch * n_q * d, a)  # q
        t.add("attention q/k/v/out", 2 * batch * n_k * d, a)  # k, v of the encoder output
    else:
        t.add("attention q/k/v/out", 3 * batch * n_q * d, a)  # the fused qkv projection (q, k, v are views)
        if c.positions == "rope":
            t.add("attention q/k/v/out", 2 * batch * n_q * d, a)  # rotated copies of q and k
    if c.attention == "standard":
        t.add("attention scores (B·H·T²)", scores, 4)  # softmax output, computed in fp32 on purpose
        if dropout > 0:
            t.add("attention scores (B·H·T²)", scores, dt.dropout_mask(a))  # dropout mask of the weights
            t.add("attention scores (B·H·T²)", scores, a)  # dropped weights, saved by weights @ v
        elif a != 4:
            t.add("attention scores (B·H·T²)", scores, a)  # the autocast-dtype copy saved by weights @ v
        t.add("masks and indices", mask_elements, 1)  # the boolean mask saved by masked_fill
    elif sdpa_is_fused(device_type, dropout):
        # The kernel keeps its output for backward; it is laid out (B, T, H, d), so concatenating the heads is
        # a view and out_proj saves the same storage.
        t.add("attention q/k/v/out", batch * n_q * d, a)
        t.add("attention q/k/v/out", batch * h * n_q, 4)  # log-sum-exp per query row
        t.add("masks and indices", mask_elements, a)  # boolean mask turned into an additive one
        return
    else:  # CPU math fallback (dropout > 0): the standard computation, softmax in the input dtype
        t.add("attention scores (B·H·T²)", scores, a)  # softmax output
        t.add("attention scores (B·H·T²)", scores, dt.dropout_mask(a))
        t.add("attention scores (B·H·T²)", scores, a)
    t.add("linear-layer inputs", batch * n_q * d, a)  # heads concatenated (a copy), saved by out_proj


def _residual(t: _Tally, c: ModelConfig, dt: _Dtypes, tokens: int, dropout: float) -> None:
    """Residual + LayerNorm around a sublayer: the sublayer's input as saved by its first Linear, the dropout
    mask of the sublayer output, and the LayerNorm input (post-LN: the sum; pre-LN: x) with its mean/rstd."""
    d = c.d_model
    t.add("linear-layer inputs", tokens * d, dt.act)
    if dropout > 0:
        t.add("dropout masks", tokens * d, 1)  # vaswani.model.dropout keeps a bool mask on every device
    t.add("layernorm inputs", tokens * d, dt.stream)
    t.add("layernorm inputs", 2 * tokens, 4)  # mean and 1/std per position


def _feed_forward(t: _Tally, c: ModelConfig, dt: _Dtypes, tokens: int, dropout: float) -> None:
    hidden = tokens * c.d_ff
    # ReLU saves its output, GELU its input: one hidden tensor either way.
    t.add("ffn hidden", hidden, dt.act)
    if dropout > 0:
        t.add("dropout masks", hidden, 1)
        t.add("ffn hidden", hidden, dt.act)  # the dropped hidden layer, saved by the down projection
    elif c.activation == "gelu":
        t.add("ffn hidden", hidden, dt.act)  # GELU's output is a second tensor, saved by the down projection


def encoder_layer_activations(c: ModelConfig, dt: _Dtypes, batch: int, src_len: int, device_type: str) -> _Tally:
    t = _Tally()
    p, tokens = c.dropout, batch * src_len
    window = c.sliding_window is not None
    mask_elements = batch * src_len * (src_len if window else 1)  # (B,1,1,S) padding, or (B,1,S,S) & window
    _residual(t, c, dt, tokens, p)
    _sublayer_attention(t, c, dt, batch, src_len, src_len, False, mask_elements, device_type, c.attention_dropout)
    _residual(t, c, dt, tokens, p)
    _feed_forward(t, c, dt, tokens, p)
    return t


def decoder_layer_activations(c: ModelConfig, dt: _Dtypes, batch: int, src_len: int, tgt_len: int,
                              device_type: str) -> _Tally:
    t = _Tally()
    p, tokens = c.dropout, batch * tgt_len
    self_mask = tgt_len * tgt_len  # causal (1,1,T,T), also with a window
    _residual(t, c, dt, tokens, p)
    _sublayer_attention(t, c, dt, batch, tgt_len, tgt_len, False, self_mask, device_type, c.attention_dropout)
    _residual(t, c, dt, tokens, p)
    _sublayer_attention(t, c, dt, batch, tgt_len, src_len, True, batch * src_len, device_type,
                        c.attention_dropout)
    if dt.act != 4:  # autocast casts the (fp32) encoder output to bf16 again in every layer's kv projection
        t.add("linear-layer inputs", batch * src_len * c.d_model, dt.act)
    _residual(t, c, dt, tokens, p)
    _feed_forward(t, c, dt, tokens, p)
    return t


def parameter_counts(config: ModelConfig) -> tuple[int, int]:
    """(trainable parameters, parameters of nn.Linear modules), from a model built on the meta device: exact
    and free (no memory is allocated)."""
    with torch.device("meta"):
        model = Transformer(config)
    linear = {id(p): p.numel() for m in model.modules() if isinstance(m, nn.Linear) for p in m.parameters()}
    return model.num_parameters(), sum(linear.values())


def estimate_training_memory(config: ModelConfig, shape: BatchShape, precision: str = "fp32",
                             device_type: str = "cpu") -> MemoryEstimate:
    """Bytes of one training step with AdamW on ``shape``, by category (see the module docstring)."""
    n_params, n_linear = parameter_counts(config)
    dt = _Dtypes(act=BYTES[precision], mask_cuda=device_type == "cuda")
    b, s, tgt = shape.batch_size, shape.src_len, shape.tgt_len
    n, d, v = shape.target_tokens, config.d_model, config.vocab_size
    estimate = MemoryEstimate()
    parts = estimate.parts
    parts["parameters"] = 4 * n_params  # fp32 master weights, also under autocast
    parts["gradients"] = 4 * n_params
    parts["adamw moments"] = 2 * 4 * n_params  # exp_avg and exp_avg_sq
    if dt.act != 4:
        parts["autocast weight copies"] = dt.act * n_linear  # cached casts, kept by backward

    encoder = encoder_layer_activations(config, dt, b, s, device_type)
    decoder = decoder_layer_activations(config, dt, b, s, tgt, device_type)
    estimate.encoder_layer, estimate.decoder_layer = dict(encoder.parts), dict(decoder.parts)
    for layer, count in ((encoder, config.n_encoder_layers), (decoder, config.n_decoder_layers)):
        for category, value in layer.parts.items():
            parts[category] += count * value

    t = _Tally()
    for tokens in (b * s, b * tgt):  # embeddings: ids saved by the lookup, dropout mask of the sum
        t.add("masks and indices", tokens, 8)
        if config.dropout > 0:
            t.add("dropout masks", tokens * d, 1)
    if config.norm == "pre":  # final LayerNorms of encoder and decoder
        t.add("layernorm inputs", b * (s + tgt) * d, dt.stream)
    if dt.act == 4:  # the encoder output, saved once by the (fp32) kv projections of all decoder layers
        t.add("linear-layer inputs", b * s * d, dt.act)
    t.add("masks and indices", n * 2, 8)  # indices of the real target positions (hidden[real])
    t.add("linear-layer inputs", n * d, dt.act)  # gathered decoder states, saved by the output projection
    t.add("logits", 2 * n * v, 4)  # the logits and the log-probs saved from them (which become the gradient)
    # The peak comes in backward, at the output projection: its input gradient (N × d) is allocated while the
    # logits' gradient is still alive.
    t.add("logits", n * d, dt.act)
    for category, value in t.parts.items():
        parts[category] += value
    return estimate


def largest_batch_within(config: ModelConfig, length: int, budget_bytes: float, precision: str,
                         device_type: str) -> int:
    """The largest batch size (sentences of ``length`` tokens) whose estimated peak stays within the budget.

    The estimate grows monotonically with the batch size, so doubling then bisecting finds it exactly.
    """
    def fits(batch: int) -> bool:
        shape = BatchShape(batch, length, length)
        return estimate_training_memory(config, shape, precision, device_type).peak <= budget_bytes

    if not fits(1):
        return 0
    low, high = 1, 2
    while fits(high):
        low, high = high, high * 2
    while high - low > 1:  # fits(low), not fits(high)
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


__all__ = [
    "ALWAYS_LIVE", "BYTES", "BatchShape", "CATEGORIES", "MemoryEstimate", "TRAINING_STATE",
    "decoder_layer_activations", "encoder_layer_activations", "estimate_training_memory", "largest_batch_within",
    "parameter_counts", "sdpa_is_fused",
]
