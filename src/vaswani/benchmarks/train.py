"""`vaswani bench train`: tokens/s of a training step, ours vs an equal-size model built on torch.nn.Transformer.

Both models get the same batches (random tokens with Multi30k-like sentence lengths, padded per batch), the same optimizer (AdamW), loss (label-smoothed cross-entropy ignoring padding) and precision.
The baseline is written the way tutorials write it: nn.Transformer with key-padding masks and a causal mask,
logits for every position. Timing excludes a few warm-up steps and reports the median of repeated windows.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from vaswani.config import PRECISIONS, ModelConfig, add_settings_argument, apply_model_settings
from vaswani.data.batching import BOS_ID, EOS_ID, Batch, collate
from vaswani.devices import resolve_device, synchronize
from vaswani.model import Transformer, sinusoidal_table
from vaswani.provenance import provenance
from vaswani.training.loss import TranslationLoss
from vaswani.training.step import train_step


class TorchTransformerBaseline(nn.Module):
    """Same size as ours with all-three tying: one embedding matrix, sinusoidal positions, post-LN, ReLU."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        c = config
        self.config = c
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

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
        pad = self.config.pad_id
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), device=src.device)
        hidden = self.transformer(self.embed(src), self.embed(tgt_in), tgt_mask=causal,
                                  src_key_padding_mask=src == pad, tgt_key_padding_mask=tgt_in == pad,
                                  memory_key_padding_mask=src == pad)
        logits = self.generator(hidden)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(), ignore_index=pad,
                               label_smoothing=0.1, reduction="sum")
        # train_step's contract (loss, nll, correct); the two statistics are not what is being timed.
        return loss, loss.detach(), torch.zeros((), device=loss.device)


def sentence_lengths(n: int, seed: int = 0) -> list[tuple[int, int]]:
    """(source, target) token lengths with a Multi30k-like spread (8-27 source tokens, target ~0.9x)."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(8, 28, (n,), generator=generator)
    tgt = (src.float() * 0.9 + torch.randint(-3, 4, (n,), generator=generator)).long().clamp(min=4)
    return list(zip(src.tolist(), tgt.tolist()))


def make_batches(config: ModelConfig, max_tokens: int, n_batches: int, seed: int = 0) -> list[Batch]:
    """Token-budget batches of random ids with realistic lengths, padded to the longest (as training does)."""
    generator = torch.Generator().manual_seed(seed)
    pairs = sentence_lengths(n_batches * max_tokens // 10, seed)
    batches, start = [], 0
    while len(batches) < n_batches:
        chunk = []
        while start < len(pairs) and (len(chunk) + 1) * max(max(p) for p in chunk + [pairs[start]]) <= max_tokens:
            chunk.append(pairs[start])
            start += 1
        if start >= len(pairs):
            start = 0
        items = [(row, torch.randint(4, config.vocab_size, (s,), generator=generator).numpy(),
                  torch.randint(4, config.vocab_size, (t,), generator=generator).numpy())
                 for row, (s, t) in enumerate(chunk)]
        batches.append(collate(items, config.pad_id, BOS_ID, EOS_ID))
    return batches


def time_training(loss_module: nn.Module, batches: list[Batch], device: torch.device, precision: str,
                  warmup: int, repeats: int) -> dict[str, float]:
    """Tokens/s of :func:`train_step` (the trainer's update) with AdamW at a constant learning rate."""
    optimizer = torch.optim.AdamW(loss_module.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    batches = [batch.to(device) for batch in batches]

    def step(batch: Batch) -> int:
        train_step(loss_module, optimizer, [batch], tokens=batch.n_tgt_tokens, precision=precision)
        return batch.n_tgt_tokens

    for batch in batches[:warmup]:
        step(batch)
    rates = []
    for _ in range(repeats):
        synchronize(device)
        start, tokens = time.perf_counter(), 0
        for batch in batches[warmup:]:
            tokens += step(batch)
        synchronize(device)
        rates.append(tokens / (time.perf_counter() - start))
    return {"tokens_per_s": statistics.median(rates), "runs": rates}



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="small", help="model preset (base, small, tiny)")
    add_settings_argument(parser, ("model",), "model.d_model=256")
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=PRECISIONS,
                        help="one or more precisions to measure (default fp32 bf16)")
    parser.add_argument("--max-tokens", type=int, default=2048, help="token budget per batch")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per repeat")
    parser.add_argument("--warmup", type=int, default=3, help="untimed warm-up steps")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats (median reported)")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    config = apply_model_settings(ModelConfig.preset(args.preset, dropout=0.1), args.settings)
    batches = make_batches(config, args.max_tokens, args.warmup + args.steps)
    models: dict[str, Callable[[], nn.Module]] = {
        "vaswani": lambda: TranslationLoss(Transformer(config), label_smoothing=0.1),
        "torch.nn.Transformer": lambda: TorchTransformerBaseline(config),
    }
    results = []
    for precision in args.precision:
        row = {"precision": precision}
        for name, build in models.items():
            torch.manual_seed(0)
            module = build().to(device)
            row[name] = time_training(module, batches, device, precision, args.warmup, args.repeats)
            row[f"{name}_parameters"] = sum(p.numel() for p in module.parameters())
        row["speedup"] = row["vaswani"]["tokens_per_s"] / row["torch.nn.Transformer"]["tokens_per_s"]
        results.append(row)
        print(f"{precision:>5}: vaswani {row['vaswani']['tokens_per_s']:9,.0f} tok/s | torch.nn.Transformer "
              f"{row['torch.nn.Transformer']['tokens_per_s']:9,.0f} tok/s | speed-up {row['speedup']:.2f}x "
              f"({row['vaswani_parameters']:,} vs {row['torch.nn.Transformer_parameters']:,} parameters)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({**provenance(device), "preset": args.preset, "max_tokens": args.max_tokens,
                                        "results": results}, indent=2))
    return 0
