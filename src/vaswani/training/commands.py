"""`vaswani train`: presets, overrides, run directories, resume."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from vaswani.arguments import add_settings_argument, ranged
from vaswani.data.commands import add_corpus_arguments, add_data_dir_argument, corpus_arguments
from vaswani.errors import VaswaniError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a translation model",
        description="Train a Transformer on a parallel corpus. A run directory receives the resolved config, "
        "tokenizer.json, checkpoints (best/last), metrics.jsonl, TensorBoard events and plots.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--preset", default="multi30k-cpu",
                        help="named preset (multi30k-cpu, multi30k-gpu, wmt17-base, smoke) or a YAML file")
    parser.add_argument("--run-dir", type=Path, default=None, help="where the run is written (default runs/PRESET)")
    add_settings_argument(parser, ("model", "data", "train"), "model.positions=rope")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--resume", action="store_true",
                       help="continue the run in --run-dir from its last checkpoint with the run's own settings "
                       "(--preset is not read); only --set given now changes training settings such as the "
                       "learning rate, and each change is printed and recorded in the run's provenance.jsonl")
    start.add_argument("--start-over", action="store_true",
                       help="start a new run in a --run-dir that holds one: the earlier run's files are moved into "
                       "RUN_DIR/superseded-<time>/ (nothing is deleted)")
    parser.add_argument("--init-from", type=Path, default=None, metavar="CHECKPOINT",
                        help="fine-tune: start a new run from the weights of a run directory, a checkpoint "
                        "or a final model, with its model and tokenizer but this run's data, schedule and "
                        "a fresh optimizer (train.init_from; train.freeze=embeddings|encoder keeps that "
                        "part as it is)")
    add_data_dir_argument(parser)
    add_corpus_arguments(parser)
    parser.add_argument("--weight", action="append", type=ranged(float, gt=0, le=1000), metavar="W",
                        help="how often each training part's pairs are taken per epoch, one --weight per "
                        "part in the order of --src/--tgt, then --tsv (3: three times; 0.5: half, drawn anew "
                        "each epoch); data.train_weights")
    parser.add_argument("--tag", action="append", metavar="TOKEN",
                        help="a token put in front of each training part's source sentences, one --tag per part "
                        "in the order of --weight ('' for a part without one): <BT> marks back-translated pairs; "
                        "the tokenizer holds it as a special token; data.train_tags")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.set_defaults(handler=run_train)

    final = subparsers.add_parser(
        "finalize",
        help="choose a finished run's final weights and search on validation data, then score its test sets",
        description="What a run with train.final_model=true does after its last update: score best, last, the "
        "averages of the last 2..train.average_last checkpoints and the ensembles of the last k checkpoints for each "
        "k in train.final_ensembles by greedy BLEU on the whole validation split, tune "
        "the beam's length penalty on it, write RUN/checkpoints/final/ (with search.json, used by translate and "
        "evaluate by default) and score train.final_test_splits.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    final.add_argument("--run-dir", type=Path, required=True, help="a trained run directory")
    add_settings_argument(final, ("train",), "train.average_last=5")
    add_data_dir_argument(final)
    add_corpus_arguments(final, training=False)  # more test sets to score the final model on
    final.set_defaults(handler=run_finalize)


def run_train(args: argparse.Namespace) -> int:
    from vaswani.records import to_json
    from vaswani.training.corpus_settings import with_corpus, with_weights_and_tags
    from vaswani.training.presets import apply_settings, load_preset
    from vaswani.training.resume import resumed_config
    from vaswani.training.run import train

    run_dir = args.run_dir or Path("runs") / Path(args.preset).stem
    if args.init_from is not None and args.resume:
        raise VaswaniError("--init-from starts a new run; a resumed run continues from its own checkpoints: "
                           "drop --init-from")
    if args.resume:  # the run continues as it was: its saved settings, changed only by the --set given now
        config = resumed_config(run_dir, args.settings)
    else:
        config = apply_settings(load_preset(args.preset), args.settings)
    corpus = corpus_arguments(args)
    if corpus is not None:
        config = with_corpus(config, corpus, replace=not args.resume)
    if args.data_dir is not None:
        config.data.data_dir = str(args.data_dir)
    config = with_weights_and_tags(config, args.weight, args.tag)
    if not args.resume and (args.init_from is not None or config.train.init_from is not None):
        from vaswani.training.parent import find_parent, fine_tune_config

        # checked before the run directory is made: a parent refused writes nothing
        parent = find_parent(args.init_from if args.init_from is not None else config.train.init_from)
        config = fine_tune_config(config, parent, args.settings)
    if args.print_config:
        print(config.to_yaml())
        return 0

    summary = train(config, run_dir, resume=args.resume, start_over=args.start_over)
    if summary is not None:  # rank 0 of a distributed run, or a single process
        print(json.dumps(to_json(summary)), file=sys.stdout)
    if summary is not None and summary.signal is not None:  # the shell's convention: 128 + the signal's number
        return 128 + signal.Signals[summary.signal].value
    return 0


def _check_run_settings(config_file: Path) -> None:
    """The run's config.yaml holds what `vaswani train` wrote there (its model, data and train sections): an empty or
    cut file is not "all defaults", which would describe other weights than the run trained."""
    from vaswani.io import parse_yaml
    from vaswani.training.presets import read_config_text

    try:
        text = read_config_text(config_file, "run's settings")
        values = parse_yaml(text, str(config_file), "run's settings")
    except VaswaniError:
        return  # load_preset names what is wrong with it
    if not isinstance(values, dict) or not {"model", "data", "train"} <= set(values):
        raise VaswaniError(f"{config_file}: not the settings `vaswani train` wrote (no model, data and train "
                           "sections); restore the run's config.yaml (its checkpoints' trainer_state.pt holds a copy)")


def run_finalize(args: argparse.Namespace) -> int:
    from vaswani.settings import parse_settings
    from vaswani.training.corpus_settings import with_corpus
    from vaswani.training.presets import apply_settings, load_preset

    config_file = args.run_dir / "config.yaml"
    if not config_file.is_file():
        raise VaswaniError(f"{args.run_dir}: no config.yaml; is it a run directory written by `vaswani train`?")
    _check_run_settings(config_file)
    # Only how the final model is chosen may change: the weights were trained with the run's model and data.
    parse_settings(args.settings, ("train",))
    config = apply_settings(load_preset(str(config_file)), args.settings)
    corpus = corpus_arguments(args)
    if corpus is not None:
        config = with_corpus(config, corpus, replace=False)
    if args.data_dir is not None:
        config.data.data_dir = str(args.data_dir)

    from vaswani.devices import resolve_device
    from vaswani.precision import resolve_precision
    from vaswani.records import to_json
    from vaswani.training.finalize import finalize
    from vaswani.training.rundir import lock_run_directory

    device = resolve_device(config.train.device)
    with lock_run_directory(args.run_dir):  # never beside a trainer still writing checkpoints there
        selection = finalize(args.run_dir, config, device, resolve_precision(config.train.precision, device))
    print(json.dumps(to_json(selection.headline())))
    return 0
