"""What one run of the attention experiment measures: the variants, the sizes, and their defaults per device."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AttentionVariant:
    """One way to compute attention: a backend, with or without the sliding window."""

    name: str
    backend: str  # "standard" | "sdpa"
    windowed: bool


VARIANTS = (AttentionVariant("standard", "standard", False), AttentionVariant("sdpa", "sdpa", False),
            AttentionVariant("standard+window", "standard", True), AttentionVariant("sdpa+window", "sdpa", True))
TRAINING_VARIANTS = ("standard", "sdpa", "sdpa+window", "sdpa, seed+1")
SEED_NOISE_VARIANT = "sdpa, seed+1"  # sdpa again from another seed: the run-to-run noise a backend gap is read against
TRAINING_BLEU_SENTENCES = 200  # validation sentences greedily decoded after each training run (--smoke: 16)


def variant(name: str) -> AttentionVariant:
    """The variant a training run's name starts with ("sdpa, seed+1" -> sdpa)."""
    return next(v for v in VARIANTS if v.name == name.split(",")[0])


@dataclass
class AttentionSettings:
    # microbenchmark of one layer
    d_model: int
    n_heads: int
    lengths: list[int]
    batch_sizes: list[int]
    window: int
    causal: bool
    dropout: float
    warmup: int
    repeats: int
    max_seconds: float  # time cap per point: longer points of the same variant/batch are skipped
    agreement_max_length: int
    # memory and time against the window k, at one length
    windows: list[int]
    window_length: int
    # whole-model training step
    model_preset: str
    model_lengths: list[int]
    model_tokens: int
    # training comparison
    train_steps: int
    train_preset: str
    train_settings: list[str]
    data_dir: str | None
    precision: str
    smoke: bool


SMOKE = dict(d_model=64, n_heads=4, lengths=[32, 64], batch_sizes=[2], warmup=1, repeats=1, max_seconds=5.0,
             agreement_max_length=64, windows=[8, 32], window_length=256, model_preset="tiny", model_lengths=[16, 64],
             model_tokens=256, train_preset="smoke")
CPU_DEFAULTS = dict(d_model=512, n_heads=8, lengths=[64, 128, 256, 512, 1024, 2048], batch_sizes=[1, 8], warmup=1,
                    repeats=3, max_seconds=20.0, agreement_max_length=1024, windows=[16, 32, 64, 128, 256],
                    window_length=None, model_preset="small", model_lengths=[32, 128, 512], model_tokens=1024,
                    train_preset="multi30k-cpu")
GPU_DEFAULTS = dict(d_model=512, n_heads=8, lengths=[64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
                    batch_sizes=[1, 8, 32], warmup=3, repeats=10, max_seconds=10.0, agreement_max_length=4096,
                    windows=[16, 32, 64, 128, 256, 512], window_length=None, model_preset="small",
                    model_lengths=[32, 128, 512, 2048], model_tokens=8192, train_preset="multi30k-gpu")
# window_length None: the longest of the lengths
