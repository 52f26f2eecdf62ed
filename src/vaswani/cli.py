"""The ``vaswani`` command line: thin wrappers that parse arguments and call the modules that do the work.

Each area of the package owns its subcommands in a ``commands.py`` with a ``register(subparsers)`` function,
so this file only lists the areas. It is the one module that knows every area: the core's (data, training,
decoding, evaluation) and those built on the core (benchmarks, experiments, classification, …). Nothing imports it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from vaswani.errors import VaswaniError

# Areas in the order `vaswani --help` lists them; each module has register(subparsers).
CORE_COMMANDS = [
    "vaswani.data.commands",
    "vaswani.training.commands",
    "vaswani.decoding.commands",
    "vaswani.evaluation.commands",
]
BUILT_ON_THE_CORE = [
    "vaswani.benchmarks.commands",
    "vaswani.experiments.commands",
    "vaswani.classification.commands",
    "vaswani.serve.commands",
    "vaswani.export.commands",
]
COMMAND_MODULES = CORE_COMMANDS + BUILT_ON_THE_CORE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vaswani",
        description="A from-scratch Transformer for German-English translation: prepare data, train, translate, "
        "evaluate, benchmark and run the experiments.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    from vaswani.provenance import record_command

    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    record_command(argv)
    try:
        return int(args.handler(args) or 0)
    except BrokenPipeError:  # output piped into `head` and closed early: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except VaswaniError as error:
        print(f"vaswani {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
