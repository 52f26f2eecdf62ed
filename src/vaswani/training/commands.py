"""`vaswani train`: presets, overrides, run directories, resume."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vaswani.config import add_settings_argument
from vaswani.data.commands import add_data_dir_argument



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
                       help="continue the run in --run-dir from its last checkpoint; --set may change training "
                       "settings such as the learning rate, and each change is printed")
    start.add_argument("--start-over", action="store_true",
                       help="start a new run in a --run-dir that holds one: the earlier run's files are moved into "
                       "RUN_DIR/superseded-<time>/ (nothing is deleted)")
    add_data_dir_argument(parser)
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.set_defaults(handler=run_train)


def run_train(args: argparse.Namespace) -> int:
    from vaswani.training.config import apply_settings, load_preset

    config = apply_settings(load_preset(args.preset), args.settings)
    if args.data_dir is not None:
        config.data.data_dir = str(args.data_dir)
    if args.print_config:
        print(config.to_yaml())
        return 0
    run_dir = args.run_dir or Path("runs") / Path(args.preset).stem

    from vaswani.training.trainer import train

    summary = train(config, run_dir, resume=args.resume, start_over=args.start_over)
    if summary is not None:  # rank 0 of a distributed run, or a single process
        print(json.dumps(summary), file=sys.stdout)
    return 0 if summary is None or summary["stop_reason"] != "interrupted" else 130
