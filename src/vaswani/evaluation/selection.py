"""What a run's final model says about how it was chosen: ``checkpoints/final/selection.json``, written by
``vaswani finalize`` (training/finalize.py) and read by ``serve``, the final-models study and the run's summary.

Every score in it was measured on the validation split, except ``test``, measured once with the final choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vaswani.evaluation.metrics import CorpusScores
from vaswani.records import read_record, write_record

SELECTION_FILE = "selection.json"


@dataclass
class Candidate:
    """One set of weights finalize scored: ``best``, ``last``, an average of the last step checkpoints or an
    ensemble of them."""

    weights: str  # "best", "last", "average of last 3", "ensemble of last 2"
    checkpoints: list[str]  # the step checkpoints it is made of
    greedy_valid: CorpusScores


@dataclass
class SearchTried:
    """One search finalize scored with the chosen weights."""

    search: str  # "greedy", "beam 4, power 0.6"
    settings: dict[str, int | float | str]  # what search.json stores of it (decoding.config.StoredSearch)
    valid: CorpusScores


@dataclass
class Quantization:
    """The CTranslate2 quantization chosen for the final model: int8 only within ``tolerance_bleu`` of float32;
    ``chosen`` None (with the ``reason``) where CTranslate2 cannot run the model or the time ran out."""

    chosen: str | None
    reason: str | None = None
    tolerance_bleu: float | None = None
    device: str | None = None
    engine: str | None = None
    float32: CorpusScores | None = None
    int8: CorpusScores | None = None


@dataclass
class TestSetScores:
    """The final model on one test set (its translations and report are in ``final/eval/<test set>/``)."""

    bleu: float
    chrf: float
    length_ratio: float
    signature: str
    chrf_signature: str
    sentences: int


@dataclass
class HeadlineScores:
    bleu: float
    chrf: float
    length_ratio: float


@dataclass
class FinalChoice:
    """The headline of a selection (a run summary's ``final``): what was chosen, its validation BLEU and each test
    set's scores."""

    weights: str
    search: str
    quantization: str | None
    valid_bleu: float
    test: dict[str, HeadlineScores]


@dataclass
class ParentValidation:
    """A fine-tuned model and the model it started from, with the same search on the first ``sentences`` of
    the parent's validation split: what fine-tuning cost on the parent's data (forgetting)."""

    checkpoint: str  # the parent
    split: str
    sentences: int
    parent: CorpusScores
    fine_tuned: CorpusScores


@dataclass
class Selection:
    """The final model's weights and search, chosen on ``valid_sentences`` sentences of ``valid_split``, with
    every candidate's and search's scores and the test scores of the choice."""

    weights: str  # the candidate chosen (Candidate.weights)
    search: str  # the search chosen (SearchTried.search)
    search_settings: dict[str, int | float | str]
    valid_split: str
    valid_sentences: int
    valid: CorpusScores  # the chosen weights with the chosen search
    quantization: Quantization
    test: dict[str, TestSetScores]
    candidates: list[Candidate]
    searches: list[SearchTried]
    cut_short_by_time: bool  # train.final_max_minutes ran out before every candidate and search was scored
    seconds: float
    languages: dict[str, str] | None = None  # the pair the model translates: source, target and their name
    parent_validation: ParentValidation | None = None  # a fine-tuned run's, where its parent's run is there
    # an ensemble's: the best single candidate, whose weights the final checkpoint's own files hold (what runs
    # one model, such as CTranslate2 and export, loads those)
    single_weights: str | None = None

    @classmethod
    def read(cls, final_dir: str | Path) -> Selection:
        """The selection of the final model in ``final_dir``; a damaged field is one error naming it."""
        return read_record(cls, Path(final_dir) / SELECTION_FILE)

    def write(self, final_dir: str | Path) -> None:
        write_record(Path(final_dir) / SELECTION_FILE, self)

    def headline(self) -> FinalChoice:
        return FinalChoice(self.weights, self.search, self.quantization.chosen, round(self.valid.bleu, 2),
                           {name: HeadlineScores(round(scores.bleu, 3), round(scores.chrf, 3),
                                                 round(scores.length_ratio, 3))
                            for name, scores in self.test.items()})


__all__ = ["SELECTION_FILE", "Candidate", "FinalChoice", "HeadlineScores", "ParentValidation", "Quantization",
           "SearchTried", "Selection", "TestSetScores"]
