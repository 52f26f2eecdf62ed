"""``vaswani evaluate`` (BLEU/chrF of a checkpoint on a test set) and ``vaswani average`` (checkpoint averaging)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vaswani.arguments import ranged
from vaswani.data.commands import add_data_dir_argument
from vaswani.decoding.commands import add_search_arguments, search_config_from_args, translator_from_args
from vaswani.errors import VaswaniError
from vaswani.io import check_output
from vaswani.settings import MAX_COUNT


def register(subparsers: argparse._SubParsersAction) -> None:
    evaluate = subparsers.add_parser(
        "evaluate",
        help="translate a test set and score it with sacreBLEU",
        description="Translate a test set, score BLEU and chrF with sacreBLEU (signature included), measure "
        "decoding speed, and write results.json, hypotheses.txt and report.md (best/worst sentences).",
    )
    evaluate.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint directory or run directory")
    data = evaluate.add_argument_group("test set (a registered corpus, two aligned files, or one TSV file)")
    data.add_argument("--dataset", metavar="NAME", help="e.g. multi30k, wmt17")
    data.add_argument("--split", metavar="NAME", help="e.g. test2016, newstest2017")
    add_data_dir_argument(data)
    data.add_argument("--src", type=Path, metavar="FILE", help="source sentences, one per line")
    data.add_argument("--ref", type=Path, metavar="FILE", help="reference translations, aligned with --src")
    data.add_argument("--tsv", type=Path, metavar="FILE", help="source<TAB>reference pairs, one per line")
    data.add_argument("--direction", default="de-en", choices=["de-en", "en-de"],
                      help="with --dataset: the direction the model translates (default de-en)")
    evaluate.add_argument("--out", type=Path, metavar="DIR",
                          help="output directory, written whole; an earlier evaluation there is replaced (default: "
                          "CHECKPOINT/eval/<test set>-beam<N>/)")
    evaluate.add_argument("--force", action="store_true",
                          help="replace an earlier evaluation in --out (a re-run does so anyway); nothing else is "
                          "ever replaced")
    evaluate.add_argument("--json", action="store_true", help="print results.json instead of the summary")
    evaluate.add_argument("--seed", type=ranged(int, ge=0, le=MAX_COUNT), default=0,
                          help="seed of the best/worst sample (default 0)")
    add_search_arguments(evaluate, nbest=False)  # scores the best hypothesis only
    evaluate.set_defaults(handler=evaluate_command)

    compare = subparsers.add_parser(
        "compare",
        help="table of several evaluate results side by side",
        description="Read the results.json of several `vaswani evaluate` runs and write table.md and results.json "
        "comparing them (search settings, BLEU, chrF, length ratio, speed, commands).",
    )
    compare.add_argument("results", nargs="+", type=Path, metavar="RESULTS",
                         help="evaluate output directories or their results.json files")
    compare.add_argument("--out", type=Path, required=True, metavar="DIR",
                         help="where table.md/results.json go, written whole; an earlier comparison there is replaced")
    compare.add_argument("--force", action="store_true",
                         help="replace an earlier comparison in --out (a re-run does so anyway); nothing else is "
                         "ever replaced")
    compare.set_defaults(handler=compare_command)

    average = subparsers.add_parser(
        "average",
        help="average the weights of several checkpoints",
        description="Average the weights of checkpoints of one architecture (e.g. the last 5 of a run) into a "
        "new checkpoint directory.",
    )
    which = average.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoints", nargs="+", metavar="DIR", help="checkpoint directories to average")
    which.add_argument("--run", metavar="DIR", help="a run directory: average its last --last step_* checkpoints")
    average.add_argument("--last", type=ranged(int, ge=1, le=MAX_COUNT), default=5, metavar="N",
                         help="with --run: how many (default 5)")
    average.add_argument("--out", required=True, type=Path, metavar="DIR", help="new checkpoint directory")
    average.add_argument("--force", action="store_true",
                         help="replace --out when it holds an earlier average; nothing else is ever replaced")
    average.set_defaults(handler=average_command)


def evaluate_command(args: argparse.Namespace) -> int:
    from vaswani.evaluation.evaluate import EVALUATION_KIND, EVALUATIONS_FOLDER, evaluate, load_test_set
    from vaswani.records import to_json

    given = [args.dataset is not None, args.src is not None or args.ref is not None, args.tsv is not None]
    if sum(given) != 1:
        raise VaswaniError("give one test set: --dataset NAME --split NAME, --src FILE --ref FILE, or --tsv FILE")
    search_config_from_args(args)  # option errors before any work
    # The output never reaches what the command reads: the checkpoint (or run) directory, --src, --ref, --tsv, the
    # corpora.
    inputs = [args.checkpoint, args.src, args.ref, args.tsv, args.data_dir]

    def check(out: Path, explicit: bool) -> None:
        check_output(out, command="evaluate", writes="folder", kind=EVALUATION_KIND, inputs=inputs, force=args.force,
                     replaces_own=True, explicit=explicit, belongs_in=EVALUATIONS_FOLDER)

    if args.out is not None:
        check(args.out, explicit=True)
    test_set = load_test_set(args.dataset, args.split, args.src, args.ref, args.data_dir, args.tsv, args.direction)
    translator = translator_from_args(args)  # the checkpoint's stored search, then the options
    out = args.out or Path(args.checkpoint) / EVALUATIONS_FOLDER / f"{test_set.name}-beam{translator.config.beam_size}"
    if args.out is None:
        check(out, explicit=False)
    result, examples = evaluate(translator, test_set, out, checkpoint=args.checkpoint, seed=args.seed,
                                progress=not args.json)
    if args.json:
        print(json.dumps(to_json(result), indent=2, ensure_ascii=False))
        return 0
    pair = f" ({test_set.languages.name})" if test_set.languages else ""
    print(f"{test_set.name}{pair}: BLEU {result.bleu:.2f}  chrF {result.chrf:.2f}  "
          f"length ratio {result.length_ratio:.3f}  ({result.sentences} sentences)")
    print(f"  {result.signature}")
    print(f"  {result.speed.sentences_per_second:.1f} sentences/s, {result.speed.target_tokens_per_second:.0f} "
          f"target tokens/s on {result.speed.device}")
    print(examples)
    print(f"wrote {out}/results.json, hypotheses.txt, report.md")
    return 0


def average_command(args: argparse.Namespace) -> int:
    from vaswani.evaluation.average import average_checkpoints, last_checkpoints
    from vaswani.model.serialization import CHECKPOINT_KIND

    checkpoints = args.checkpoints or last_checkpoints(args.run, args.last)
    check_output(args.out, command="average", writes="folder", kind=CHECKPOINT_KIND, inputs=[*checkpoints, args.run],
                 force=args.force)
    out = average_checkpoints(checkpoints, args.out)
    print(f"averaged {len(checkpoints)} checkpoints into {out}")
    for path in checkpoints:
        print(f"  {path}")
    return 0


def compare_command(args: argparse.Namespace) -> int:
    from vaswani.evaluation.compare import COMPARISON_KIND, write_comparison

    check_output(args.out, command="compare", writes="folder", kind=COMPARISON_KIND, inputs=args.results,
                 force=args.force, replaces_own=True)
    print(write_comparison(args.results, args.out), end="")
    return 0
