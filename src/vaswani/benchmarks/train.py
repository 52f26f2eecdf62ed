"""`vaswani bench train`: tokens/s of a training step, ours vs peers of the same size on the same batches.

Peers (``--peer``, any of):

- ``torch``: an equal-size model built on ``torch.nn.Transformer``, written the way tutorials write it
  (key-padding masks, a causal mask, logits for every position);
- ``marian``: Hugging Face ``MarianMTModel`` — what a user who wants a small de→en Transformer picks instead —
  built with our dimensions: d_model, layers, heads, d_ff, vocabulary, shared embeddings (all three), post-LN,
  ReLU, sinusoidal positions, the same residual, feed-forward and attention dropout. Needs ``pip install .[bench]``.
  Its attention runs through PyTorch's fused kernel (``sdpa``, as our default backend);
- ``marian-eager``: the same with Hugging Face's written-out attention (``eager``, as our ``standard`` backend).

Every model is trained by the same code: :func:`vaswani.training.train_step` with AdamW and the same loss
(cross-entropy summed over real target tokens, plain or label-smoothed), in the same precision. Batches:

- ``fixed``: 64 sentences × 16 source + 16 target random tokens, no padding (the issue's reference shape);
- ``multi30k``: real token-budget batches of Multi30k from our data pipeline, padded per batch as training pads them;
- ``random``: random ids with Multi30k-like lengths, padded per batch (no data needed).

Timed steps alternate between the models (A, B, A, B, …) in one process, so a load change on the machine hits
every model alike; the median of the repeats is reported with the spread. ``--profile`` also writes where each
model's step spends its time, by kind of operator (``vaswani.benchmarks.profiling``), next to the table.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from vaswani.benchmarks.profiling import (PROFILE_PASSES, add_passes_argument, ceiling_line, kind_table,
                                          largest_operators, matmul_lines, matmul_peak, profile_by_kind)
from vaswani.config import PRECISIONS, ModelConfig, add_settings_argument, apply_model_settings, parse_variant, ranged
from vaswani.data.commands import add_data_dir_argument
from vaswani.devices import resolve_device, reuse_freed_memory, synchronize
from vaswani.errors import VaswaniError
from vaswani.io import atomic_write_json, atomic_write_text, check_output_file
from vaswani.model import Dropout, Transformer, sinusoidal_table
from vaswani.provenance import provenance, provenance_lines
from vaswani.training.flops import peak_flops, training_flops
from vaswani.training.loss import TranslationLoss
from vaswani.training.step import train_step

PAD, BOS, EOS = 0, 1, 2


@dataclass
class TrainBatch:
    src: torch.Tensor  # (B, S)
    tgt_in: torch.Tensor  # (B, T)
    tgt_out: torch.Tensor  # (B, T), padding = PAD

    @property
    def tokens(self) -> int:
        return int((self.tgt_out != PAD).sum())

    def to(self, device: torch.device) -> "TrainBatch":
        return TrainBatch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device))

    def training_flops(self, config: ModelConfig) -> float:
        """Matmul FLOPs of a training step on this batch (forward + backward, as MFU counts them)."""
        return training_flops(config, (self.src != PAD).sum(1).tolist(), (self.tgt_out != PAD).sum(1).tolist())


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


def marian_config(config: ModelConfig, max_positions: int = 512):
    """A ``transformers.MarianConfig`` with our architecture (raises ImportError without transformers)."""
    from transformers import MarianConfig

    if config.norm != "post" or config.positions != "sinusoidal" or config.tie_embeddings != "all-three":
        raise VaswaniError("the MarianMT peer has post-LN, sinusoidal positions and all-three tying; "
                           f"this model has norm={config.norm}, positions={config.positions}, "
                           f"tie_embeddings={config.tie_embeddings}")
    return MarianConfig(
        vocab_size=config.vocab_size, decoder_vocab_size=config.vocab_size, d_model=config.d_model,
        encoder_layers=config.n_encoder_layers, decoder_layers=config.n_decoder_layers,
        encoder_attention_heads=config.n_heads, decoder_attention_heads=config.n_heads,
        encoder_ffn_dim=config.d_ff, decoder_ffn_dim=config.d_ff, activation_function=config.activation,
        dropout=config.dropout, attention_dropout=config.attention_dropout,
        activation_dropout=config.dropout,  # ours drops inside the feed-forward with the residual rate
        max_position_embeddings=max_positions, scale_embedding=config.scale_embeddings,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
        pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=BOS, forced_eos_token_id=EOS,
    )


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
    """Our model with the loss as it was before ``smoothed_cross_entropy``: F.cross_entropy with label smoothing,
    then a second, unsmoothed one (and an argmax over the logits) for the logged NLL and accuracy."""

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


# Each speed-up of the training step, undone one at a time: (name, what changes). Raced against ours as it is.
SPEEDUPS = ("attention dropout 0.1 (before: = dropout)", "loss: two cross-entropies (before)",
            "AdamW for-each (before: fused on GPU only)", "dropout: nn.Dropout (before)",
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


# ---- batches ----------------------------------------------------------------------------------------------------
def fixed_batches(vocab_size: int, n_batches: int, sentences: int = 64, length: int = 16,
                  seed: int = 0) -> list[TrainBatch]:
    """Unpadded batches of ``sentences`` × ``length`` random source and target tokens."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        src = torch.randint(4, vocab_size, (sentences, length), generator=generator)
        tgt = torch.randint(4, vocab_size, (sentences, length + 1), generator=generator)
        tgt[:, 0] = BOS
        out.append(TrainBatch(src, tgt[:, :-1].clone(), tgt[:, 1:].clone()))
    return out


