"""``vaswani translate``: text in the model's source language in (stdin, a file, or typed interactively), its
translation out; and the search and engine options that ``vaswani evaluate`` shares."""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from vaswani.arguments import ranged
from vaswani.config import MAX_BATCH, MAX_THREADS, PRECISIONS
from vaswani.data.textfiles import STANDARD_INPUT, read_lines, read_stream_lines, unicode_problem
from vaswani.decoding.config import (ENGINES, EngineOptions, QUANTIZATIONS, SearchConfig, read_stored_engine,
                                     read_stored_search)
from vaswani.decoding.engine import AUTO
from vaswani.errors import ConfigError
from vaswani.io import atomic_write_text, check_output, standard_stream
from vaswani.model.serialization import resolve_checkpoint

if TYPE_CHECKING:  # the translator imports torch; the parser is built without it
    from vaswani.decoding.translator import Translation, Translator


DEFAULTS = SearchConfig()


def add_search_arguments(parser: argparse.ArgumentParser, nbest: bool = True) -> None:
    """--beam, --alpha, penalties, length limits, batching, the engine, device and precision (and --nbest if
    ``nbest``).

    The search options default to the settings stored with the checkpoint (``search.json``, chosen on validation
    data at the end of a training run), else to SearchConfig's defaults; an option given on the command line wins.
    """
    d = DEFAULTS
    stored = "the checkpoint's search.json, else"
    group = parser.add_argument_group("search")
    group.add_argument("--beam", type=int, default=None, metavar="N",
                       help=f"beam size; 1 = greedy (default: {stored} {d.beam_size})")
    if nbest:
        group.add_argument("--nbest", type=int, default=1, metavar="N", help="hypotheses per sentence (<= beam)")
    group.add_argument("--alpha", type=float, default=None, metavar="A",
                       help=f"GNMT length-penalty exponent: lp = ((5 + |Y|) / 6)^A (default: {stored} {d.alpha})")
    group.add_argument("--length-norm", choices=["gnmt", "power", "average", "none"], default=None,
                       help="rank finished hypotheses by log P / ((5 + |Y|) / 6)^alpha (gnmt), by log P / |Y|^alpha "
                       "(power, which the ctranslate2 engine can run too), by mean log-prob, or by log P "
                       f"(default: {stored} {d.length_norm})")
    group.add_argument("--max-len-a", type=float, default=None, metavar="A",
                       help=f"output length limit = A * source tokens + B (default: {stored} {d.max_len_a})")
    group.add_argument("--max-len-b", type=int, default=None, metavar="B",
                       help=f"see --max-len-a (default: {stored} {d.max_len_b})")
    group.add_argument("--repetition-penalty", type=float, default=1.0, metavar="X",
                       help="CTRL penalty for tokens already generated; 1 = off (default)")
    group.add_argument("--no-repeat-ngram", type=int, default=0, metavar="N",
                       help="never repeat an n-gram of this size; 0 = off (default)")
    group.add_argument("--batch-size", type=ranged(int, le=MAX_BATCH), default=64, metavar="N",
                       help="sentences per batch (default 64)")
    group.add_argument("--max-tokens", type=ranged(int, le=MAX_BATCH), default=8192, metavar="N",
                       help="padded source tokens x beam per batch (default 8192)")
    engine = parser.add_argument_group("engine")
    engine.add_argument("--engine", choices=ENGINES, default=None,
                        help="torch (our search, the reference), ctranslate2 (the checkpoint converted once, next to "
                        "it, for speed; the same translations) or auto: ctranslate2 when it can run this model and "
                        f"search, else torch with the reason on stderr (default: {stored} {AUTO})")
    engine.add_argument("--quantization", choices=QUANTIZATIONS, default=None,
                        help="ctranslate2's weights and arithmetic: float32, int8 or int8_float32 on a CPU; float16, "
                        "bfloat16, int8_float16 or int8_bfloat16 need a GPU (default: the checkpoint's search.json, "
                        "which a training run's end fills with int8 when it scores within 0.3 BLEU of float32 on "
                        "validation, else float32)")
    engine.add_argument("--threads", type=ranged(int, ge=0, le=MAX_THREADS), default=0, metavar="N",
                        help="CPU threads of the engine; 0 (default) = its own default (torch: every core)")
    engine.add_argument("--device", default="auto", help="auto (cuda when available), cpu or cuda (default auto)")
    engine.add_argument("--precision", choices=PRECISIONS, default=d.precision,
                        help="the torch engine's autocast precision; auto (default) = bf16 where the device computes "
                        "it faster than fp32, fp32 on CPUs without bf16 units (where bf16 is emulated and many times "
                        "slower)")
    engine.add_argument("--compile", action="store_true",
                        help="compile the torch engine's decoding step with torch.compile: faster steps after a "
                        "one-off compile of tens of seconds on a CPU (worth it for long files; see "
                        "results/bench/decode-readme-model.md)")


# The search options whose default comes from the checkpoint's search.json, by SearchConfig field.
STORED_OPTIONS = {"beam_size": "beam", "length_norm": "length_norm", "alpha": "alpha", "max_len_a": "max_len_a",
                  "max_len_b": "max_len_b"}


def search_config_from_args(args: argparse.Namespace, stored: dict | None = None) -> SearchConfig:
    """The SearchConfig the options describe, on top of ``stored`` settings (a checkpoint's search.json) or the
    defaults; an invalid option (or batching limit) is a ConfigError naming it. Reads no file, so commands call it
    first to report option errors before any work."""
    for flag, value in (("--batch-size", args.batch_size), ("--max-tokens", args.max_tokens)):
        if value < 1:
            raise ConfigError(f"{flag} {value}: must be >= 1")
    given = {name: getattr(args, option) for name, option in STORED_OPTIONS.items() if getattr(args, option) is not None}
    config = _search_config(args, given)  # an invalid option is reported under its flag, stored file or not
    return _search_config(args, {**stored, **given}) if stored else config


def _search_config(args: argparse.Namespace, values: dict) -> SearchConfig:
    return SearchConfig(**values, nbest=getattr(args, "nbest", 1), repetition_penalty=args.repetition_penalty,
                        no_repeat_ngram=args.no_repeat_ngram, precision=args.precision)


def translator_from_args(args: argparse.Namespace) -> Translator:
    """The :class:`Translator` the options describe, on the engine they choose (only called by handlers)."""
    from vaswani.decoding.translator import Translator  # imports the engines' modules: not for the parser

    directory = resolve_checkpoint(args.checkpoint)
    return Translator.load(directory, search_config_from_args(args, read_stored_search(directory)),
                           engine_options_from_args(args).with_stored(read_stored_engine(directory)),
                           batch_size=args.batch_size, max_tokens=args.max_tokens)


def engine_options_from_args(args: argparse.Namespace) -> EngineOptions:
    """The engine options as given (an engine or quantization not given is None: the checkpoint's choice)."""
    return EngineOptions(engine=args.engine, quantization=args.quantization, device=args.device,
                         threads=args.threads, compile=args.compile)


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
        check_output(args.output, command="translate", writes="file", inputs=[args.checkpoint, args.input],
                     option="--output")
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
    # The progress of a file being translated: a bar on a terminal, a line now and then in a log.
    nbest = translator.translate_nbest(lines, progress=args.input is not None)
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
