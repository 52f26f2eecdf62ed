"""How a trained variant is scored: teacher-forced loss and accuracy (in total and per target position) on
given source/target ids, and the greedy search every translation score uses."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from vaswani.data.batching import collate
from vaswani.precision import autocast


@torch.inference_mode()
def teacher_forced(model: Any, tokenizer: Any, sources: Sequence[np.ndarray], targets: Sequence[np.ndarray],
                   device: torch.device, precision: str = "fp32", label_smoothing: float = 0.1,
                   max_tokens: int = 6000) -> dict[str, Any]:
    """Loss, NLL and accuracy of the reference given each source, in total and per target position.

    Position p (0-based) of ``y1 … yn </s>`` counts in ``position_accuracy[p]`` for every sentence that has it.
    """
    pad, bos, eos = tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id
    order = sorted(range(len(sources)), key=lambda i: (len(sources[i]), len(targets[i])))
    longest = max(len(t) for t in targets) + 1
    correct_at, count_at = np.zeros(longest), np.zeros(longest)
    loss = nll = correct = tokens = 0.0
    for chunk in token_batches(order, sources, targets, max_tokens):
        batch = collate([(i, sources[i], targets[i]) for i in chunk], pad, bos, eos).to(device)
        with autocast(device, precision):
            memory, memory_mask = model.encode(batch.src)
            logits = model.project(model.decode(batch.tgt_in, memory, memory_mask)).float()  # (B, T, V)
        real = batch.tgt_out != pad  # (B, T)
        flat_logits, flat_targets = logits[real], batch.tgt_out[real]
        loss += float(F.cross_entropy(flat_logits, flat_targets, label_smoothing=label_smoothing, reduction="sum"))
        nll += float(F.cross_entropy(flat_logits, flat_targets, reduction="sum"))
        hits = (logits.argmax(-1) == batch.tgt_out) & real
        correct += float(hits.sum())
        tokens += float(real.sum())
        width = real.shape[1]
        correct_at[:width] += hits.sum(0).cpu().numpy()
        count_at[:width] += real.sum(0).cpu().numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        per_position = np.where(count_at > 0, correct_at / np.maximum(count_at, 1), np.nan)
    return {"loss": loss / tokens, "nll": nll / tokens, "accuracy": correct / tokens, "tokens": int(tokens),
            "position_accuracy": per_position.tolist(), "position_count": count_at.astype(int).tolist()}


def token_batches(order: list[int], sources: Sequence[np.ndarray], targets: Sequence[np.ndarray],
                  max_tokens: int) -> list[list[int]]:
    """Consecutive indices of ``order`` whose padded size (rows × widest side) stays within ``max_tokens``."""
    batches, batch, width = [], [], 0
    for index in order:
        size = max(len(sources[index]), len(targets[index])) + 1
        if batch and (len(batch) + 1) * max(width, size) > max_tokens:
            batches.append(batch)
            batch, width = [], 0
        batch.append(index)
        width = max(width, size)
    if batch:
        batches.append(batch)
    return batches


def greedy_translator(model: Any, tokenizer: Any, device: torch.device, precision: str):
    """The search every variant is scored with: greedy, the Translator's defaults otherwise."""
    from vaswani.decoding.config import SearchConfig
    from vaswani.decoding.translator import Translator

    return Translator(model, tokenizer, SearchConfig(beam_size=1, bf16=precision == "bf16"), device=device)
