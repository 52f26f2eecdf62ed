"""Command-line options of the search and its engine, shared by ``vaswani translate`` and ``vaswani evaluate``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from vaswani.config import MAX_BATCH, MAX_THREADS, PRECISIONS, ranged
from vaswani.decoding.config import ENGINES, QUANTIZATIONS, SearchConfig, read_stored_engine, read_stored_search
from vaswani.decoding.engine import AUTO, TORCH
from vaswani.errors import ConfigError
from vaswani.model.serialization import resolve_checkpoint

if TYPE_CHECKING:
    from vaswani.decoding.translator import Translator


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


# The option that sets each SearchConfig field, so an invalid value is reported under the name the user typed.
FLAGS = {"beam_size": "--beam", "nbest": "--nbest", "alpha": "--alpha", "length_norm": "--length-norm",
         "max_len_a": "--max-len-a", "max_len_b": "--max-len-b", "repetition_penalty": "--repetition-penalty",
         "no_repeat_ngram": "--no-repeat-ngram"}


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
    try:
        return SearchConfig(
            **values,
            nbest=getattr(args, "nbest", 1),
            repetition_penalty=args.repetition_penalty,
            no_repeat_ngram=args.no_repeat_ngram,
            precision=args.precision,
        )
    except ConfigError as error:
        name = (error.field or "").removeprefix("search.")
        if name not in FLAGS:
            raise
        value = values.get(name, getattr(args, name, None))
        raise ConfigError(f"{FLAGS[name]} {value}: {error}", field=error.field) from None


def stored_search(checkpoint: str) -> dict:
    """The search settings stored with a checkpoint (or a run directory's final/best/last checkpoint)."""
    return read_stored_search(resolve_checkpoint(checkpoint))


def engine_choice(engine: str | None, quantization: str | None, stored: dict[str, str]) -> tuple[str, str | None]:
    """(engine, quantization) as given (None: not given), else as stored with the checkpoint (search.json), else
    auto and CTranslate2's default. A quantization given for the torch engine is an error naming it."""
    chosen = engine or stored.get("engine") or AUTO
    if chosen == TORCH and quantization is not None:
        raise ConfigError(f"--quantization {quantization} applies to the ctranslate2 engine; the torch engine "
                          "computes in --precision (use --engine ctranslate2 or auto)")
    return chosen, quantization or stored.get("quantization")


def translator_from_args(args: argparse.Namespace) -> Translator:
    """The :class:`Translator` the options describe, on the engine they choose (only called by handlers)."""
    from vaswani.decoding.translator import Translator

    directory = resolve_checkpoint(args.checkpoint)
    engine, quantization = engine_choice(args.engine, args.quantization, read_stored_engine(directory))
    return Translator.load(
        directory,
        search_config_from_args(args, read_stored_search(directory)),
        device=args.device,
        engine=engine,
        quantization=quantization,
        threads=args.threads,
        compile=args.compile,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
    )
