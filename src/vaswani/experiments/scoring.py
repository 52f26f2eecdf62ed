"""How a trained variant is scored: teacher-forced loss and accuracy (in total and per target position) on
given source/target ids, and the greedy search every translation score uses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from vaswani.data.batching import collate, pack
from vaswani.precision import autocast

if TYPE_CHECKING:
    from vaswani.evaluation.metrics import CorpusScores


@torch.inference_mode()
def teacher_forced(model: Any, tokenizer: Any, sources: Sequence[np.ndarray], targets: Sequence[np.ndarray],
                   device: torch.device, precision: str = "fp32", label_smoothing: float = 0.1,
                   max_tokens: int = 6000) -> dict[str, Any]:
    """Loss, NLL and accuracy of the reference given each source, in total and per target position.

    Position p (0-based) of ``y1 … yn </s>`` counts in ``position_accuracy[p]`` for every sentence that has it.
    """
    pad, bos, eos = tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id
    sizes = np.array([max(len(s), len(t)) + 1 for s, t in zip(sources, targets)])  # positions on the longer side
    order = np.argsort(sizes, kind="stable")
    longest = max(len(t) for t in targets) + 1
    correct_at, count_at = np.zeros(longest), np.zeros(longest)
    loss = nll = correct = tokens = 0.0
    # A pair longer than the budget still gets a batch of its own.
    for chunk in pack(order, sizes[order], max(max_tokens, int(sizes.max()))):
        batch = collate([(i, sources[i], targets[i]) for i in chunk.tolist()], pad, bos, eos).to(device)
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


def greedy_translator(model: Any, tokenizer: Any, device: torch.device, precision: str):
    """The search every variant is scored with: greedy, the Translator's defaults otherwise."""
    from vaswani.decoding.config import SearchConfig
    from vaswani.decoding.translator import Translator

    return Translator(model, tokenizer, SearchConfig(beam_size=1, precision=precision), device=device)


def greedy_scores(model: Any, tokenizer: Any, sources: Sequence[str] | Sequence[np.ndarray],
                  references: Sequence[str], device: torch.device, precision: str) -> tuple[CorpusScores, list[str]]:
    """Greedy translations of ``sources`` and their corpus scores (BLEU, chrF, length ratio) against
    ``references``. Sources are text, or BPE ids without ``</s>`` (the perturbed sources: padding ids inside
    them are masked out)."""
    from vaswani.evaluation.metrics import corpus_scores

    translator = greedy_translator(model, tokenizer, device, precision)
    if all(isinstance(source, str) for source in sources):
        ids = translator.encode(sources)
    else:
        ids = [[int(t) for t in source] + [tokenizer.eos_id] for source in sources]
    hypotheses = [nbest[0].text for nbest in translator.translate_ids_nbest(ids)]
    return corpus_scores(hypotheses, references), hypotheses
