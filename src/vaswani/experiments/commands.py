"""`vaswani experiment NAME`: run one experiment and write its results (results.json, table.md, PNG plots).

Every experiment takes ``--smoke`` (a tiny setting that runs in seconds, for CI), ``--out DIR`` (default
``runs/experiments/<name>``; the repository's published ``results/<name>`` is written only when ``--out`` names it)
and ``--device`` (auto: CUDA when visible, else CPU).
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Callable

DEFAULT_OUT = Path("runs") / "experiments"
EXPERIMENTS = {
    "attention": ("vaswani.experiments.attention",
                  "standard vs SDPA vs sliding-window attention: time, memory, FLOPs; optional training comparison"),
    "memory": ("vaswani.experiments.memory",
               "training memory estimated from first principles vs measured; the largest batch for a budget"),
    "devices": ("vaswani.experiments.device_comparison",
                "CPU vs GPU: forward, backward, optimizer and step time, epoch time, peak memory"),
    "ablation": ("vaswani.experiments.ablation",
                 "post-LN vs pre-LN, warmup, ReLU vs GELU, sinusoidal vs RoPE vs learned: one budget, one seed"),
    "robustness": ("vaswani.experiments.robustness",
                   "sinusoidal vs learned vs rotary positions under shuffled, dropped and repeated source tokens"),
    "recipe": ("vaswani.experiments.recipe",
               "what buys BLEU per CPU-minute: proxy runs of multi30k-cpu changing one thing each, seed noise shown"),
    "regularization": ("vaswani.experiments.regularization",
                       "which dropout, label smoothing and vocabulary let each width of multi30k-cpu improve with its "
                       "epochs: whole schedules, curves per epoch, seeds"),
    "backtranslation": ("vaswani.experiments.backtranslation",
                        "half of Multi30k against the same half plus the other half back-translated (sampled, beam, "
                        "tagged) and against all of it: test BLEU over seeds"),
    "distillation": ("vaswani.experiments.distillation",
                     "a 256-wide teacher's translations against the references for the small student preset: test "
                     "BLEU and CTranslate2 int8 speed over seeds"),
    "cleaning": ("vaswani.experiments.cleaning",
                 "a fifth of Multi30k made noisy (duplicates, swapped sides, misaligned pairs): what vaswani clean "
                 "catches, and noisy vs cleaned vs clean-only training: test BLEU over seeds"),
    "fine-tuning": ("vaswani.experiments.fine_tuning",
                    "a Multi30k model fine-tuned on WMT news (and the encoder frozen) against news from scratch and "
                    "mixed: BLEU on news and what Multi30k forgets"),
    "final-models": ("vaswani.experiments.final_models",
                     "one table of finished runs' final models: wall time, what the end of the run chose, test BLEU"),
    "constraints": ("vaswani.experiments.constraints",
                    "lexically constrained decoding: BLEU and speed with 0-3 reference phrases per test sentence"),
    "ensemble": ("vaswani.experiments.ensemble",
                 "single models against ensembles of 2 and 4 seeds on Multi30k: BLEU on val and test2016, speed"),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("experiment", help="run an experiment and write its results.json, table.md, plots",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    experiments = parser.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    for name, (module_name, help_text) in EXPERIMENTS.items():
        module = importlib.import_module(module_name)
        # Plain help formatter: most defaults depend on the device (and --smoke), so each help text states them.
        sub = experiments.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--smoke", action="store_true", help="tiny setting that runs in seconds (CI)")
        sub.add_argument("--out", type=Path, default=None,
                         help=f"output directory (default {DEFAULT_OUT / name}; --out results/{name} replaces the "
                         "published results)")
        sub.add_argument("--device", default="auto", help="auto (CUDA when visible), cpu or cuda (default auto)")
        module.add_arguments(sub)
        sub.set_defaults(handler=_handler(name, module.run))


def _handler(name: str, run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Fill in what every experiment needs before it runs: the output directory and the command line."""

    def handle(args: argparse.Namespace) -> int:
        from vaswani.io import check_output
        from vaswani.provenance import command_line

        args.command_line = command_line()
        explicit = args.out is not None
        args.out = args.out if explicit else DEFAULT_OUT / name
        check_output(args.out, command=f"experiment {name}", writes="files", inputs=getattr(args, "runs", None) or [],
                     explicit=explicit)
        return run(args)

    return handle
