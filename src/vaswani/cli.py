"""The ``vaswani`` command line: thin wrappers that parse arguments and call the modules that do the work.

Each area of the package owns its subcommands in a ``commands.py`` with a ``register(subparsers)`` function,
so this file only lists the areas. It is the one module that knows every area: the core's (data, training,
decoding, evaluation) and those built on the core (benchmarks, experiments, classification, …). Nothing imports it.

What a user sees when something goes wrong: one line naming the file, setting or device and what to do, and the
exit status says whose fault it was: 2 for the input (a setting, a file's content, a wrong path), 1 for the
environment (no CUDA device, a directory that cannot be written, a full disk, out of memory). Any other exception
is a bug in vaswani and keeps its traceback. ``--debug`` (or ``VASWANI_DEBUG=1``) shows the traceback of every
error. The library's errors and warnings name a setting by its field (`` `engine` ``, ``search.beam_size=0``);
here it becomes the flag the user typed (``--engine``, ``--beam 0: search.beam_size=0 …``), through one table
(:data:`FLAGS`) for every command.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import warnings
from typing import Any

from vaswani.errors import ConfigError, VaswaniError, VaswaniWarning, is_out_of_memory, name_settings, out_of_memory

# Areas in the order `vaswani --help` lists them, each with the commands its register(subparsers) adds. Running
# one command imports only its own area: some areas import torch to describe their options, which a translation
# on the CTranslate2 engine must not pay for (tests/test_cli_areas.py checks this table against the areas).
CORE_COMMANDS = {
    "vaswani.data.commands": ("prepare", "clean"),
    "vaswani.training.commands": ("train", "finalize"),
    "vaswani.decoding.commands": ("translate", "score"),
    "vaswani.evaluation.commands": ("evaluate", "compare", "average"),
}
BUILT_ON_THE_CORE = {
    "vaswani.benchmarks.commands": ("bench",),
    "vaswani.experiments.commands": ("experiment",),
    "vaswani.classification.commands": ("classify",),
    "vaswani.serve.commands": ("serve",),
    "vaswani.export.commands": ("export",),
    "vaswani.tools.commands": ("serve-bench",),
    "vaswani.workflows.commands": ("backtranslate", "distill"),
}
COMMANDS = {**CORE_COMMANDS, **BUILT_ON_THE_CORE}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of ``command``'s area only when ``command`` is one of them."""
    parser = argparse.ArgumentParser(
        prog="vaswani",
        description="A from-scratch Transformer for German-English translation: prepare data, train, translate, "
        "evaluate, benchmark and run the experiments.",
    )
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of every error (also: VASWANI_DEBUG=1)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    areas = [name for name, commands in COMMANDS.items() if command in commands] or list(COMMANDS)
    for name in areas:
        importlib.import_module(name).register(subparsers)
    return parser


# The flag that sets each setting the library's messages name, by field: a command that has the flag shows it.
FLAGS = {
    **{name: f"--{name}" for name in ("engine", "quantization", "device", "threads", "compile", "resume")},
    "settings": "--set",
    "train.init_from": "--init-from",
    "search.beam_size": "--beam",
    **{f"search.{name}": f"--{name.replace('_', '-')}" for name in (
        "nbest", "alpha", "length_norm", "max_len_a", "max_len_b", "repetition_penalty", "no_repeat_ngram",
        "precision", "sample", "top_k", "top_p", "temperature", "seed")},
    **{f"serve.{name}": f"--{name.replace('_', '-')}" for name in (
        "max_chars", "max_texts", "max_body_bytes", "max_queue", "max_beam", "max_request_tokens",
        "max_attention_bytes", "batch_wait_ms",
        "max_batch_sentences", "max_batch_tokens", "workers", "parallel_batches")},
}


def destination(flag: str) -> str:
    """The attribute argparse keeps a flag's value in."""
    return "settings" if flag == "--set" else flag.removeprefix("--").replace("-", "_")


def command_flags(args: argparse.Namespace) -> dict[str, str]:
    """The part of :data:`FLAGS` that the command ``args`` were parsed for takes."""
    return {field: flag for field, flag in FLAGS.items() if hasattr(args, destination(flag))}