def sentence_lengths(n: int, seed: int = 0) -> list[tuple[int, int]]:
    """(source, target) token lengths with a Multi30k-like spread (8-27 source tokens, target ~0.9x)."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(8, 28, (n,), generator=generator)
    tgt = (src.float() * 0.9 + torch.randint(-3, 4, (n,), generator=generator)).long().clamp(min=4)
    return list(zip(src.tolist(), tgt.tolist()))


def make_batches(config: ModelConfig, max_tokens: int, n_batches: int, seed: int = 0) -> list[TrainBatch]:
    """Token-budget batches of random ids with realistic lengths, padded to the longest (as training does)."""
    generator = torch.Generator().manual_seed(seed)
    pairs = sentence_lengths(max(n_batches, n_batches * max_tokens // 10), seed)
    longest = max(max(pair) for pair in pairs)
    if max_tokens < longest:  # as the training sampler refuses it: no batch could hold the longest sentence
        raise VaswaniError(f"max_tokens={max_tokens} is smaller than the longest random sentence ({longest} tokens); "
                           f"raise --max-tokens")
    batches, start = [], 0
    while len(batches) < n_batches:
        chunk = []
        while start < len(pairs) and (len(chunk) + 1) * max(max(p) for p in chunk + [pairs[start]]) <= max_tokens:
            chunk.append(pairs[start])
            start += 1
        if start >= len(pairs):
            start = 0
        src_len = max(s for s, _ in chunk) + 1
        tgt_len = max(t for _, t in chunk) + 1
        src = torch.zeros(len(chunk), src_len, dtype=torch.long)
        tgt = torch.zeros(len(chunk), tgt_len + 1, dtype=torch.long)
        for row, (s, t) in enumerate(chunk):
            src[row, :s] = torch.randint(4, config.vocab_size, (s,), generator=generator)
            src[row, s] = EOS
            tgt[row, 0] = BOS
            tgt[row, 1 : t + 1] = torch.randint(4, config.vocab_size, (t,), generator=generator)
            tgt[row, t + 1] = EOS
        batches.append(TrainBatch(src, tgt[:, :-1].clone(), tgt[:, 1:].clone()))
    return batches


def multi30k_batches(vocab_size: int, max_tokens: int, n_batches: int, data_dir: str | None,
                     seed: int = 0) -> list[TrainBatch]:
    """The first ``n_batches`` of a shuffled Multi30k training epoch, through our tokenizer, sampler and collate."""
    from vaswani.data.batching import TokenBudgetSampler, collate
    from vaswani.data.pipeline import default_out_dir, prepare_dataset

    prepared = prepare_dataset("multi30k", splits=("train",), data_dir=data_dir, vocab_size=vocab_size,
                               out_dir=default_out_dir("multi30k", "de-en", vocab_size))
    train, tokenizer = prepared.splits["train"], prepared.tokenizer
    if tokenizer.vocab_size > vocab_size:
        raise VaswaniError(f"the Multi30k tokenizer has {tokenizer.vocab_size} tokens, more than the model's "
                           f"vocab_size {vocab_size}")
    sampler = TokenBudgetSampler(train.src_lengths, train.tgt_lengths, max_tokens, seed=seed, shuffle=True)
    out = []
    for indices in sampler.all_batches(0)[:n_batches]:
        batch = collate([train[int(i)] for i in indices], tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id)
        out.append(TrainBatch(batch.src, batch.tgt_in, batch.tgt_out))
    return out


# ---- timing -----------------------------------------------------------------------------------------------------
class Contender:
    """One model, its optimizer and its step over the benchmark's batches."""

    def __init__(self, name: str, module: nn.Module, precision: str, fused: bool = True):
        self.name, self.module, self.precision = name, module, precision
        self.optimizer = torch.optim.AdamW(module.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=fused)
        self.rates: list[float] = []
        self.parameters = sum(p.numel() for p in module.parameters() if p.requires_grad)

    def step(self, batch: TrainBatch) -> int:
        tokens = batch.tokens
        train_step(self.module, self.optimizer, [batch], tokens, precision=self.precision)
        return tokens

    def timed_step(self, batch: TrainBatch, device: torch.device) -> tuple[int, float]:
        synchronize(device)
        start = time.perf_counter()
        tokens = self.step(batch)
        synchronize(device)
        return tokens, time.perf_counter() - start

    def summary(self) -> dict[str, float | list[float]]:
        return {"tokens_per_s": statistics.median(self.rates), "min": min(self.rates), "max": max(self.rates),
                "runs": self.rates, "parameters": self.parameters}


