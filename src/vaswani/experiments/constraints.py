"""`vaswani experiment constraints --checkpoint CKPT`: what lexical constraints cost and buy, as Post & Vilar
(2018) measure it. Phrases of 1-3 words are sampled (seeded) from each test sentence's reference among those the
unconstrained translation lacks; the test set is translated with 0, 1, 2 and 3 of them per sentence (the same
phrases, nested), and each run's BLEU, the share of outputs holding all their constraints and sentences per
second are written, with the cost against the unconstrained search at the same beam.

A constraint taken from the reference is one a terminologist would give: BLEU should rise with each, and the
issue's target is that 3 constraints cost at most 3x the unconstrained search at beam 5 (in CPU time, which other
work on a shared machine changes less than the wall clock).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import re
import time
from pathlib import Path
from typing import Sequence

from vaswani.arguments import ranged
from vaswani.data.commands import add_data_dir_argument
from vaswani.data.corpora import load_corpus
from vaswani.decoding import EngineOptions, Translator
from vaswani.decoding.config import StoredSearch
from vaswani.devices import resolve_device
from vaswani.evaluation.metrics import corpus_scores
from vaswani.experiments.reporting import fixed, log, markdown_table, provenance_line, write_results
from vaswani.model.serialization import resolve_checkpoint
from vaswani.provenance import load_averages
from vaswani.settings import MAX_BATCH

COUNTS = (0, 1, 2, 3)


@dataclasses.dataclass
class Setting:
    """What was measured: the model, the test set and the search."""

    checkpoint: str
    model_note: str
    test_set: str
    sentences: int
    beam: int
    seed: int
    search: dict
    device: str
    precision: str
    engine: str = "torch"
    load_average: tuple[float, float] = (0.0, 0.0)  # the machine's 1-minute load at the start and the end


@dataclasses.dataclass
class ConstrainedRun:
    """One pass over the test set with ``constraints_per_sentence`` phrases (at most) per sentence."""

    constraints_per_sentence: int
    sentences_with_that_many: int
    constraints: int
    bleu: float
    all_met: float  # share of outputs holding all their phrases as whole words
    seconds: float
    sentences_per_second: float
    cpu_seconds: float  # the process's CPU time (all its threads): what the search costs, whatever else runs
    cost: float = 1.0  # its CPU time / the unconstrained pass's
EDGE_PUNCTUATION = ".,;:!?\"'()"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", type=Path, required=True, metavar="DIR", help="checkpoint or run directory")
    parser.add_argument("--dataset", default="multi30k")
    parser.add_argument("--split", default="test2016")
    parser.add_argument("--sentences", type=ranged(int, ge=1, le=MAX_BATCH), default=None, metavar="N",
                        help="the first N sentences of the split (default: all; --smoke: 8)")
    parser.add_argument("--beam", type=ranged(int, ge=1, le=256), default=5, metavar="N", help="beam size (default 5)")
    parser.add_argument("--seed", type=ranged(int, ge=0, lt=2**63), default=0,
                        help="the seed of the sampled phrases (default 0)")
    parser.add_argument("--model-note", default="", metavar="TEXT",
                        help="what the model is, for the table (e.g. its study and epoch)")
    add_data_dir_argument(parser)


def sample_phrases(reference: str, output: str, rng: random.Random, count: int = 3) -> list[str]:
    """Up to ``count`` phrases of 1-3 words of ``reference`` (punctuation at their ends dropped), none in
    ``output`` as whole words and no two overlapping, in the order drawn."""
    words = reference.split()
    spans = [(start, length) for length in (1, 2, 3) for start in range(len(words) - length + 1)]
    rng.shuffle(spans)
    chosen: list[str] = []
    taken: set[int] = set()
    for start, length in spans:
        positions = set(range(start, start + length))
        phrase = " ".join(words[start : start + length]).strip(EDGE_PUNCTUATION)
        if len(chosen) == count or positions & taken or not phrase or _contains(output, phrase):
            continue
        chosen.append(phrase)
        taken |= positions
    return chosen


def _contains(text: str, phrase: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text) is not None


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    directory = resolve_checkpoint(args.checkpoint)
    stored = StoredSearch.read(directory)
    search = stored.search(beam_size=args.beam)
    translator = Translator.load(directory, search, EngineOptions(engine="torch", device=str(device)))
    corpus = load_corpus(args.dataset, args.split, data_dir=args.data_dir)
    n = args.sentences or (8 if args.smoke else len(corpus.source))
    sources, references = corpus.source[:n], corpus.target[:n]

    load_at_start = load_averages()[0]
    plain, outputs = _measured(translator, sources, references, [[] for _ in sources], 0)
    rng = random.Random(args.seed)
    drawn = [sample_phrases(ref, out, rng) for ref, out in zip(references, outputs)]
    rows = [plain] + [_measured(translator, sources, references, [phrases[:count] for phrases in drawn], count)[0]
                      for count in COUNTS[1:]]
    for row in rows:
        row.cost = row.cpu_seconds / plain.cpu_seconds
    setting = Setting(str(args.checkpoint), args.model_note, f"{args.dataset} {args.split}", n, args.beam,
                      args.seed, {**stored.settings, "beam_size": args.beam}, str(device),
                      translator.config.precision, load_average=(load_at_start, load_averages()[0]))
    table = render_table(rows, setting, provenance_line(device, args.command_line))
    write_results(args.out, "constraints", args.command_line, device, dataclasses.asdict(setting),
                  {"rows": [dataclasses.asdict(row) for row in rows], "phrases": drawn}, table, {})
    log(f"constraints: wrote {args.out}/table.md, results.json")
    return 0


def _measured(translator: Translator, sources: Sequence[str], references: Sequence[str],
              phrases: list[list[str]], count: int) -> tuple[ConstrainedRun, list[str]]:
    """One run over the test set with ``phrases`` per sentence, and its outputs."""
    constrained = any(phrases)
    start, cpu_start = time.perf_counter(), time.process_time()
    nbest = translator.translate_nbest(sources, constraints=phrases if constrained else None)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    outputs = [best[0].text for best in nbest]
    met = sum(all(_contains(out, phrase) for phrase in row) for out, row in zip(outputs, phrases))
    bleu = corpus_scores(outputs, list(references)).bleu
    log(f"constraints: {count} per sentence: BLEU {bleu:.2f}, {len(sources) / seconds:.1f} sentences/s")
    return ConstrainedRun(count, sum(len(row) == count for row in phrases), sum(map(len, phrases)), bleu,
                          met / len(sources), seconds, len(sources) / seconds, cpu_seconds), outputs


def render_table(rows: list[ConstrainedRun], setting: Setting, provenance: str) -> str:
    note = f" ({setting.model_note})" if setting.model_note else ""
    body = markdown_table(
        ["constraints / sentence", "sentences with that many", "BLEU", "outputs with all their constraints",
         "sentences/s (wall)", "CPU ms / sentence", "CPU time vs. unconstrained"],
        [[row.constraints_per_sentence, row.sentences_with_that_many, fixed(row.bleu), f"{100 * row.all_met:.1f}%",
          fixed(row.sentences_per_second, 1), fixed(1000 * row.cpu_seconds / setting.sentences, 0),
          f"{row.cost:.2f}x"]
         for row in rows])
    return (f"# Lexically constrained decoding (dynamic beam allocation)\n\n"
            f"Model: `{setting.checkpoint}`{note}. Test set: {setting.test_set}, {setting.sentences} sentences, beam "
            f"{setting.beam}, engine torch ({setting.precision}) on {setting.device}. Constraints: phrases of 1-3 "
            f"words sampled (seed {setting.seed}) from each reference among those "
            "the unconstrained output lacks; a sentence with fewer such phrases has fewer constraints (the second "
            "column). The search places each phrase as whole words (the token after it starts a new word, or "
            "ends the output); the column of outputs with all their constraints counts whole words. The machine's "
            f"1-minute load average was {setting.load_average[0]:.1f} at the start and {setting.load_average[1]:.1f} "
            "at the end: other work shared its cores, so the wall-clock speed varies with it, and the cost is "
            "measured in the process's CPU time (all its threads).\n\n"
            f"{body}\n\n{provenance}\n")
