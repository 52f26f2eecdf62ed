"""``vaswani translate``: German text in (stdin, a file, or typed interactively), English out."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from vaswani.decoding.arguments import add_search_arguments, translator_from_args
from vaswani.errors import VaswaniError

if TYPE_CHECKING:  # the translator imports torch; the parser is built without it
    from vaswani.decoding.translator import Translation, Translator


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "translate",
        help="translate sentences with a trained checkpoint",
        description="Translate one sentence per line from --input (or stdin) to --output (or stdout). With a "
        "terminal on stdin, translate each line as it is typed. --nbest N prints 'i ||| hypothesis ||| score'.",
    )
    parser.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint directory or run directory")
    parser.add_argument("--input", type=Path, metavar="FILE", help="source sentences, one per line (default stdin)")
    parser.add_argument("--output", type=Path, metavar="FILE", help="translations (default stdout)")
    add_search_arguments(parser)
    parser.set_defaults(handler=translate_command)


def translate_command(args: argparse.Namespace) -> int:
    if args.nbest > args.beam:
        raise VaswaniError(f"--nbest {args.nbest} needs a beam at least as wide (--beam {args.beam})")
    interactive = args.input is None and sys.stdin.isatty()
    translator = translator_from_args(args)
    if interactive:
        return _interactive(translator, args.nbest)
    lines = _read_lines(args.input)
    nbest = translator.translate_nbest(lines, progress=args.input is not None)
    if args.output is None:
        _write(sys.stdout, nbest, args.nbest)
    else:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        with open(args.output, "w", encoding="utf-8") as handle:
            _write(handle, nbest, args.nbest)
    return 0


def _read_lines(path: Path | None) -> list[str]:
    if path is None:
        return [line.rstrip("\r\n") for line in sys.stdin]
    try:
        with open(path, encoding="utf-8") as handle:
            return [line.rstrip("\r\n") for line in handle]
    except FileNotFoundError:
        raise VaswaniError(f"{path}: no such input file") from None
    except UnicodeDecodeError as error:
        raise VaswaniError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def _write(out: TextIO, nbest: list[list[Translation]], n: int, offset: int = 0) -> None:
    """One line per sentence, or Moses-style ``i ||| hypothesis ||| score`` lines when n-best was asked for."""
    for i, hypotheses in enumerate(nbest, start=offset):
        if n == 1:
            out.write(hypotheses[0].text + "\n")
        else:
            for h in hypotheses:
                out.write(f"{i} ||| {h.text} ||| {h.score:.4f}\n")


def _interactive(translator: Translator, n: int) -> int:
    print("Type a German sentence and press Enter (Ctrl-D to quit).", file=sys.stderr)
    count = 0
    while True:
        try:
            line = input("> ")
        except EOFError:
            print(file=sys.stderr)
            return 0
        _write(sys.stdout, translator.translate_nbest([line]), n, offset=count)
        sys.stdout.flush()
        count += 1
