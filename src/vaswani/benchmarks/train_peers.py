"""The models `vaswani bench train` races against ours, each wrapped to return what
:func:`vaswani.training.step.train_step` expects (loss sum, NLL sum, correct predictions).

- ``torch``: an equal-size model built on ``torch.nn.Transformer``, written the way tutorials write it
  (key-padding masks, a causal mask, logits for every position);
- ``marian``: Hugging Face ``MarianMTModel`` — what a user who wants a small de→en Transformer picks instead —
  built with our dimensions by the export's :func:`vaswani.export.hf.marian_config`: d_model, layers, heads, d_ff,
  vocabulary, tied embeddings, post-LN, ReLU, sinusoidal positions, the same residual, feed-forward and attention
  dropout. Needs ``pip install .[bench]``. Its attention runs through PyTorch's fused kernel (``sdpa``, as our
  default backend);
- ``marian-eager``: the same with Hugging Face's written-out attention (``eager``, as our ``standard`` backend).

And ours with each of its training speed-ups undone (``--speedups``, :data:`SPEEDUPS`).
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from vaswani.benchmarks.train_batches import PAD
from vaswani.config import ModelConfig
from vaswani.export.hf import marian_config
from vaswani.model import Dropout, Transformer, sinusoidal_table


# ---- peers ------------------------------------------------------------------------------------------------------
class TorchTransformerBaseline(nn.Module):
    """Same size as ours with all-three tying: one embedding matrix, sinusoidal positions, post-LN, ReLU.
    (nn.Transformer has one dropout rate for everything, attention weights included.)"""

    def __init__(self, config: ModelConfig, label_smoothing: float = 0.1):
        super().__init__()
        c = config
        self.config = c
        self.label_smoothing = label_smoothing
        self.embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.register_buffer("positions", sinusoidal_table(max(c.max_len, 512), c.d_model), persistent=False)
        self.transformer = nn.Transformer(c.d_model, c.n_heads, c.n_encoder_layers, c.n_decoder_layers, c.d_ff,
                                          c.dropout, activation=c.activation, batch_first=True,
                                          norm_first=c.norm == "pre")
        self.generator = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.generator.weight = self.embedding.weight
        self.dropout = nn.Dropout(c.dropout)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.embedding(ids) * math.sqrt(self.config.d_model) + self.positions[: ids.size(1)])

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pad = self.config.pad_id
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), device=src.device)
        hidden = self.transformer(self.embed(src), self.embed(tgt_in), tgt_mask=causal,
                                  src_key_padding_mask=src == pad, tgt_key_padding_mask=tgt_in == pad,
                                  memory_key_padding_mask=src == pad)
        return _full_logits_loss(self.generator(hidden), tgt_out, pad, self.label_smoothing)


class MarianPeer(nn.Module):
    """``MarianMTModel`` trained the way a Hugging Face user trains it: encoder padding mask, decoder inputs given,
    logits for every target position, cross-entropy ignoring padding.

    ``attention``: Hugging Face's attention implementation, "sdpa" (the fused kernel, as our default backend) or
    "eager" (softmax(QKᵀ)V written out, as our ``standard`` backend).
    """

    def __init__(self, config: ModelConfig, label_smoothing: float = 0.1, attention: str = "sdpa"):
        super().__init__()
        from transformers import MarianMTModel


        self.config = config
        self.label_smoothing = label_smoothing
        self.model = MarianMTModel(marian_config(config))
        self.model.set_attn_implementation(attention)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = self.model(input_ids=src, attention_mask=src != PAD, decoder_input_ids=tgt_in).logits
        return _full_logits_loss(logits, tgt_out, PAD, self.label_smoothing)


def _full_logits_loss(logits: torch.Tensor, tgt_out: torch.Tensor, pad: int,
                      label_smoothing: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss_sum, nll_sum, n_correct) as :func:`train_step` expects; the peers compute the loss only (a user of
    them would), so the other two are the loss itself and 0."""
    loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(), ignore_index=pad,
                           label_smoothing=label_smoothing, reduction="sum")
    return loss, loss.detach(), loss.new_zeros(())


class TwoCrossEntropiesLoss(nn.Module):
    """Our model with the textbook loss: F.cross_entropy with label smoothing, then a second, unsmoothed one (and
    an argmax over the logits) for the logged NLL and accuracy; ``TranslationLoss`` gets all three from one
    log-softmax."""

    def __init__(self, model: Transformer, label_smoothing: float):
        super().__init__()
        self.model, self.label_smoothing = model, label_smoothing

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
        memory, memory_mask = self.model.encode(src)
        hidden = self.model.decode(tgt_in, memory, memory_mask)
        real = tgt_out != self.model.config.pad_id
        logits, targets = self.model.project(hidden[real]).float(), tgt_out[real]
        loss = F.cross_entropy(logits, targets, label_smoothing=self.label_smoothing, reduction="sum")
        with torch.no_grad():
            nll = F.cross_entropy(logits, targets, reduction="sum") if self.label_smoothing else loss.detach()
            correct = (logits.argmax(-1) == targets).sum()
        return loss, nll, correct


# Each speed-up of the training step, undone one at a time (what ours does instead: attention dropout 0, one
# log-softmax for loss, NLL and accuracy, fused AdamW, our Dropout), and the step compiled. Raced against ours.
SPEEDUPS = ("attention dropout 0.1", "loss: two cross-entropies", "AdamW for-each", "dropout: nn.Dropout",
            "torch.compile (train.compile=true)")


def with_torch_dropout(model: nn.Module) -> nn.Module:
    """``model`` with every :class:`vaswani.model.Dropout` swapped for ``nn.Dropout`` of the same rate."""
    for module in list(model.modules()):
        for name, child in module.named_children():
            if isinstance(child, Dropout):
                setattr(module, name, nn.Dropout(child.p))
    return model


PEERS: dict[str, tuple[str, Callable[[ModelConfig, float], nn.Module]]] = {
    "torch": ("torch.nn.Transformer", TorchTransformerBaseline),
    "marian": ("MarianMT", MarianPeer),
    "marian-eager": ("MarianMT eager", lambda config, smoothing: MarianPeer(config, smoothing, attention="eager")),
}


__all__ = ["MarianPeer", "PEERS", "SPEEDUPS", "TorchTransformerBaseline", "TwoCrossEntropiesLoss", "with_torch_dropout"]
