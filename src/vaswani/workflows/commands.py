"""``vaswani backtranslate`` and ``vaswani distill``: a synthetic parallel corpus from a model and a text file, ready
to train on beside the real pairs (``vaswani train --src … --tgt … --src … --tgt … --weight …``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from vaswani.arguments import ranged
from vaswani.data.languages import LanguagePair, code_from_suffix, language_name, recorded_languages
from vaswani.data.textfiles import read_text_file
from vaswani.decoding.commands import add_search_arguments, engine_options_from_args, search_config_from_args
from vaswani.decoding.config import StoredSearch
from vaswani.errors import ConfigError
from vaswani.io import check_output
from vaswani.model.serialization import resolve_checkpoint
from vaswani.settings import MAX_COUNT
from vaswani.workflows.synthetic import CHUNK_LINES, SYNTHETIC_KIND, synthesize


def register(subparsers: argparse._SubParsersAction) -> None:
    back = subparsers.add_parser(
        "backtranslate", help="turn target-language text into synthetic training pairs with a reverse model",
        description="Translate monolingual text of your training targets' language with a model trained in the "
        "reverse direction, into a folder of two aligned files: the translations (synthetic sources) and the "
        "original lines (targets). Sampling by default (Edunov et al. 2018: sampled back-translations train better "
        "models than beam-searched ones), seeded. Stopped, it continues where it was on the next run.")
    back.add_argument("--checkpoint", required=True, type=Path, metavar="DIR",
                      help="the reverse model: it translates from the text's language (a run or a checkpoint)")
    back.add_argument("--search", choices=["sample", "beam"], default="sample",
                      help="sample each translation (default) or take the beam search's best")
    distill = subparsers.add_parser(
        "distill", help="translate a corpus's source side with a teacher, for a student to train on",
        description="Sequence-level distillation (Kim & Rush 2016): the teacher's translation of every source line "
        "becomes the student's target, in a folder of two aligned files (the source lines, the translations). "
        "Beam search with the teacher's stored settings by default. Stopped, it continues where it was.")
    distill.add_argument("--teacher", dest="checkpoint", required=True, type=Path, metavar="DIR",
                         help="the teacher (a run, a checkpoint or a final model)")
    distill.set_defaults(search="beam")
    for parser, command in ((back, "backtranslate"), (distill, "distill")):
        parser.add_argument("--input", required=True, type=Path, metavar="FILE",
                            help="one sentence per line, in the model's source language (plain or .gz)")
        parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                            help="the folder for the corpus's two files (written whole at the end; its work folder "
                            "beside it, .DIR.parts, holds the finished chunks meanwhile)")
        parser.add_argument("--chunk-lines", type=ranged(int, ge=1, le=MAX_COUNT), default=CHUNK_LINES, metavar="N",
                            help=f"lines translated and saved at a time: what a stop can lose (default {CHUNK_LINES})")
        add_search_arguments(parser, nbest=False, sampling=command == "backtranslate")
        parser.set_defaults(handler=run, command_name=command)


def run(args: argparse.Namespace) -> int:
    backtranslating = args.command_name == "backtranslate"
    if backtranslating:
        args.sample = args.search == "sample"
    search_config_from_args(args)  # option errors before anything is read
    check_output(args.out, command=args.command_name, writes="folder", kind=SYNTHETIC_KIND, replaces_own=True,
                 inputs=[args.checkpoint, args.input])
    languages = recorded_languages(args.checkpoint)
    _check_language(args.input, languages, backtranslating)
    text = read_text_file(args.input)
    directory = resolve_checkpoint(args.checkpoint)
    stored = StoredSearch.read(directory)
    search = search_config_from_args(args, stored)
    options = engine_options_from_args(args).with_stored(stored)
    corpus = synthesize(args.checkpoint, text, args.out, search, options, backtranslating, args.chunk_lines,
                        args.batch_size, args.max_tokens, args.command_name)
    print(f"{corpus.pairs:,} pairs: --src {corpus.source_file} --tgt {corpus.target_file}")
    return 0


def _check_language(text: Path, languages: LanguagePair | None, backtranslating: bool) -> None:
    """Refuse text whose file name says it is in another language than the one the model translates from."""
    named = code_from_suffix(text)
    if languages is None or named is None or named == languages.source:
        return
    purpose = ("back-translation needs a model that translates from the text's language into the language of your "
               "training sources" if backtranslating else "the teacher must translate from the corpus's source "
               "language")
    raise ConfigError(f"{text} is {language_name(named)} by its name, but the model translates from "
                      f"{language_name(languages.source)} into {language_name(languages.target)}: {purpose}")
