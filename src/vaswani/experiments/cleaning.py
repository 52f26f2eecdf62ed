"""`vaswani experiment cleaning`: what `vaswani clean` catches in a noisy corpus, and what cleaning is worth in BLEU.

Multi30k's training pairs are made noisy the way crawled corpora are (Khayrallah & Koehn 2018): a share of the
pairs (``--noise``, 20 % by default), drawn once with a fixed seed, is replaced, in equal parts, by

    duplicate    a copy of an earlier clean pair (the same pair crawled twice)
    swapped      the pair with its sides swapped (English where German belongs, and the reverse)
    misaligned   the source with the target of another pair (a sentence aligner's mistake)

so the corpus keeps its size and every line carries a known label. `vaswani clean`'s rules (data/cleaning.py, the
ones that apply to a German-English corpus: duplicates, copies, the length ratio and language identification) then
decide on every pair, and the first table says, per label, what share of the pairs the rules dropped and by which
rule: the noise they catch and the clean pairs they lose.

Then (unless ``--detection-only``) German-English models train, each seed for each, with the same schedule:

    noisy     the noisy corpus as it is
    cleaned   what the rules kept
    oracle    exactly the pairs that were not made noisy (what a perfect cleaner would keep)

each scored at its last weights by greedy BLEU on test2016 and test2017. Each run is a plain ``vaswani train`` run
under ``--runs-dir``: reused when finished, resumed when cut off.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from vaswani.arguments import ranged
from vaswani.data.cleaning import KEPT, RULES, CleaningRules, clean_corpus
from vaswani.data.files import FileSplit, file_part
from vaswani.data.languages import LanguagePair
from vaswani.devices import resolve_device
from vaswani.experiments.corpus_studies import (
    VariantResult,
    VariantSummary,
    score_last_weights,
    study_corpora,
    study_preset,
    summarize_variants,
    variants_plot,
    variants_table,
    write_lines,
)
from vaswani.experiments.regularization import study_settings
from vaswani.experiments.reporting import device_label, log, markdown_table, provenance_line, pyplot, write_results
from vaswani.experiments.variants import RunVariant, add_runs_arguments, checked_runs_dir, train_variants
from vaswani.settings import MAX_COUNT

RECIPE, SMOKE_RECIPE = "multi30k-cpu", "smoke"
SMOKE_PAIRS = 200  # --smoke: the first pairs of each split only
NOISE_SEED = 0  # the draw of the noisy pairs: the same for every seed, so seeds vary training alone
CLEAN, DUPLICATE, SWAPPED, MISALIGNED = "clean", "duplicate", "swapped", "misaligned"
NOISE_KINDS = (DUPLICATE, SWAPPED, MISALIGNED)
VARIANTS = ("noisy", "cleaned", "oracle")
MAX_RATIO = 3.0  # the length-ratio rule: captions and their translations are within 3× of each other in characters


@dataclass
class NoisyCorpus:
    """The training pairs with noise in them, and each pair's label (:data:`CLEAN` or one of :data:`NOISE_KINDS`)."""

    source: list[str]
    target: list[str]
    labels: list[str]


def add_noise(source: Sequence[str], target: Sequence[str], share: float, seed: int = NOISE_SEED) -> NoisyCorpus:
    """Replace ``share`` of the pairs, in equal parts, by a duplicate of an earlier clean pair, the pair with its
    sides swapped, or the source with another pair's target; the rest stay as they are."""
    pairs = len(source)
    rng = np.random.default_rng(seed)
    chosen = rng.permutation(pairs)[: round(share * pairs)]
    labels = [CLEAN] * pairs
    for position, index in enumerate(chosen):
        labels[index] = NOISE_KINDS[position % len(NOISE_KINDS)]
    clean = np.flatnonzero(np.array(labels) == CLEAN)
    noisy_source, noisy_target = list(source), list(target)
    for index in chosen:
        kind = labels[index]
        if kind == DUPLICATE:
            earlier = clean[clean < index]
            copied = int(rng.choice(earlier if len(earlier) else clean))
            noisy_source[index], noisy_target[index] = source[copied], target[copied]
        elif kind == SWAPPED:
            noisy_source[index], noisy_target[index] = target[index], source[index]
        else:
            other = int(rng.integers(pairs - 1))
            noisy_target[index] = target[other + (other >= index)]  # any pair but this one
    return NoisyCorpus(noisy_source, noisy_target, labels)