def user_message(error: VaswaniError, args: argparse.Namespace) -> str:
    """The error as the command line says it: every setting it names as its flag, and an invalid value of a
    setting the command takes as a flag led by that flag and the value typed (``--beam 0: search.beam_size=0 must
    be >= 1``)."""
    flags = command_flags(args)
    message = name_settings(str(error), flags)
    field = error.field if isinstance(error, ConfigError) else None
    flag = flags.get(field or "")
    if flag and str(error).startswith(f"{field}="):
        value = getattr(args, destination(flag))
        if value is not None:
            return f"{flag} {value}: {message}"
    return message


# An OSError naming a path the user gave wrongly is the input's fault; the others are the machine's.
_USER_ERRNOS = {errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.ENAMETOOLONG, errno.ELOOP}

# What to lower when memory runs out, per command: the settings that size what is allocated.
MEMORY_SETTINGS = {
    "train": "train.max_tokens (raise train.grad_accum to keep the tokens per update) or the model's size "
             "(model.d_model, model.d_ff, model.n_encoder_layers, model.n_decoder_layers, data.vocab_size)",
    "finalize": "train.final_beam or train.average_last",
    "translate": "--max-tokens or --batch-size (or --beam)",
    "evaluate": "--max-tokens or --batch-size (or --beam)",
    "serve": "--max-batch-tokens or --max-beam",
    "prepare": "--vocab-size, or prepare a smaller corpus",
    "classify": "--batch-size, --max-len or the model (--preset, --set model.*)",
    "bench": "--max-tokens or the model's size",
    "experiment": "the experiment's sizes (--max-tokens, lengths, model settings)",
}


# Folders named in the environment, relative to where the command was typed.
PATH_VARIABLES = ("VASWANI_DATA", "VASWANI_CACHE")


def main(argv: list[str] | None = None) -> int:
    """Run ``vaswani ARGS`` and return its exit status. A Ctrl-C at any point, even while the command modules are
    still importing, is one line and status 130, as a shell reports an interrupted command."""
    try:
        _absolute_environment_paths()
        return _run(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _absolute_environment_paths() -> None:
    """``VASWANI_DATA=../data vaswani …`` means relative to where the user typed it: made absolute before any work,
    so the processes a command starts in another directory (torchrun ranks, variant runs) find the same folder."""
    from vaswani.io import absolute_path

    for name in PATH_VARIABLES:
        if os.environ.get(name):
            os.environ[name] = str(absolute_path(os.environ[name]))


def _run(argv: list[str]) -> int:
    from vaswani.provenance import record_command

    parser = build_parser(next((arg for arg in argv if not arg.startswith("-")), None))
    args = parser.parse_args(argv)
    record_command(argv)
    debug = args.debug or os.environ.get("VASWANI_DEBUG", "") not in ("", "0")
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warning_shower(args, warnings.showwarning)
            return int(args.handler(args) or 0)
    except BrokenPipeError:  # output piped into `head` and closed early: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except VaswaniError as error:
        if debug:
            raise
        return _report(args.command, user_message(error, args), error.exit_code)
    except OSError as error:  # a file vanished, a directory cannot be written, the disk is full
        if debug:
            raise
        where = f"{error.filename}: " if error.filename else ""
        return _report(args.command, f"{where}{error.strerror or error}", 2 if error.errno in _USER_ERRNOS else 1)
    except (MemoryError, RuntimeError) as error:
        if not is_out_of_memory(error) or debug:  # any other RuntimeError is a bug
            raise
        fault = out_of_memory(error, MEMORY_SETTINGS.get(args.command, "the sizes this command was given"))
        return _report(args.command, str(fault), fault.exit_code)


def _warning_shower(args: argparse.Namespace, show: Any) -> Any:
    """``warnings.showwarning`` that prints the library's own warnings as one line naming flags, as errors are."""

    def shower(message: Warning | str, category: type[Warning], *rest: Any, **kwargs: Any) -> None:
        if issubclass(category, VaswaniWarning):
            print(name_settings(str(message), command_flags(args)), file=sys.stderr)
        else:
            show(message, category, *rest, **kwargs)

    return shower


def _report(command: str, message: str, code: int) -> int:
    print(f"vaswani {command}: error: {' '.join(message.split())}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
