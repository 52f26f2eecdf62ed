"""The one scoring API: how well a model predicts references (teacher-forced loss, NLL, accuracy — optionally per
target position) and how well it translates (BLEU/chrF of the Translator's greedy search). Validation during
training and the ablation and robustness studies all score through these functions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch

from vaswani.data.batching import Batch, collate, pack
from vaswani.data.tokenizer import Tokenizer
from vaswani.decoding.config import EngineOptions, SearchConfig
from vaswani.decoding.translator import Translator
from vaswani.evaluation.checkpoint_info import ValidationExample, ValidationResult
from vaswani.evaluation.metrics import CorpusScores, corpus_scores
from vaswani.model import Transformer
from vaswani.precision import autocast
from vaswani.training.data import TrainingData
from vaswani.training.device_choices import decoding_batches
from vaswani.training.loss import translation_loss


@dataclass
class TeacherForcedScores:
    """How well a model predicts the references given their sources, per real target token."""

    loss: float  # label-smoothed
    nll: float
    accuracy: float
    tokens: int
    position_accuracy: list[float] | None = None  # [p]: accuracy at target position p (0-based) of y1 … yn </s>
    position_count: list[int] | None = None  # [p]: sentences that have position p


@torch.inference_mode()
def teacher_forced_scores(model: Transformer, batches: Iterable[Batch], precision: str = "fp32",
                          label_smoothing: float = 0.0, per_position: bool = False) -> TeacherForcedScores:
    """Loss (label-smoothed), NLL and accuracy of the references given their sources, per real target token;
    with ``per_position`` also the accuracy at each target position."""
    loss = nll = correct = tokens = 0.0
    correct_at = count_at = np.zeros(0)
    for batch in batches:
        with autocast(batch.src.device, precision):
            out = translation_loss(model, batch.src, batch.tgt_in, batch.tgt_out, label_smoothing)
        loss += float(out.loss_sum)
        nll += float(out.nll_sum)
        correct += float(out.n_correct)
        tokens += out.n_tokens
        if per_position:
            # translation_loss scores the real positions in row-major order: their column is the position.
            positions = (batch.tgt_out != model.config.pad_id).nonzero()[:, 1].cpu().numpy()
            width = batch.tgt_out.shape[1]
            if width > len(count_at):
                correct_at, count_at = np.pad(correct_at, (0, width - len(correct_at))), np.pad(
                    count_at, (0, width - len(count_at)))
            np.add.at(count_at, positions, 1)
            np.add.at(correct_at, positions, out.hits.cpu().numpy())
    result = TeacherForcedScores(loss / tokens, nll / tokens, correct / tokens, int(tokens))
    if per_position:
        result.position_accuracy = (correct_at / np.maximum(count_at, 1)).tolist()
        result.position_count = count_at.astype(int).tolist()
    return result


def id_batches(sources: Sequence[np.ndarray], targets: Sequence[np.ndarray], tokenizer: Tokenizer,
               device: torch.device, max_tokens: int = 6000) -> Iterable[Batch]:
    """Token-budget batches of (source ids, target ids) pairs without special tokens, shortest first; a pair longer
    than the budget gets a batch of its own."""
    sizes = np.array([max(len(s), len(t)) + 1 for s, t in zip(sources, targets)])  # positions on the longer side
    order = np.argsort(sizes, kind="stable")
    for chunk in pack(order, sizes[order], max(max_tokens, int(sizes.max()))):
        yield collate([(i, sources[i], targets[i]) for i in chunk.tolist()],
                      tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id).to(device)


def greedy_scores(model: Transformer, tokenizer: Tokenizer, sources: Sequence[str] | Sequence[np.ndarray],
                  references: Sequence[str], device: torch.device, precision: str) -> tuple[CorpusScores, list[str]]:
    """Greedy translations of ``sources`` and their corpus scores (BLEU, chrF, length ratio) against
    ``references``. Sources are text, or BPE ids without ``</s>`` (padding ids inside them are masked out: the
    robustness study's dropped tokens)."""
    translator = Translator(model, tokenizer, SearchConfig(beam_size=1, precision=precision),
                            options=EngineOptions(device=str(device)), **decoding_batches(device))
    if all(isinstance(source, str) for source in sources):
        ids = translator.encode(sources)
    else:
        ids = [[int(t) for t in source] + [tokenizer.eos_id] for source in sources]
    hypotheses = [nbest[0].text for nbest in translator.translate_ids_nbest(ids)]
    return corpus_scores(hypotheses, references), hypotheses


def validate(model: Transformer, data: TrainingData, device: torch.device, precision: str, bleu_subset: int,
             label_smoothing: float) -> ValidationResult:
    """The trainer's validation: teacher-forced scores on the whole validation split, and greedy BLEU on its
    first ``bleu_subset`` sentences (0: none)."""
    was_training = model.training
    model.eval()
    try:
        batches = (data.collate(indices, device, split="valid") for indices in data.valid_batches())
        forced = teacher_forced_scores(model, batches, precision, label_smoothing)
        result = ValidationResult(forced.loss, forced.nll, forced.accuracy, forced.tokens)
        if bleu_subset > 0:
            sources, references = data.valid_text(bleu_subset)
            scores, hypotheses = greedy_scores(model, data.tokenizer, sources, references, device, precision)
            result.bleu = round(scores.bleu, 3)
            result.bleu_sentences = len(sources)
            result.example = ValidationExample(sources[0], hypotheses[0], references[0])
    finally:
        model.train(was_training)
    return result
