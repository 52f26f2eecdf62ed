"""The best/worst report: a seeded random sample of sentences ranked by sentence-BLEU, to *read* the output.

A corpus BLEU says how good a system is on average; the best and worst sentences of a random sample show what
it does well and how it fails (hallucination, repetition, dropped clauses, copied source).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from vaswani.evaluation.metrics import sentence_bleu

if TYPE_CHECKING:  # evaluate.py builds the result from this module's examples
    from vaswani.evaluation.evaluate import EvaluationResult

SAMPLE_SIZE = 32
SHOWN = 3  # examples shown from each end of the ranking


@dataclass
class Example:
    index: int  # line in the test set, 0-based
    source: str
    hypothesis: str
    reference: str
    bleu: float  # sacrebleu.sentence_bleu


def sample_examples(
    sources: Sequence[str],
    hypotheses: Sequence[str],
    references: Sequence[str],
    size: int = SAMPLE_SIZE,
    seed: int = 0,
) -> list[Example]:
    """``size`` sentences drawn without replacement with ``random.Random(seed)``, best sentence-BLEU first."""
    indices = random.Random(seed).sample(range(len(sources)), min(size, len(sources)))
    examples = [
        Example(i, sources[i], hypotheses[i], references[i], sentence_bleu(hypotheses[i], references[i]))
        for i in indices
    ]
    return sorted(examples, key=lambda e: (-e.bleu, e.index))


def best_and_worst(examples: list[Example], shown: int = SHOWN) -> tuple[list[Example], list[Example]]:
    """The ``shown`` best and worst of a ranked sample (disjoint when the sample is small)."""
    best = examples[:shown]
    worst = examples[max(len(examples) - shown, len(best)) :][::-1]
    return best, worst


def render_markdown(result: EvaluationResult, examples: list[Example], shown: int = SHOWN) -> str:
    """``report.md``: the scores, then the best and worst examples with source, hypothesis and reference."""
    best, worst = best_and_worst(examples, shown)
    mean = sum(e.bleu for e in examples) / len(examples) if examples else 0.0
    speed = result.speed
    lines = [
        f"# Evaluation: {result.test_set}",
        "",
        *([f"- languages: {result.languages['name']}"] if result.languages else []),
        f"- checkpoint: `{result.checkpoint}`",
        f"- BLEU **{result.bleu:.2f}**, chrF **{result.chrf:.2f}**, length ratio {result.length_ratio:.3f}",
        f"- sacreBLEU signature: `{result.signature}`",
        f"- search: {result.search.summary()}, {result.search.precision}",
        f"- speed: {speed.sentences_per_second:.1f} sentences/s, "
        f"{speed.target_tokens_per_second:.0f} target tokens/s on {speed.device}",
        "",
        f"Sentence-BLEU over a random sample of {len(examples)} sentences (seed {result.report_seed}): "
        f"mean {mean:.1f}.",
        "",
    ]
    for title, group in (("Best", best), ("Worst", worst)):
        lines += [f"## {title}", ""]
        for e in group:
            lines += [
                f"**line {e.index + 1}**, sentence-BLEU {e.bleu:.1f}",
                "",
                f"- source: {e.source}",
                f"- hypothesis: {e.hypothesis}",
                f"- reference: {e.reference}",
                "",
            ]
    return "\n".join(lines)


def render_text(examples: list[Example], shown: int = SHOWN) -> str:
    """The same examples for the terminal."""
    best, worst = best_and_worst(examples, shown)
    lines = []
    for title, group in (("best", best), ("worst", worst)):
        lines.append(f"{title} of {len(examples)} sampled sentences (sentence-BLEU):")
        for e in group:
            lines += [
                f"  [{e.bleu:5.1f}] line {e.index + 1}",
                f"    src: {e.source}",
                f"    hyp: {e.hypothesis}",
                f"    ref: {e.reference}",
            ]
    return "\n".join(lines)
