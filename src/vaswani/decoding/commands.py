"""``vaswani translate``: text in the model's source language in (stdin, a file, or typed interactively), its
translation out."""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from vaswani.data.textfiles import STANDARD_INPUT, read_lines, read_stream_lines, unicode_problem
from vaswani.decoding.arguments import add_search_arguments, search_config_from_args, translator_from_args
from vaswani.io import atomic_write_text, check_output_file, standard_stream

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
    # Everything the user gave is checked before the model is loaded and the input translated.
    search_config_from_args(args)
    if args.output is None:
        standard_stream("stdout", "pass --output FILE")
    else:
        check_output_file(args.output, "--output")
    stdin = standard_stream("stdin", "pass --input FILE") if args.input is None else None
    interactive = stdin is not None and stdin.isatty()
    if not interactive:
        # The one way evaluate and prepare read text too: same lines, same byte-order mark and UTF-8 handling.
        lines = read_lines(args.input) if stdin is None else read_stream_lines(stdin)
    translator = translator_from_args(args)
    if interactive:
        from vaswani.data.languages import language_name, recorded_languages

        languages = recorded_languages(args.checkpoint)
        return _interactive(translator, args.nbest, language_name(languages.source) if languages else None)
    # A progress bar for a file being translated, when someone watches the terminal.
    nbest = translator.translate_nbest(lines, progress=args.input is not None and sys.stderr.isatty())
    if args.output is None:
        _write(sys.stdout, nbest, args.nbest)
    else:
        buffer = io.StringIO()
        _write(buffer, nbest, args.nbest)
        atomic_write_text(args.output, buffer.getvalue())
    return 0


def _write(out: TextIO, nbest: list[list[Translation]], n: int, offset: int = 0) -> None:
    """One line per sentence, or Moses-style ``i ||| hypothesis ||| score`` lines when n-best was asked for."""
    for i, hypotheses in enumerate(nbest, start=offset):
        if n == 1:
            out.write(hypotheses[0].text + "\n")
        else:
            for h in hypotheses:
                out.write(f"{i} ||| {h.text} ||| {h.score:.4f}\n")


def _interactive(translator: Translator, n: int, source_language: str | None = None) -> int:
    named = f"{'an' if source_language[0] in 'AEIOU' else 'a'} {source_language}" if source_language else "a"
    print(f"Type {named} sentence and press Enter (Ctrl-D to quit).", file=sys.stderr)
    count = number = 0
    while True:
        number += 1
        try:
            line = input("> ")
        except EOFError:
            print(file=sys.stderr)
            return 0
        # Bytes the terminal sent that are not UTF-8 (typed in a Latin-1 terminal, say) reach us as lone
        # surrogates, which the tokenizer cannot take: say so and wait for the next line.
        problem = unicode_problem(line, from_bytes=True)
        if problem is not None:
            print(f"{STANDARD_INPUT}:{number}: not translated: {problem}", file=sys.stderr)
            continue
        _write(sys.stdout, translator.translate_nbest([line]), n, offset=count)
        sys.stdout.flush()
        count += 1