def race(contenders: list[Contender], batches: list[TrainBatch], device: torch.device, warmup: int,
         repeats: int) -> None:
    """Warm every contender up, then take turns *step by step* on the same batches (A, B, A, B, …): on a shared
    machine the load changes within seconds, and alternating single steps exposes every model to it alike.
    Each repeat gives every contender one tokens/s figure over all timed batches."""
    for contender in contenders:
        for batch in batches[:warmup]:
            contender.step(batch)
    for _ in range(repeats):
        totals = {id(c): [0, 0.0] for c in contenders}
        for batch in batches[warmup:]:
            for contender in contenders:
                tokens, seconds = contender.timed_step(batch, device)
                totals[id(contender)][0] += tokens
                totals[id(contender)][1] += seconds
        for contender in contenders:
            tokens, seconds = totals[id(contender)]
            contender.rates.append(tokens / seconds)


def profile_steps(contender: Contender, batches: list[TrainBatch], threads: int,
                  passes: int = PROFILE_PASSES) -> dict:
    """A few steps of ``contender`` under torch.profiler at ``threads`` intra-op threads, by operator kind."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return {"threads": threads,
                **profile_by_kind(lambda: [contender.step(batch) for batch in batches], passes=passes)}
    finally:
        torch.set_num_threads(before)


# ---- command ----------------------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="small", help="model preset (base, small, tiny)")
    add_settings_argument(parser, ("model",), "model.d_model=256")
    parser.add_argument("--peer", nargs="+", default=["torch"], choices=sorted(PEERS),
                        help="models to race against ours (marian needs the bench extra: transformers)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:model.KEY=VALUE[,…]",
                        help="also race ours with other model settings, e.g. 'attn-dropout:model.attention_dropout=0.1'")
    parser.add_argument("--batches", nargs="+", default=["random"], choices=["fixed", "multi30k", "random"],
                        help="fixed 64x(16+16) unpadded, real Multi30k token-budget batches, or random padded")
    parser.add_argument("--loss", nargs="+", default=["smoothed"], choices=["plain", "smoothed"],
                        help="cross-entropy without or with label smoothing 0.1")
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=PRECISIONS,
                        help="one or more precisions to measure (default fp32 bf16)")
    parser.add_argument("--max-tokens", type=ranged(int, ge=1), default=2048,
                        help="token budget of multi30k/random batches")
    parser.add_argument("--steps", type=ranged(int, ge=1), default=8, help="timed steps per repeat")
    parser.add_argument("--warmup", type=ranged(int, ge=0), default=3, help="untimed warm-up steps")
    parser.add_argument("--repeats", type=ranged(int, ge=1), default=3, help="timed repeats per model, interleaved")
    parser.add_argument("--threads", type=ranged(int, ge=1), default=None,
                        help="torch intra-op threads (default: torch's)")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    add_data_dir_argument(parser)
    parser.add_argument("--speedups", action="store_true",
                        help="also race ours with each training speed-up undone (and with torch.compile)")
    parser.add_argument("--foreach", action="store_true",
                        help="AdamW's for-each implementation for every model (default: fused, as training uses)")
    parser.add_argument("--allocator", choices=["reuse", "system"], default="reuse",
                        help="reuse: keep freed memory for reuse, as CPU training does (train.reuse_freed_memory, "
                             "for every model in this process); system: the C library's default")
    parser.add_argument("--profile", type=ranged(int, ge=1), nargs="*", default=None, metavar="THREADS",
                        help="also write torch.profiler tables of each model's step at these thread counts")
    add_passes_argument(parser)
    parser.add_argument("--out", type=Path, default=None,
                        help="write the results as JSON here, and a markdown table next to it (.md)")


def run(args: argparse.Namespace) -> int:
    if args.out:  # refused now, not after minutes of timing
        profile = [args.out.with_suffix(".profile.md")] if args.profile is not None else []
        for path in (args.out, args.out.with_suffix(".md"), *profile):
            check_output_file(path, "--out")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    allocator = "reuse" if args.allocator == "reuse" and reuse_freed_memory() else "system"
    config = apply_model_settings(ModelConfig.preset(args.preset, dropout=0.1), args.settings)
    variants = _variants(args.variant, config)
    n_batches = args.warmup + args.steps
    results, profiles = [], {}
    peaks: dict[str, tuple[float, str]] = {}
    for kind in args.batches:
        batches = _batches(kind, config, args, n_batches)
        for loss in args.loss:
            smoothing = 0.1 if loss == "smoothed" else 0.0
            for precision in args.precision:
                contenders = []
                builds = [("vaswani", lambda c=config: TranslationLoss(Transformer(c), smoothing))] + [
                    (f"vaswani {label}", lambda c=c: TranslationLoss(Transformer(c), smoothing))
                    for label, c in variants
                ] + [(PEERS[p][0], lambda p=p: PEERS[p][1](config, smoothing)) for p in args.peer]
                # The dimensions that set a model's FLOPs: a variant's own, everyone else's are ours.
                dims = {"vaswani": config, **{f"vaswani {label}": c for label, c in variants}}
                for name, build in builds:
                    torch.manual_seed(0)
                    contenders.append(Contender(name, build().to(device), precision, fused=not args.foreach))
                if args.speedups:
                    contenders += _speedup_contenders(config, smoothing, precision, device)
                device_batches = [b.to(device) for b in batches]
                race(contenders, device_batches, device, args.warmup, args.repeats)
                row = {"batches": kind, "loss": loss, "precision": precision,
                       "sentences_per_batch": statistics.mean(b.src.size(0) for b in batches),
                       "target_tokens_per_batch": statistics.mean(b.tokens for b in batches),
                       "padding": 1 - statistics.mean(b.tokens / b.tgt_out.numel() for b in batches),
                       "models": {c.name: c.summary() for c in contenders}}
                # Model FLOPs utilisation: FLOPs per token of the timed batches × tokens/s over the device's
                # peak (the datasheet's on a known GPU, a large matmul's measured now elsewhere).
                if precision not in peaks:
                    peaks[precision] = peak_flops(device, precision)
                peak, peak_source = peaks[precision]
                timed = batches[args.warmup :]
                row["peak_flops"], row["peak_source"] = peak, peak_source
                for c in contenders:
                    stats = row["models"][c.name]
                    per_token = sum(b.training_flops(dims.get(c.name, config)) for b in timed) / sum(
                        b.tokens for b in timed)
                    stats["model_flops_per_s"] = per_token * stats["tokens_per_s"]
                    stats["mfu"] = stats["model_flops_per_s"] / peak
                ours = row["models"]["vaswani"]["tokens_per_s"]
                # Median over repeats of the ratio within a repeat: each repeat's steps alternated, so its ratio
                # saw one load; the ratio of the medians is kept too.
                row["ours_over"] = {c.name: statistics.median(a / b for a, b in zip(contenders[0].rates, c.rates))
                                    for c in contenders[1:]}
                row["ours_over_medians"] = {c.name: ours / row["models"][c.name]["tokens_per_s"]
                                            for c in contenders[1:]}
                # Each variant against each peer too: a variant that switches something off (dropout, say)
                # bounds what making that thing cheaper could buy against the peer.
                variants_raced = contenders[1 : 1 + len(variants)]
                peers_raced = contenders[1 + len(variants) : 1 + len(variants) + len(args.peer)]
                row["variants_over_peers"] = {
                    v.name: {p.name: statistics.median(a / b for a, b in zip(v.rates, p.rates)) for p in peers_raced}
                    for v in variants_raced}
                results.append(row)
                _print_row(row)
                for threads in args.profile or []:
                    key = f"{kind} batches, {loss} loss, {precision}, {threads} thread{'s' if threads > 1 else ''}"
                    first = device_batches[: min(3, len(device_batches))]
                    tokens = sum(b.tokens for b in first)
                    # What the profiled batches take each model at its median speed in the timed (unprofiled)
                    # steps, when those ran at the profile's thread count: the time the ceiling is taken against.
                    profiles[key] = [(c.name, {**profile_steps(c, first, threads, args.profile_passes),
                                               "timed_ms": 1e3 * tokens / statistics.median(c.rates)
                                               if threads == torch.get_num_threads() else None})
                                     for c in contenders]
    if args.out:
        report = {**provenance(device), "preset": args.preset, "settings": args.settings,
                  "model": config.to_dict(), "variants": {label: c.to_dict() for label, c in variants},
                  "torch_threads": torch.get_num_threads(), "max_tokens": args.max_tokens, "steps": args.steps,
                  "warmup": args.warmup, "repeats": args.repeats,
                  "optimizer": f"AdamW(lr=1e-4, betas=(0.9, 0.98), {'for-each' if args.foreach else 'fused'})",
                  "allocator": allocator,
                  "results": results,
                  "profile": {key: dict(group) for key, group in profiles.items()},
                  # The rate the profiled matrix products are compared with, measured now (see matmul_peak).
                  "matmul_peak_gflops": {str(t): matmul_peak(t) for t in args.profile or []},
                  "profile_passes": args.profile_passes}
        atomic_write_json(args.out, report)
        atomic_write_text(args.out.with_suffix(".md"), markdown_table(report))
        if profiles:
            atomic_write_text(args.out.with_suffix(".profile.md"), profile_markdown(report, profiles))
        print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


def _speedup_contenders(config: ModelConfig, smoothing: float, precision: str,
                        device: torch.device) -> list[Contender]:
    def ours(c: ModelConfig = config) -> nn.Module:
        torch.manual_seed(0)
        return TranslationLoss(Transformer(c), smoothing).to(device)

    dropout, loss, adamw, torch_dropout, compiled = SPEEDUPS
    torch.manual_seed(0)
    return [
        Contender(f"vaswani, {dropout}", ours(ModelConfig(**{**config.to_dict(), "attention_dropout": 0.1})),
                  precision),
        Contender(f"vaswani, {loss}", TwoCrossEntropiesLoss(Transformer(config), smoothing).to(device), precision),
        Contender(f"vaswani, {adamw}", ours(), precision, fused=False),
        Contender(f"vaswani, {torch_dropout}", with_torch_dropout(ours()), precision),
        Contender(f"vaswani, {compiled}", torch.compile(ours()), precision),
    ]


def _variants(specs: list[str], config: ModelConfig) -> list[tuple[str, ModelConfig]]:
    out = []
    for spec in specs:
        label, items = parse_variant(spec, ("model",))
        out.append((label, apply_model_settings(config, items)))
    return out


def _batches(kind: str, config: ModelConfig, args: argparse.Namespace, n: int) -> list[TrainBatch]:
    if kind == "fixed":
        return fixed_batches(config.vocab_size, n)
    if kind == "multi30k":
        return multi30k_batches(config.vocab_size, args.max_tokens, n, args.data_dir)
    return make_batches(config, args.max_tokens, n)


def _print_row(row: dict) -> None:
    ours = row["models"]["vaswani"]["tokens_per_s"]
    others = " | ".join(f"{name} {row['models'][name]['tokens_per_s']:,.0f} (ours {ratio:.2f}x)"
                        for name, ratio in row["ours_over"].items())
    print(f"{row['batches']:>8} {row['loss']:>8} {row['precision']:>4}: vaswani {ours:,.0f} tok/s | {others}",
          flush=True)


_ALLOCATORS = {"reuse": "kept for reuse by every model (`--allocator reuse`, as CPU training does)",
               "system": "returned to the system (`--allocator system`)"}


def profile_markdown(report: dict, profiles: dict[str, list[tuple[str, dict]]]) -> str:
    """Each model's training step by operator kind, side by side, with the provenance the numbers need."""
    lines = ["# Where a training step's time goes: torch operators by kind", "",
             f"The first three batches of each setting, {report['profile_passes']} times per model under "
             "`torch.profiler` (forward, backward and the AdamW update): each operator's self CPU time, summed by kind "
             "(its least over the passes), as a share of all operator time.", ""]
    peaks = report.get("matmul_peak_gflops", {})
    for key, group in profiles.items():
        (ours, ours_profile), others = group[0], group[1:]
        threads = ours_profile["threads"]
        lines += [f"## {key}", "", *kind_table(group), "", *(largest_operators(name, p) for name, p in group),
                  *(line for name, p in group for line in matmul_lines(name, p, peaks.get(str(threads)), threads)),
                  *(ceiling_line(ours, ours_profile, name, p["timed_ms"], "time in the timed steps")
                    for name, p in others if p.get("timed_ms")), ""]
    lines += [*provenance_lines(report), ""]
    return "\n".join(lines)


