"""`vaswani bench train|decode|runs|engines|data`: speed measurements, printed as tables and optionally saved as JSON.
(Attention time and memory across lengths is the `vaswani experiment attention` study.)"""

from __future__ import annotations

import argparse
import importlib

BENCHMARKS = {
    "train": ("vaswani.benchmarks.train", "tokens/s of a training step: ours vs torch.nn.Transformer"),
    "decode": ("vaswani.benchmarks.decode", "sentences/s and tokens/s of greedy and beam search, cached vs not"),
    "runs": ("vaswani.benchmarks.runs", "tokens/s of real training runs, from their metrics.jsonl"),
    "engines": ("vaswani.benchmarks.engines", "vaswani translate on each engine vs a bare CTranslate2 script"),
    "data": ("vaswani.tools.data_benchmark", "prepare a synthetic WMT-sized corpus and start training on it: time and "
             "peak memory per size"),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="speed benchmarks", description=__doc__)
    benches = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for name, (module_name, help_text) in BENCHMARKS.items():
        module = importlib.import_module(module_name)
        sub = benches.add_parser(name, help=help_text, description=help_text,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        module.add_arguments(sub)
        sub.set_defaults(handler=module.run)