@dataclass
class LabelDetection:
    """What the rules did to the pairs of one label: how many they dropped, and by which rule."""

    label: str
    pairs: int
    dropped: int
    by_rule: dict[str, int]

    @property
    def dropped_share(self) -> float:
        return self.dropped / self.pairs if self.pairs else 0.0


def detection(labels: Sequence[str], verdicts: Sequence[str | None]) -> list[LabelDetection]:
    """Per label (clean first, then each kind of noise), the pairs the rules dropped (``verdicts``: the rule that
    dropped each pair, None for a kept one)."""
    found = []
    for label in (CLEAN, *NOISE_KINDS):
        rules = Counter(rule for lab, rule in zip(labels, verdicts) if lab == label and rule is not None)
        found.append(LabelDetection(label, sum(lab == label for lab in labels), sum(rules.values()),
                                    dict(rules.most_common())))
    return found


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--noise", type=ranged(float, gt=0, lt=1), default=0.2,
                        help="share of the training pairs made noisy, in equal parts of each kind (default 0.2)")
    parser.add_argument("--detection-only", action="store_true",
                        help="only what the rules catch (seconds); train no model")
    parser.add_argument("--seeds", nargs="+", type=ranged(int, ge=0, le=MAX_COUNT), default=[0, 1],
                        help="seeds every model is trained with (default 0 1)")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS),
                        help="models to train and report (default: all of them)")
    add_runs_arguments(parser, "runs/experiments/cleaning", "train.max_epochs=20")


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    recipe = SMOKE_RECIPE if args.smoke else RECIPE
    extra = study_settings(args.smoke, args.settings)
    runs_dir = checked_runs_dir((args.runs_dir or Path("runs") / "experiments" / "cleaning").absolute(), "cleaning")
    # The corpora of one noise share in a folder of their own: the runs' configs name their files, so runs on another
    # share are never taken for these (a run whose files moved is "another config" to the runs directory).
    data = runs_dir / "data" / f"noise{args.noise:g}"
    limit = SMOKE_PAIRS if args.smoke else None
    train, tests = study_corpora(args.data_dir, data, limit)
    noisy = add_noise(train.source[:limit], train.target[:limit], args.noise)
    write_lines(data / "noisy.de", noisy.source)
    write_lines(data / "noisy.en", noisy.target)
    write_lines(data / "noise.labels", noisy.labels)

    rules = CleaningRules(max_ratio=MAX_RATIO, language_id=True)
    log(f"cleaning: {len(noisy.labels):,} pairs, {args.noise:.0%} noisy; rules {', '.join(rules.applied())}")
    split = FileSplit("train", (file_part((data / "noisy.de", data / "noisy.en"), "train"),))
    codes, report = clean_corpus(split, LanguagePair("de", "en"), rules)
    verdicts = [None if code == KEPT else RULES[code - 1] for code in codes.tolist()]
    found = detection(noisy.labels, verdicts)
    kept = [i for i, verdict in enumerate(verdicts) if verdict is None]
    oracle = [i for i, label in enumerate(noisy.labels) if label == CLEAN]
    for name, rows in (("cleaned", kept), ("oracle", oracle)):
        write_lines(data / f"{name}.de", [noisy.source[i] for i in rows])
        write_lines(data / f"{name}.en", [noisy.target[i] for i in rows])

    results: list[VariantResult] = []
    if not args.detection_only:
        variants = []
        for seed in args.seeds:
            for name in args.variants:
                preset = study_preset(recipe, extra, data / f"{name}-seed{seed}.yaml", "de-en",
                                      [(data / f"{name}.de", data / f"{name}.en")], (data / "val.de", data / "val.en"))
                variants.append(RunVariant(f"{name}-seed{seed}", name, (f"train.seed={seed}",), preset))
        log(f"cleaning: {len(variants)} runs")
        trained = train_variants(variants, recipe, runs_dir, None, extra, args.jobs)
        results = [score_last_weights(t, tests, device) for t in trained]
    rows = summarize_variants(results)
    settings = {"recipe": recipe, "study_settings": extra, "runs_dir": str(runs_dir), "seeds": list(args.seeds),
                "noise": args.noise, "noise_seed": NOISE_SEED, "rules": rules.applied(), "max_ratio": MAX_RATIO,
                "min_language_confidence": rules.min_language_confidence, "smoke": args.smoke,
                "detection_only": args.detection_only}
    payload = {"device": device_label(device), "pairs": len(noisy.labels), "kept": report.kept,
               "detection": [asdict(d) | {"dropped_share": d.dropped_share} for d in found],
               "runs": [asdict(r) for r in results], "variants": [row.to_json() for row in rows]}
    figures = {"detection": detection_plot(found)}
    figures |= {"bleu": variants_plot(rows, "cleaning a noisy Multi30k")} if rows else {}
    write_results(args.out, "cleaning", args.command_line, device, settings, payload,
                  table(found, rows, len(noisy.labels), report.kept, provenance_line(device, args.command_line),
                        extra), figures)
    log(f"cleaning: wrote {args.out}/results.json, table.md, " + ", ".join(f"{name}.png" for name in figures))
    return 0


