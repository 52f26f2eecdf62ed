"""Command-line options of the search, shared by ``vaswani translate``, ``vaswani evaluate`` and the benchmark."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from vaswani.config import PRECISIONS
from vaswani.decoding.config import SearchConfig
from vaswani.errors import ConfigError

if TYPE_CHECKING:
    from vaswani.decoding.translator import Translator


DEFAULTS = SearchConfig()


def add_search_arguments(
    parser: argparse.ArgumentParser, beam: int = DEFAULTS.beam_size, nbest: bool = True
) -> None:
    """--beam, --alpha, penalties, length limits, batching, device and precision (and --nbest if ``nbest``)."""
    d = DEFAULTS
    group = parser.add_argument_group("search")
    group.add_argument("--beam", type=int, default=beam, metavar="N", help=f"beam size; 1 = greedy (default {beam})")
    if nbest:
        group.add_argument("--nbest", type=int, default=1, metavar="N", help="hypotheses per sentence (<= beam)")
    group.add_argument("--alpha", type=float, default=d.alpha, metavar="A",
                       help=f"GNMT length-penalty exponent: lp = ((5 + |Y|) / 6)^A (default {d.alpha})")
    group.add_argument("--length-norm", choices=["gnmt", "average", "none"], default=d.length_norm,
                       help="rank finished hypotheses by log P / lp (gnmt), by mean log-prob, or by log P")
    group.add_argument("--max-len-a", type=float, default=d.max_len_a, metavar="A",
                       help=f"output length limit = A * source tokens + B (default {d.max_len_a})")
    group.add_argument("--max-len-b", type=int, default=d.max_len_b, metavar="B",
                       help=f"see --max-len-a (default {d.max_len_b})")
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


# The option that sets each SearchConfig field, so an invalid value is reported under the name the user typed.
FLAGS = {"beam_size": "--beam", "nbest": "--nbest", "alpha": "--alpha", "length_norm": "--length-norm",
         "max_len_a": "--max-len-a", "max_len_b": "--max-len-b", "repetition_penalty": "--repetition-penalty",
         "no_repeat_ngram": "--no-repeat-ngram"}


def search_config_from_args(args: argparse.Namespace) -> SearchConfig:
    """The SearchConfig the options describe; an invalid option (or batching limit) is a ConfigError naming it."""
    for flag, value in (("--batch-size", args.batch_size), ("--max-tokens", args.max_tokens)):
        if value < 1:
            raise ConfigError(f"{flag} {value}: must be >= 1")
    try:
        return SearchConfig(
            beam_size=args.beam,
            nbest=getattr(args, "nbest", 1),
            alpha=args.alpha,
            length_norm=args.length_norm,
            max_len_a=args.max_len_a,
            max_len_b=args.max_len_b,
            repetition_penalty=args.repetition_penalty,
            no_repeat_ngram=args.no_repeat_ngram,
            precision=args.precision,
        )
    except ConfigError as error:
        name = (error.field or "").removeprefix("search.")
        if name not in FLAGS:
            raise
        value = getattr(args, {"beam_size": "beam"}.get(name, name))
        raise ConfigError(f"{FLAGS[name]} {value}: {error}", field=error.field) from None


def translator_from_args(args: argparse.Namespace) -> Translator:
    """The :class:`Translator` the options describe (imports torch, so only called by handlers)."""
    from vaswani.decoding.translator import Translator

    return Translator.load(
        args.checkpoint,
        search_config_from_args(args),
        device=args.device,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
    )
