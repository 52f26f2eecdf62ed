"""Training a :class:`TransformerClassifier` on a labelled CSV file.

    data = load_dataset("train.csv", settings)        # classification.data: read, label ids, stratified split
    result = train_classifier(data, settings, "runs/tweets")

One run: tokenizer trained on the training split only (the validation texts stay unseen), AdamW with linear warmup
then linear decay, gradient clipping, and early stopping on validation macro-F1. The best model is kept in memory
and written to the output directory once, at the end (the commands write that directory whole: an interrupted or
failed run leaves nothing half-made).
Everything random (split, initialisation, dropout, batch order) follows the run's seed, so a run repeats exactly on
the same machine and thread count.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from vaswani.classification.checkpoint import ClassifierInfo, save_classifier
from vaswani.classification.data import Dataset
from vaswani.classification.encoding import TextEncoder, normalize, pad_batch, train_tokenizer
from vaswani.classification.metrics import Metrics, score_predictions
from vaswani.classification.model import TransformerClassifier
from vaswani.classification.predict import predict_proba
from vaswani.classification.settings import TrainSettings
from vaswani.config import ModelConfig
from vaswani.data.batching import TokenBudgetSampler
from vaswani.errors import ConfigError, VaswaniError
from vaswani.precision import autocast
from vaswani.progress import progress_reporter
from vaswani.settings import apply_overrides
from vaswani.training.optim import parameter_groups
from vaswani.training.schedule import decay_lr


# ---- model and optimiser -------------------------------------------------------------------------------------
def build_model_config(settings: TrainSettings, vocab_size: int) -> ModelConfig:
    """The preset, then ``--set`` overrides; vocabulary size and length come from the tokenizer and --max-len."""
    for fixed, option in (("vocab_size", "--vocab-size"), ("max_len", "--max-len")):
        if fixed in settings.model_overrides:
            raise ConfigError(f"model.{fixed} follows the tokenizer; set it with {option} instead of --set")
    config = apply_overrides(ModelConfig.preset(settings.preset), settings.model_overrides, "model")
    return dataclasses.replace(config, vocab_size=vocab_size, max_len=settings.max_len)


def length_bucketed_batches(lengths: list[int], batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """The core's length-bucketed batches (``data.TokenBudgetSampler``) with at most ``batch_size`` texts each: a
    batch is padded to its longest text, so grouping similar lengths cuts the padding (about 40 % of the compute
    on tweets with random batches). Shuffled per (seed, epoch), sorted by length within buckets of 50 batches."""
    sampler = TokenBudgetSampler(np.asarray(lengths), np.zeros(len(lengths), dtype=np.int64),
                                 max_tokens=batch_size * (max(lengths) + 1), seed=seed, shuffle=True,
                                 chunk_size=50 * batch_size, max_sentences=batch_size)
    return sampler.batches(epoch)


def linear_schedule(optimizer: torch.optim.Optimizer, settings: TrainSettings,
                    total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The core's warmup-then-linear-decay schedule (``training.schedule.decay_lr``) peaking at ``settings.lr``."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda index: decay_lr(index + 1, 1.0, settings.warmup, total_steps, "linear"))


# ---- training --------------------------------------------------------------------------------------------------
class TrainingDiverged(VaswaniError):
    """The loss or the gradient of a step became inf or nan. The step is not taken, so the weights stay finite
    and no nan model is ever saved."""


@dataclass
class EpochStats:
    epoch: int
    train_loss: float
    val_loss: float
    val_accuracy: float
    val_macro_f1: float
    lr: float  # at the end of the epoch
    seconds: float


@dataclass
class TrainResult:
    history: list[EpochStats]
    best_epoch: int
    val_probs: np.ndarray  # (N_val, C) of the best model, rows in Dataset.val_index order
    val_metrics: Metrics
    n_parameters: int
    model_config: ModelConfig
    seconds: float

    @property
    def val_predicted(self) -> list[int]:
        return self.val_probs.argmax(axis=1).tolist()


def train_classifier(
    data: Dataset,
    settings: TrainSettings,
    out_dir: str | Path,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> TrainResult:
    started = time.perf_counter()
    torch.manual_seed(settings.seed)  # initialisation and dropout
    train_texts, train_ids = data.split("train")
    val_texts, val_ids = data.split("val")

    tokenizer = train_tokenizer(
        settings.tokenizer, normalize(train_texts, settings.lowercase), settings.vocab_size, settings.min_frequency
    )
    encode = TextEncoder(tokenizer, settings.max_len, settings.lowercase)
    train_seqs, val_seqs = encode(train_texts), encode(val_texts)
    config = build_model_config(settings, tokenizer.vocab_size)
    model = TransformerClassifier(config, len(data.labels), settings.pooling)
    info = ClassifierInfo(
        config, data.labels, settings.pooling, settings.tokenizer, settings.max_len, settings.lowercase,
        settings.text_column, list(settings.extra_text_columns), settings.label_column,
    )
    log(
        f"{len(train_texts)} training / {len(val_texts)} validation texts, {len(data.labels)} classes; "
        f"{settings.tokenizer} tokenizer with {tokenizer.vocab_size} tokens; "
        f"model {model.num_parameters():,} parameters ({settings.preset}, {settings.pooling} pooling)"
    )

    # The core's weight-decay groups: decay on weight matrices only (not biases, norms or embeddings).
    optimizer = torch.optim.AdamW(parameter_groups(model, settings.weight_decay), lr=settings.lr)
    steps_per_epoch = math.ceil(len(train_seqs) / settings.batch_size)
    schedule = linear_schedule(optimizer, settings, settings.epochs * steps_per_epoch)
    targets = torch.tensor(train_ids)
    lengths = [len(seq) for seq in train_seqs]

    history: list[EpochStats] = []
    best: tuple[float, int, dict[str, torch.Tensor]] | None = None
    for epoch in range(1, settings.epochs + 1):
        epoch_start = time.perf_counter()
        model.train()
        losses = []
        batches = list(length_bucketed_batches(lengths, settings.batch_size, settings.seed, epoch))
        bar = progress_reporter(len(batches), f"epoch {epoch}/{settings.epochs}", "batches", enabled=progress,
                                leave=False)
        for batch, rows in enumerate(batches, start=1):
            try:
                loss = classifier_step(model, optimizer, pad_batch([train_seqs[i] for i in rows]), targets[rows],
                                       settings)
            except TrainingDiverged as error:
                raise TrainingDiverged(
                    f"epoch {epoch}, batch {batch}: {error}, so training stopped and no model was written; lower "
                    f"--lr (now {settings.lr:g}) or --clip (now {settings.clip:g})") from None
            schedule.step()
            losses.append(loss)
            bar.set_postfix(loss=f"{loss:.3f}")
            bar.update()
        bar.close()

        probs = predict_proba(model, val_seqs)
        metrics = score_predictions(val_ids, probs.argmax(axis=1).tolist(), len(data.labels))
        stats = EpochStats(
            epoch=epoch,
            train_loss=float(np.mean(losses)),
            val_loss=cross_entropy(probs, val_ids),
            val_accuracy=metrics.accuracy,
            val_macro_f1=metrics.macro_f1,
            lr=optimizer.param_groups[0]["lr"],
            seconds=time.perf_counter() - epoch_start,
        )
        history.append(stats)
        improved = best is None or stats.val_macro_f1 > best[0]
        if improved:
            best = (stats.val_macro_f1, epoch, {k: v.detach().clone() for k, v in model.state_dict().items()})
        log(
            f"epoch {epoch:2d}  train loss {stats.train_loss:.4f}  val loss {stats.val_loss:.4f}  "
            f"acc {stats.val_accuracy:.4f}  macro-F1 {stats.val_macro_f1:.4f}  ({stats.seconds:.1f} s)"
            + ("  * best" if improved else "")
        )
        if epoch - best[1] >= settings.patience:
            log(f"no better validation macro-F1 for {settings.patience} epochs: stopping")
            break

    assert best is not None
    model.load_state_dict(best[2])
    save_classifier(out_dir, model, tokenizer, info)
    probs = predict_proba(model, val_seqs)
    return TrainResult(
        history=history,
        best_epoch=best[1],
        val_probs=probs,
        val_metrics=score_predictions(val_ids, probs.argmax(axis=1).tolist(), len(data.labels)),
        n_parameters=model.num_parameters(),
        model_config=config,
        seconds=time.perf_counter() - started,
    )


def classifier_step(
    model: TransformerClassifier,
    optimizer: torch.optim.Optimizer,
    ids: torch.Tensor,
    targets: torch.Tensor,
    settings: TrainSettings,
) -> float:
    """One optimiser step. bf16 autocast is optional, not the default: on CPUs without native bf16 matrix
    instructions (AVX2-only, like the machines these results come from) it is several times *slower* than fp32."""
    with autocast(torch.device("cpu"), settings.precision):  # the classifier trains on the CPU
        loss = F.cross_entropy(model(ids).float(), targets)
    if not math.isfinite(loss.item()):
        raise TrainingDiverged(f"the training loss is {loss.item()}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), settings.clip)
    if not math.isfinite(norm.item()):  # clipping cannot rescue an inf/nan gradient: it would make every weight nan
        raise TrainingDiverged(f"the gradient norm is {norm.item()}")
    optimizer.step()
    return loss.item()


def cross_entropy(probs: np.ndarray, ids: list[int]) -> float:
    picked = probs[np.arange(len(ids)), ids]
    return float(-np.log(np.clip(picked, 1e-12, None)).mean())


__all__ = [
    "EpochStats", "TrainResult", "TrainingDiverged", "train_classifier", "classifier_step", "length_bucketed_batches",
    "build_model_config", "linear_schedule",
]
