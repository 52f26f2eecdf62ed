"""``vaswani translate``: text in the model's source language in (stdin, a file, or typed interactively), its
translation out; ``vaswani score``: given translations' log-probabilities, and the pairs a threshold
keeps; and the search and engine options that ``vaswani evaluate`` shares."""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from vaswani.arguments import ranged
from vaswani.data.textfiles import STANDARD_INPUT, read_lines, read_stream_lines, unicode_problem
from vaswani.decoding.config import (
    ENGINES,
    QUANTIZATIONS,
    EngineOptions,
    SearchConfig,
    StoredSearch,
)
from vaswani.decoding.engine import AUTO
from vaswani.decoding.terminology import read_constraints
from vaswani.errors import ConfigError
from vaswani.io import atomic_write_text, check_output, standard_stream
from vaswani.model.serialization import resolve_checkpoint
from vaswani.settings import MAX_BATCH, MAX_THREADS, PRECISIONS

if TYPE_CHECKING:  # the translator imports torch; the parser is built without it
    from vaswani.decoding.scoring import PairScore
    from vaswani.decoding.translator import Translation, Translator


DEFAULTS = SearchConfig()


def add_search_arguments(parser: argparse.ArgumentParser, nbest: bool = True, sampling: bool = False) -> None:
    """--beam, --alpha, penalties, length limits, batching, the engine, device and precision (and --nbest if
    ``nbest``, the sampling options if ``sampling``).

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
    if sampling:
        add_sampling_arguments(parser)
    add_engine_arguments(parser)


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """--sample, --top-k, --top-p, --temperature, --seed."""
    group = parser.add_argument_group("sampling")
    group.add_argument("--sample", action="store_true",
                       help="draw each token from the model's distribution instead of searching (--beam 1; "
                       "--nbest N draws N translations per sentence)")
    group.add_argument("--top-k", type=ranged(int, ge=0, le=1_000_000), default=0, metavar="K",
                       help="draw from the K most probable tokens only; 0 = all (default)")
    group.add_argument("--top-p", type=ranged(float, gt=0, le=1), default=1.0, metavar="P",
                       help="draw from the smallest set of tokens holding probability P; 1 = all (default)")
    group.add_argument("--temperature", type=ranged(float, ge=0.01, le=100), default=1.0, metavar="T",
                       help="divide the log-probabilities by T before drawing: < 1 sharper, > 1 flatter "
                       "(default 1)")
    group.add_argument("--seed", type=ranged(int, ge=0, lt=2**63), default=0, metavar="N",
                       help="the draws' seed: the same seed, input and batching draw the same translations "
                       "(ctranslate2: in a fresh process, as each run of this command is) (default 0)")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """--engine, --quantization, --threads, --device, --precision, --compile."""
    d = DEFAULTS
    stored = "the checkpoint's search.json, else"
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


def search_config_from_args(args: argparse.Namespace, stored: StoredSearch | None = None) -> SearchConfig:
    """The SearchConfig the options describe, on top of ``stored`` settings (a checkpoint's search.json) or the
    defaults; an invalid option (or batching limit) is a ConfigError naming it. Reads no file, so commands call it
    first to report option errors before any work."""
    for flag, value in (("--batch-size", args.batch_size), ("--max-tokens", args.max_tokens)):
        if value < 1:
            raise ConfigError(f"{flag} {value}: must be >= 1")
    given = {name: getattr(args, option) for name, option in STORED_OPTIONS.items()
             if getattr(args, option) is not None}
    config = _search_config(args, given)  # an invalid option is reported under its flag, stored file or not
    return _search_config(args, {**stored.settings, **given}) if stored is not None else config


def _search_config(args: argparse.Namespace, values: dict[str, int | float | str]) -> SearchConfig:
    sampling = {}
    if getattr(args, "sample", False):  # a draw needs no beam: the stored one does not apply
        sampling = dict(sample=True, top_k=args.top_k, top_p=args.top_p, temperature=args.temperature,
                        seed=args.seed, beam_size=1 if args.beam is None else args.beam)
    elif hasattr(args, "sample"):
        sampling = dict(top_k=args.top_k, top_p=args.top_p, temperature=args.temperature)
    return SearchConfig(**{**values, **sampling}, nbest=getattr(args, "nbest", 1),
                        repetition_penalty=args.repetition_penalty, no_repeat_ngram=args.no_repeat_ngram,
                        precision=args.precision)


def translator_from_args(args: argparse.Namespace) -> Translator:
    """The :class:`Translator` the options describe, on the engine they choose (only called by handlers)."""
    from vaswani.decoding.translator import Translator  # imports the engines' modules: not for the parser

    checkpoints = args.checkpoint if isinstance(args.checkpoint, list) else [args.checkpoint]
    weights = getattr(args, "weights", None)
    directory = resolve_checkpoint(checkpoints[0])  # the first checkpoint's stored search for an ensemble
    if weights is not None and len(weights) != len(checkpoints):
        raise ConfigError(f"--weights gives {len(weights)} weights for {len(checkpoints)} checkpoints: give one per "
                          "--checkpoint")
    stored = StoredSearch.read(directory)
    search, options = search_config_from_args(args, stored), engine_options_from_args(args).with_stored(stored)
    if len(checkpoints) > 1 or weights is not None:
        return Translator.load_ensemble(checkpoints, search, options, weights, batch_size=args.batch_size,
                                        max_tokens=args.max_tokens)
    return Translator.load(directory, search, options, prefixed=getattr(args, "prefix", None) is not None,
                           constrained=_constrained(args), batch_size=args.batch_size, max_tokens=args.max_tokens)


def _constrained(args: argparse.Namespace) -> bool:
    return getattr(args, "constraints", None) is not None or getattr(args, "glossary", None) is not None


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
    parser.add_argument("--checkpoint", required=True, metavar="DIR", action="append",
                        help="checkpoint directory or run directory; repeated: an ensemble of them (their "
                        "log-probabilities averaged at every step, on the torch engine; one tokenizer)")
    parser.add_argument("--weights", type=ranged(float, gt=0), nargs="+", metavar="W",
                        help="an ensemble's weights, one per --checkpoint, in their order (default equal)")
    parser.add_argument("--input", type=Path, metavar="FILE", help="source sentences, one per line (default stdin)")
    parser.add_argument("--output", type=Path, metavar="FILE", help="translations (default stdout)")
    parser.add_argument("--prefix", type=Path, metavar="FILE",
                        help="the start of each translation, one line per input line (an empty line: none); "
                        "the search completes it (ctranslate2: greedy search only)")
    parser.add_argument("--constraints", type=Path, metavar="FILE",
                        help="phrases each translation must contain, one line per input line, phrases separated "
                        "by a tab (an empty line: none); placed by constrained beam search (engine torch)")
    parser.add_argument("--glossary", type=Path, metavar="FILE",
                        help="'source term<TAB>target term' per line: the target term is a constraint of every "
                        "input line that contains the source term as whole words (with --constraints: both)")
    parser.add_argument("--alignments", action="store_true",
                        help="add each translation's word alignment to the source, Pharaoh 'i-j' pairs "
                        "(source word i, target word j, from 0), after ' ||| ' (from the cross-attention of "
                        "the penultimate decoder layer, averaged over its heads)")
    add_search_arguments(parser, sampling=True)
    parser.set_defaults(handler=translate_command)
    register_score(subparsers)


def translate_command(args: argparse.Namespace) -> int:
    # Everything the user gave is checked before the model is loaded and the input translated.
    search_config_from_args(args)
    if args.output is None:
        standard_stream("stdout", "pass --output FILE")
    else:
        check_output(args.output, command="translate", writes="file",
                     inputs=[*args.checkpoint, args.input, args.prefix, args.constraints, args.glossary],
                     option="--output")
    stdin = standard_stream("stdin", "pass --input FILE") if args.input is None else None
    interactive = stdin is not None and stdin.isatty()
    if interactive and args.prefix is not None:
        raise ConfigError("--prefix gives one line per input line: pass --input FILE (or pipe the input)")
    if interactive and _constrained(args):
        raise ConfigError("--constraints and --glossary apply to an input file: pass --input FILE (or pipe the "
                          "input)")
    if not interactive:
        # The one way evaluate and prepare read text too: same lines, same byte-order mark and UTF-8 handling.
        lines = read_lines(args.input) if stdin is None else read_stream_lines(stdin)
    prefixes = read_lines(args.prefix) if args.prefix is not None else None
    phrases = read_constraints(args.constraints, args.glossary, lines) if _constrained(args) else None
    translator = translator_from_args(args)
    if interactive:
        from vaswani.data.languages import language_name, recorded_languages

        languages = recorded_languages(args.checkpoint[0])
        return _interactive(translator, args.nbest, language_name(languages.source) if languages else None,
                            args.alignments)
    # The progress of a file being translated: a bar on a terminal, a line now and then in a log.
    progress = args.input is not None
    if prefixes is None and phrases is None:
        nbest = translator.translate_nbest(lines, progress=progress, alignments=args.alignments)
    else:
        sources = translator.encode(lines)
        forced = translator.encode_prefixes(prefixes, sources, name=str(args.prefix)) \
            if prefixes is not None else None
        constraints = translator.encode_constraints(phrases, sources, str(args.constraints or args.glossary)) \
            if phrases is not None else None
        nbest = translator.translate_ids_nbest(sources, progress, forced, args.alignments, constraints)
    if args.output is None:
        _write(sys.stdout, nbest, args.nbest)
    else:
        buffer = io.StringIO()
        _write(buffer, nbest, args.nbest)
        atomic_write_text(args.output, buffer.getvalue())
    return 0


def _write(out: TextIO, nbest: list[list[Translation]], n: int, offset: int = 0) -> None:
    """One line per sentence, or Moses-style ``i ||| hypothesis ||| score`` lines when n-best was asked for;
    an alignment, when there is one, follows as a last field."""
    for i, hypotheses in enumerate(nbest, start=offset):
        if n == 1:
            h = hypotheses[0]
            out.write(h.text + (f" ||| {h.alignment}" if h.alignment is not None else "") + "\n")
        else:
            for h in hypotheses:
                aligned = f" ||| {h.alignment}" if h.alignment is not None else ""
                out.write(f"{i} ||| {h.text} ||| {h.score:.4f}{aligned}\n")


def _interactive(translator: Translator, n: int, source_language: str | None = None,
                 alignments: bool = False) -> int:
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
        _write(sys.stdout, translator.translate_nbest([line], alignments=alignments), n, offset=count)
        sys.stdout.flush()
        count += 1


# ---- vaswani score --------------------------------------------------------------------------------------
SCORE_FORMATS = ("tsv", "jsonl")
TSV_COLUMNS = ("score", "log_prob", "per_token", "tokens")


def register_score(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "score",
        help="score given translations: each pair's log-probability under the model (--min-score filters)",
        description="One line per pair of --src and --tgt: its length-normalised score (as the search ranks "
        "hypotheses), summed log-probability (the target's tokens and </s>), mean log-probability per token, "
        "and token count; TSV in that order, or JSON lines. With --min-score, the pairs scoring at or above "
        "it are written to --kept-src and --kept-tgt.",
    )
    parser.add_argument("--checkpoint", required=True, metavar="DIR",
                        help="checkpoint directory or run directory")
    parser.add_argument("--src", required=True, type=Path, metavar="FILE",
                        help="source sentences, one per line")
    parser.add_argument("--tgt", required=True, type=Path, metavar="FILE",
                        help="their translations, one per line (line i translates line i of --src)")
    parser.add_argument("--output", type=Path, metavar="FILE", help="the scores (default stdout)")
    parser.add_argument("--format", choices=SCORE_FORMATS, default="tsv",
                        help="tsv: score, log_prob, per_token, tokens separated by tabs (default); jsonl: "
                        "one JSON object per line with those keys")
    parser.add_argument("--min-score", type=ranged(float), default=None, metavar="X",
                        help="keep the pairs whose score is at least X (needs --kept-src and --kept-tgt)")
    parser.add_argument("--kept-src", type=Path, metavar="FILE", help="the kept pairs' sources")
    parser.add_argument("--kept-tgt", type=Path, metavar="FILE", help="the kept pairs' targets")
    d = DEFAULTS
    stored = "the checkpoint's search.json, else"
    group = parser.add_argument_group("normalisation and batching")
    group.add_argument("--alpha", type=ranged(float, ge=0, le=5), default=None, metavar="A",
                       help=f"length-penalty exponent of the score (default: {stored} {d.alpha})")
    group.add_argument("--length-norm", choices=["gnmt", "power", "average", "none"], default=None,
                       help="the score's length normalisation, as translate's (default: "
                       f"{stored} {d.length_norm})")
    group.add_argument("--batch-size", type=ranged(int, le=MAX_BATCH), default=64, metavar="N",
                       help="pairs per batch (default 64)")
    group.add_argument("--max-tokens", type=ranged(int, le=MAX_BATCH), default=8192, metavar="N",
                       help="padded source tokens per batch (default 8192)")
    add_engine_arguments(parser)
    parser.set_defaults(handler=score_command)


def score_config_from_args(args: argparse.Namespace, stored: StoredSearch | None = None) -> SearchConfig:
    """The normalisation the options give, on top of ``stored`` (a search.json); nothing is searched
    (beam 1)."""
    for flag, value in (("--batch-size", args.batch_size), ("--max-tokens", args.max_tokens)):
        if value < 1:
            raise ConfigError(f"{flag} {value}: must be >= 1")
    names = ("alpha", "length_norm")
    given = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    known = {name: value for name, value in (stored.settings if stored is not None else {}).items() if name in names}
    return SearchConfig(beam_size=1, precision=args.precision, **{**known, **given})


def score_command(args: argparse.Namespace) -> int:
    # Everything the user gave is checked before the model is loaded.
    score_config_from_args(args)
    kept = (args.kept_src, args.kept_tgt)
    if args.min_score is not None and None in kept:
        raise ConfigError("--min-score writes the pairs it keeps: give --kept-src FILE and --kept-tgt FILE")
    if args.min_score is None and kept != (None, None):
        raise ConfigError("--kept-src and --kept-tgt are the pairs --min-score keeps: give --min-score X")
    inputs = [args.checkpoint, args.src, args.tgt]
    outputs = [(path, flag) for path, flag in ((args.output, "--output"), (args.kept_src, "--kept-src"),
                                                (args.kept_tgt, "--kept-tgt")) if path is not None]
    if len({path.resolve() for path, _ in outputs}) < len(outputs):
        raise ConfigError("--output, --kept-src and --kept-tgt must be different files")
    for path, flag in outputs:
        check_output(path, command="score", writes="file", inputs=inputs, option=flag)
    if args.output is None:
        standard_stream("stdout", "pass --output FILE")
    sources, targets = read_lines(args.src), read_lines(args.tgt)
    from vaswani.decoding.translator import Translator  # imports the engines' modules: not for the parser

    directory = resolve_checkpoint(args.checkpoint)
    stored = StoredSearch.read(directory)
    translator = Translator.load(directory, score_config_from_args(args, stored),
                                 engine_options_from_args(args).with_stored(stored),
                                 batch_size=args.batch_size, max_tokens=args.max_tokens)
    scores = translator.score(sources, targets, progress=True, names=(str(args.src), str(args.tgt)))
    text = "".join(_score_line(score, args.format) for score in scores)
    if args.output is None:
        sys.stdout.write(text)
    else:
        atomic_write_text(args.output, text)
    if args.min_score is not None:
        keep = [i for i, score in enumerate(scores) if score.score >= args.min_score]
        atomic_write_text(args.kept_src, "".join(sources[i] + "\n" for i in keep))
        atomic_write_text(args.kept_tgt, "".join(targets[i] + "\n" for i in keep))
        print(f"kept {len(keep)} of {len(scores)} pairs (score >= {args.min_score:g})", file=sys.stderr)
    return 0


def _score_line(score: PairScore, form: str) -> str:
    values = score.as_dict()
    if form == "jsonl":
        return json.dumps(values) + "\n"
    return "\t".join(f"{values[name]:.6f}" if isinstance(values[name], float) else str(values[name])
                     for name in TSV_COLUMNS) + "\n"
