"""The baseline the Transformer has to beat: TF-IDF over word uni- and bigrams + logistic regression.

It is trained on exactly the texts and split the Transformer gets, with fixed textbook settings (not tuned on
the validation set, which would flatter it), and it is deterministic: no seed changes its result on a given split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass
class BaselineSettings:
    ngram_max: int = 2  # word uni- and bigrams
    min_df: int = 1
    sublinear_tf: bool = True  # 1 + log(tf): a word said three times is not three times the evidence
    C: float = 1.0  # inverse L2 strength, scikit-learn's default
    max_iter: int = 1000


def train_and_predict_baseline(
    train_texts: Sequence[str],
    train_ids: Sequence[int],
    eval_texts: Sequence[str],
    settings: BaselineSettings | None = None,
) -> np.ndarray:
    """Fit on the training texts, return class probabilities (N_eval, C) of ``eval_texts``.

    Columns follow the class ids 0..C-1; every class must occur in ``train_ids`` (a stratified split ensures it).
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    s = settings or BaselineSettings()
    pipeline = make_pipeline(
        TfidfVectorizer(lowercase=True, ngram_range=(1, s.ngram_max), min_df=s.min_df, sublinear_tf=s.sublinear_tf),
        LogisticRegression(C=s.C, max_iter=s.max_iter),
    )
    pipeline.fit(list(train_texts), list(train_ids))
    return pipeline.predict_proba(list(eval_texts))


__all__ = ["BaselineSettings", "train_and_predict_baseline"]