def markdown_table(report: dict) -> str:
    """The results as a markdown table, with the provenance the numbers need."""
    m = report["model"]
    lines = [
        "# `vaswani bench train`: training tokens/s, same batches, steps alternated between models",
        "",
        f"Model: d_model {m['d_model']}, {m['n_encoder_layers']}+{m['n_decoder_layers']} layers, {m['n_heads']} "
        f"heads, d_ff {m['d_ff']}, vocabulary {m['vocab_size']}, {m['norm']}-LN, {m['activation']}, "
        f"{m['positions']} positions, dropout {m['dropout']}, attention dropout {m['attention_dropout']}. "
        f"{report['torch_threads']} threads, {report['steps']} timed steps × {report['repeats']} repeats "
        f"after {report['warmup']} warm-up steps; {report['optimizer']}; freed memory "
        f"{_ALLOCATORS[report.get('allocator', 'system')]}. Each repeat alternates single steps of "
        "the models; tokens/s is the median (and range) over repeats, *ours / model* the median over repeats of "
        "the ratio within a repeat.",
        "",
        "| batches | loss | precision | model | tokens/s (median) | min–max | ours / model | model TFLOP/s | MFU |",
        "|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in report["results"]:
        for name, stats in row["models"].items():
            ratio = row["ours_over"].get(name)
            lines.append(f"| {row['batches']} ({row['sentences_per_batch']:.0f} sent., "
                         f"{row['padding']:.0%} pad) | {row['loss']} | {row['precision']} | {name} | "
                         f"{stats['tokens_per_s']:,.0f} | {stats['min']:,.0f}–{stats['max']:,.0f} | "
                         f"{'' if ratio is None else f'{ratio:.2f}×'} | {stats['model_flops_per_s'] / 1e12:.3g} | "
                         f"{stats['mfu']:.1%} |")
    peak_lines = sorted({f"{row['precision']}: {row['peak_flops'] / 1e12:.3g} TFLOP/s ({row['peak_source']})"
                         for row in report["results"]})
    lines += ["", "MFU: the matrix-product FLOPs of forward and backward (3 × forward, embeddings, norms and "
              "softmax not counted) per second, over the peak of " + "; ".join(peak_lines) + "."]
    against_peers = [f"- {row['batches']} batches, {row['loss']} loss, {row['precision']}: {variant} / {peer} "
                     f"**{ratio:.2f}×**"
                     for row in report["results"] for variant, peers in row.get("variants_over_peers", {}).items()
                     for peer, ratio in peers.items()]
    if against_peers:
        lines += ["", "Each variant against each peer (median over repeats of the ratio within a repeat):", "",
                  *against_peers]
    lines += ["", *provenance_lines(report), ""]
    return "\n".join(lines)
