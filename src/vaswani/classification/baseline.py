"""The baseline the Transformer has to beat: TF-IDF over word uni- and bigrams + logistic regression.

It is trained on exactly the texts and split the Transformer gets, with fixed textbook settings (not tuned on
the validation set, which would flatter it), and it is deterministic: no seed changes its result on a given split.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from vaswani.classification.data import Dataset
from vaswani.classification.encoding import normalize
from vaswani.classification.metrics import Metrics, score_predictions
from vaswani.classification.settings import TrainSettings
from vaswani.errors import DataError


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


def baseline_metrics(data: Dataset, settings: TrainSettings, csv_path: str | Path) -> Metrics:
    """The baseline trained on the run's training rows and scored on its validation rows, with the text the
    Transformer sees (``settings.lowercase``). Cheap (seconds), so commands run it before the Transformer trains:
    texts in which TF-IDF finds no word (emoji and one-character tokens only, or --text-column naming the label)
    are a DataError naming the CSV and the column, not a failure after minutes of training."""
    train_texts, train_ids = data.split("train")
    val_texts, val_ids = data.split("val")
    try:
        probs = train_and_predict_baseline(normalize(train_texts, settings.lowercase), train_ids,
                                           normalize(val_texts, settings.lowercase))
    except ValueError as error:
        if "empty vocabulary" not in str(error):  # scikit-learn's words for it; anything else is a bug
            raise
        columns = " + ".join(repr(c) for c in [*settings.extra_text_columns, settings.text_column])
        raise DataError(
            f"{csv_path}: the texts of column {columns} hold no word of two or more letters or digits, so the "
            "TF-IDF baseline has nothing to count; check that --text-column names the column with the text"
        ) from None
    return score_predictions(val_ids, probs.argmax(axis=1).tolist(), len(data.labels))


__all__ = ["BaselineSettings", "baseline_metrics", "train_and_predict_baseline"]
