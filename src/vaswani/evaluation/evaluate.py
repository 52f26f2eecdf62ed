"""Translate a test set and score it: BLEU/chrF with their signature, length ratio, speed, best/worst report.

Writes one directory, whole (assembled beside it, then renamed into place; a failure leaves the earlier one)::

    results.json     every number, the search settings, the sacreBLEU signature, the command and the hardware
    hypotheses.txt   the detokenized output, one line per source line
    report.md        the scores and the best/worst sentences of a seeded random sample
    vaswani.json     the manifest: "evaluation", each file's size and sha256
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vaswani.data.corpora import load_corpus, load_parallel_files, load_tsv
from vaswani.data.languages import LanguagePair, pair_from_files, parse_direction
from vaswani.decoding.config import SearchConfig
from vaswani.decoding.engine import EngineDescription, output_limits
from vaswani.decoding.translator import Translator
from vaswani.errors import DataError, VaswaniError
from vaswani.evaluation.metrics import corpus_scores
from vaswani.evaluation.report import SAMPLE_SIZE, Example, render_markdown, render_text, sample_examples
from vaswani.io import atomic_write_text, directory_written_whole
from vaswani.provenance import provenance
from vaswani.records import read_record, to_json

EVALUATION_KIND = "evaluation"
EVALUATIONS_FOLDER = "eval"  # inside a run or a checkpoint: where its evaluations go by default


@dataclass
class TestSet:
    name: str  # e.g. multi30k-test2016, or the source file's name up to its first dot
    sources: list[str]
    references: list[str]
    languages: LanguagePair | None = None  # when known: the dataset's direction, or the files' suffixes


def load_test_set(
    dataset: str | None = None,
    split: str | None = None,
    src: str | Path | None = None,
    ref: str | Path | None = None,
    data_dir: str | Path | None = None,
    tsv: str | Path | None = None,
    direction: str = "de-en",
) -> TestSet:
    """A registered corpus split (``dataset`` + ``split``, in ``direction``), a pair of aligned text files (``src`` +
    ``ref``, plain or gzip) or one TSV file of ``source<TAB>reference`` lines."""
    if dataset is not None:
        if split is None:
            raise VaswaniError(f"--dataset {dataset} needs --split (e.g. test2016)")
        corpus = load_corpus(dataset, split, direction, data_dir=data_dir)
        return TestSet(f"{dataset}-{split}", corpus.source, corpus.target, parse_direction(direction))
    if tsv is not None:
        corpus = load_tsv(tsv)
        return TestSet(Path(tsv).name.split(".")[0], corpus.source, corpus.target)
    if src is None or ref is None:
        raise VaswaniError("give --dataset NAME --split NAME, --src FILE --ref FILE, or --tsv FILE")
    corpus = load_parallel_files(src, ref)  # plain or .gz; misaligned files are a DataError naming both
    return TestSet(Path(src).name.split(".")[0], corpus.source, corpus.target, pair_from_files(src, ref))


@dataclass
class EvaluationSpeed:
    seconds: float
    sentences_per_second: float
    target_tokens: int  # BPE tokens generated, </s> included
    target_tokens_per_second: float
    device: str
    batch_size: int | None
    max_tokens: int | None


@dataclass
class EvaluationResult:
    """One test set translated and scored: what ``results.json`` holds (its provenance beside these fields) and
    what ``evaluate``, ``compare`` and ``finalize`` hand each other."""

    test_set: str
    checkpoint: str
    sentences: int
    bleu: float
    chrf: float
    signature: str  # sacreBLEU's BLEU signature
    chrf_signature: str
    length_ratio: float
    brevity_penalty: float
    precisions: list[float]
    hyp_len: int
    ref_len: int
    speed: EvaluationSpeed
    search: SearchConfig
    engine: EngineDescription
    report_seed: int
    sentence_bleu_sample: list[Example]
    languages: dict[str, str] | None = None
    command: str = ""  # the provenance of the run that wrote it (vaswani.provenance)
    git: dict[str, Any] | None = None
    hardware: dict[str, Any] | None = None
    versions: dict[str, Any] | None = None

    @classmethod
    def read(cls, path: str | Path) -> EvaluationResult:
        """The results.json of an evaluation folder (or the file itself), every field checked."""
        path = Path(path)
        return read_record(cls, path / RESULTS_FILE if path.is_dir() else path)


RESULTS_FILE = "results.json"


def longest_hypothesis_chars(translator: Translator) -> int:
    """A length in characters no translation of ``translator`` reaches: the most tokens its search may output
    (for the longest source it takes) as :meth:`Tokenizer.chars_for` bounds their text."""
    tokens = output_limits([translator.longest_source()], translator.config, translator.model_config)[0]
    return translator.tokenizer.chars_for(tokens)


def cut_references(references: list[str], limit: int) -> list[str]:
    """``references`` with each line past ``limit`` characters cut there, as the sources and so the hypotheses
    are: scoring a line of megabytes against a translation that cannot be that long would cost seconds and
    gigabytes for a score that says only "too short". Cut lines are named on stderr."""
    cut = [number for number, line in enumerate(references, start=1) if len(line) > limit]
    if not cut:
        return references
    print(f"warning: {len(cut)} reference line(s) longer than {limit:,} characters, more than any "
          f"translation can be, were cut there (the first: line {cut[0]})", file=sys.stderr)
    return [line[:limit] for line in references]


def evaluate(
    translator: Translator,
    test_set: TestSet,
    out_dir: str | Path,
    checkpoint: str = "",
    seed: int = 0,
    sample_size: int = SAMPLE_SIZE,
    progress: bool = False,
) -> tuple[EvaluationResult, str]:
    """Translate, score and write ``results.json``, ``hypotheses.txt``, ``report.md``; return the result and the
    report's text for the terminal."""
    if not test_set.sources:
        raise DataError(f"{test_set.name}: the test set is empty")
    start = time.perf_counter()
    nbest = translator.translate_nbest(test_set.sources, progress=progress)
    translator.engine.synchronize()
    seconds = time.perf_counter() - start
    hypotheses = [h[0].text for h in nbest]
    target_tokens = sum(h[0].length for h in nbest)

    references = cut_references(test_set.references, longest_hypothesis_chars(translator))
    scores = corpus_scores(hypotheses, references)
    examples = sample_examples(test_set.sources, hypotheses, references, sample_size, seed)
    recorded = provenance(translator.device)
    speed = EvaluationSpeed(seconds, len(hypotheses) / seconds, target_tokens, target_tokens / seconds,
                            str(translator.device), translator.batch_size, translator.max_tokens)
    result = EvaluationResult(
        test_set=test_set.name, checkpoint=str(checkpoint), sentences=len(hypotheses), **dataclasses.asdict(scores),
        speed=speed, search=dataclasses.replace(translator.config), engine=translator.engine.describe(),
        report_seed=seed, sentence_bleu_sample=examples,
        languages=test_set.languages.to_dict() if test_set.languages else None, command=recorded.command,
        git=recorded.git.to_json(), hardware=recorded.hardware.to_json(), versions=recorded.versions)
    payload = to_json(result)

    with directory_written_whole(out_dir, kind=EVALUATION_KIND, writer="evaluate") as staging:
        atomic_write_text(staging / RESULTS_FILE, json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
        atomic_write_text(staging / "hypotheses.txt", "".join(h + "\n" for h in hypotheses))
        atomic_write_text(staging / "report.md", render_markdown(result, examples) + "\n")
    return result, render_text(examples)
