"""Accuracy, macro-F1 and the confusion matrix of a set of predictions.

Macro-F1 (the unweighted mean of the per-class F1 scores) is the number training selects on: with imbalanced
classes, accuracy rewards a model for favouring the majority class; macro-F1 does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from sklearn.metrics import accuracy_score, confusion_matrix, f1_score


@dataclass
class Metrics:
    accuracy: float
    macro_f1: float
    confusion: list[list[int]]  # confusion[true][predicted], classes in label-id order

    def to_dict(self) -> dict[str, float | list[list[int]]]:
        return {"accuracy": self.accuracy, "macro_f1": self.macro_f1, "confusion": self.confusion}


def score_predictions(true_ids: Sequence[int], predicted_ids: Sequence[int], n_classes: int) -> Metrics:
    classes = list(range(n_classes))  # so a class never predicted still gets its row, column and F1 of 0
    return Metrics(
        accuracy=float(accuracy_score(true_ids, predicted_ids)),
        macro_f1=float(f1_score(true_ids, predicted_ids, labels=classes, average="macro", zero_division=0)),
        confusion=confusion_matrix(true_ids, predicted_ids, labels=classes).tolist(),
    )


__all__ = ["Metrics", "score_predictions"]
