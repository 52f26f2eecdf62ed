"""`vaswani train`: presets, overrides, run directories, resume."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path


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
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override any setting, e.g. --set model.positions=rope --set train.max_steps=100")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--resume", action="store_true",
                       help="continue the run in --run-dir from its last checkpoint; --set may change training "
                       "settings such as the learning rate, and each change is printed")
    start.add_argument("--start-over", action="store_true",
                       help="start a new run in a --run-dir that holds one: the earlier run's files are moved into "
                       "RUN_DIR/superseded-<time>/ (nothing is deleted)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="local corpora directory (default: $VASWANI_DATA, then the download cache)")
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
    from vaswani.io import atomic_write_json
    from vaswani.training.rundir import check_start, claim

    is_main = int(os.environ.get("RANK", "0")) == 0  # under torchrun, rank 0 owns the directory
    with claim(run_dir) if is_main else contextlib.nullcontext():
        if is_main:
            check_start(run_dir, resume=args.resume, start_over=args.start_over)
        from vaswani.training.trainer import Trainer

        trainer = Trainer(config, run_dir, resume=args.resume)
        summary = trainer.fit()
        if trainer.world.is_main:
            atomic_write_json(run_dir / "summary.json", summary)
            print(json.dumps(summary), file=sys.stdout)
    return 0 if summary["stop_reason"] != "interrupted" else 130
