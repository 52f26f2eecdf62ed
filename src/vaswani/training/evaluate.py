"""Validation during training: label-smoothed loss and NLL over the whole validation split, and a quick greedy
BLEU (sacreBLEU) on its first sentences."""

from __future__ import annotations

from typing import Any

import sacrebleu
import torch

from vaswani.decoding.config import SearchConfig
from vaswani.decoding.translator import Translator
from vaswani.model import Transformer
from vaswani.precision import autocast
from vaswani.training.loss import translation_loss


@torch.inference_mode()
def validation_loss(model: Transformer, data: Any, device: torch.device, precision: str,
                    label_smoothing: float) -> dict[str, float]:
    loss = nll = correct = tokens = 0.0
    for indices in data.valid_batches():
        batch = data.collate(indices, device, split="valid")
        with autocast(device, precision):
            out = translation_loss(model, batch.src, batch.tgt_in, batch.tgt_out, label_smoothing)
        loss += float(out.loss_sum)
        nll += float(out.nll_sum)
        correct += float(out.n_correct)
        tokens += out.n_tokens
    return {"loss": loss / tokens, "nll": nll / tokens, "accuracy": correct / tokens, "tokens": int(tokens)}


def validate(model: Transformer, data: Any, device: torch.device, precision: str, bleu_subset: int,
             label_smoothing: float) -> dict[str, Any]:
    was_training = model.training
    model.eval()
    try:
        result: dict[str, Any] = validation_loss(model, data, device, precision, label_smoothing)
        result["bleu"] = None
        if bleu_subset > 0:
            sources, references = data.valid_text(bleu_subset)
            translator = Translator(model, data.tokenizer, SearchConfig(beam_size=1, precision=precision),
                                    device=device)
            hypotheses = translator.translate(sources)
            result["bleu"] = round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 3)
            result["bleu_sentences"] = len(sources)
            result["example"] = {"source": sources[0], "hypothesis": hypotheses[0], "reference": references[0]}
    finally:
        model.train(was_training)
    return result
