"""Corpus and sentence scores, always through sacreBLEU (never a hand-written BLEU).

Hypotheses are detokenized, cased output; references are the raw reference lines. sacreBLEU applies its own
13a tokenization to both, which is what makes scores comparable across papers; its *signature* records every
such choice and is reported with each score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import sacrebleu
from sacrebleu.metrics import BLEU, CHRF

from vaswani.errors import DataError


@dataclass
class CorpusScores:
    bleu: float
    chrf: float
    signature: str  # sacreBLEU's BLEU signature, e.g. nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0
    chrf_signature: str
    length_ratio: float  # hypothesis / reference length in 13a tokens (BLEU's brevity penalty kicks in below 1)
    brevity_penalty: float
    precisions: list[float]  # 1- to 4-gram precisions, %
    hyp_len: int
    ref_len: int


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> CorpusScores:
    """Corpus-level BLEU (13a) and chrF of one hypothesis and one reference per sentence."""
    if len(hypotheses) != len(references):
        raise DataError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    bleu_metric, chrf_metric = BLEU(), CHRF()
    bleu = bleu_metric.corpus_score(list(hypotheses), [list(references)])
    chrf = chrf_metric.corpus_score(list(hypotheses), [list(references)])
    return CorpusScores(
        bleu=bleu.score,
        chrf=chrf.score,
        signature=str(bleu_metric.get_signature()),
        chrf_signature=str(chrf_metric.get_signature()),
        length_ratio=bleu.sys_len / bleu.ref_len if bleu.ref_len else 0.0,
        brevity_penalty=bleu.bp,
        precisions=list(bleu.precisions),
        hyp_len=bleu.sys_len,
        ref_len=bleu.ref_len,
    )


def sentence_bleu(hypothesis: str, reference: str) -> float:
    """sacreBLEU's smoothed sentence-level BLEU (exp smoothing): only for ranking examples, not for reporting."""
    return sacrebleu.sentence_bleu(hypothesis, [reference]).score
