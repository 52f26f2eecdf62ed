"""Command-line options of the search, shared by ``vaswani translate``, ``vaswani evaluate`` and the benchmark."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from vaswani.config import PRECISIONS
from vaswani.decoding.config import SearchConfig, read_stored_search
from vaswani.errors import ConfigError

if TYPE_CHECKING:
    from vaswani.decoding.translator import Translator


DEFAULTS = SearchConfig()


def add_search_arguments(parser: argparse.ArgumentParser, nbest: bool = True) -> None:
    """--beam, --alpha, penalties, length limits, batching, device and precision (and --nbest if ``nbest``).

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
    group.add_argument("--length-norm", choices=["gnmt", "average", "none"], default=None,
                       help="rank finished hypotheses by log P / lp (gnmt), by mean log-prob, or by log P "
                       f"(default: {stored} {d.length_norm})")
    group.add_argument("--max-len-a", type=float, default=None, metavar="A",
                       help=f"output length limit = A * source tokens + B (default: {stored} {d.max_len_a})")
    group.add_argument("--max-len-b", type=int, default=None, metavar="B",
                       help=f"see --max-len-a (default: {stored} {d.max_len_b})")
    group.add_argument("--repetition-penalty", type=float, default=1.0, metavar="X",
                       help="CTRL penalty for tokens already generated; 1 = off (default)")
    group.add_argument("--no-repeat-ngram", type=int, default=0, metavar="N",
                       help="never repeat an n-gram of this size; 0 = off (default)")
    group.add_argument("--batch-size", type=int, default=64, metavar="N", help="sentences per batch (default 64)")
    group.add_argument("--max-tokens", type=int, default=8192, metavar="N",
                       help="padded source tokens x beam per batch (default 8192)")
    group.add_argument("--device", default="auto", help="auto (cuda when available), cpu or cuda (default auto)")
    group.add_argument("--precision", choices=PRECISIONS, default=d.precision,
                       help="autocast precision; auto (default) = bf16 where the device computes it faster than "
                       "fp32, fp32 on CPUs without bf16 units (where bf16 is emulated and many times slower)")
    group.add_argument("--compile", action="store_true",
                       help="compile the decoding step with torch.compile: faster steps after a one-off compile of "
                       "tens of seconds on a CPU (worth it for long files; see results/bench/decode-readme-model.md)")


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
    from vaswani.model.serialization import resolve_checkpoint  # imports torch: only once a checkpoint is named

    return read_stored_search(resolve_checkpoint(checkpoint))


def translator_from_args(args: argparse.Namespace) -> Translator:
    """The :class:`Translator` the options describe (imports torch, so only called by handlers)."""
    from vaswani.decoding.translator import Translator

    return Translator.load(
        args.checkpoint,
        search_config_from_args(args, stored_search(args.checkpoint)),
        device=args.device,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        compile=args.compile,
    )