def detection_plot(found: Sequence[LabelDetection]):
    """The share of each label's pairs the rules dropped, one bar a label, split by rule."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 3.5))
    labels = [d.label for d in found]
    bottoms = np.zeros(len(found))
    for rule in dict.fromkeys(rule for d in found for rule in d.by_rule):
        shares = np.array([100 * d.by_rule.get(rule, 0) / max(d.pairs, 1) for d in found])
        axis.bar(labels, shares, bottom=bottoms, label=rule)
        bottoms += shares
    axis.set(ylabel="% of the pairs dropped", ylim=(0, 100), title="what vaswani clean's rules drop, by label")
    axis.legend(fontsize="small")
    return figure


def table(found: Sequence[LabelDetection], rows: Sequence[VariantSummary], pairs: int, kept: int, provenance: str,
          extra: Sequence[str]) -> str:
    detected = markdown_table(
        ["pairs labelled", "count", "dropped", "share dropped", "by rule"],
        [[d.label, f"{d.pairs:,}", f"{d.dropped:,}", f"{100 * d.dropped_share:.1f} %",
          ", ".join(f"{rule} {count:,}" for rule, count in d.by_rule.items()) or "–"] for d in found])
    text = (f"# Cleaning a noisy Multi30k\n\n## What the rules catch\n\n{detected}\n\nThe rules kept {kept:,} of "
            f"{pairs:,} pairs. A clean pair dropped as a duplicate repeats an earlier pair of Multi30k itself (a "
            "duplicate made as noise copies an earlier pair, so the copy is the one dropped).\n")
    if rows:
        text += (f"\n## What cleaning is worth\n\n{variants_table(rows, 'training corpus')}\n\nGreedy BLEU of each "
                 f"run's last weights, the mean over its seeds. Study settings: `{' '.join(extra)}`.\n")
    else:
        text += "\nNo model was trained (`--detection-only`).\n"
    return f"{text}\n{provenance}\n"


__all__ = ["NoisyCorpus", "LabelDetection", "VARIANTS", "add_arguments", "add_noise", "detection", "run"]
