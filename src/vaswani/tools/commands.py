"""``vaswani serve-bench``: the bounded loopback load test of ``vaswani serve`` (:mod:`vaswani.tools.serve_load`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from vaswani.arguments import ranged
from vaswani.serve.commands import add_engine_arguments
from vaswani.settings import MAX_COUNT, MAX_LENGTH, MAX_THREADS


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser(
        "serve-bench",
        help="load-test the server on loopback: 1/8/32 clients, with and without batching, thread layouts -> --out",
        description="Start `vaswani serve` on 127.0.0.1 (with and without request batching, and once per thread "
        "layout), drive it with N concurrent clients for a fixed duration each, measure the ceilings (GET /health, "
        "the model without HTTP, a bare CTranslate2 script) in the same run, and write sentences/s, latency "
        "percentiles and errors to results.json, table.md, README.md and a plot. Stops by itself.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    bench.add_argument("--checkpoint", required=True, metavar="DIR")
    bench.add_argument("--clients", type=ranged(int, ge=1, le=MAX_THREADS), nargs="+", default=[1, 8, 32],
                       help="concurrency levels")
    bench.add_argument("--seconds", type=ranged(float, gt=0), default=20.0, help="duration of each run")
    bench.add_argument("--repeats", type=ranged(int, ge=1, le=MAX_COUNT), default=2,
                       help="runs per level and server, interleaved A B, B A, …")
    bench.add_argument("--beam", type=ranged(int, ge=1, le=MAX_LENGTH), default=4, help="beam of every request")
    bench.add_argument("--sentences", type=ranged(int, ge=1, le=MAX_COUNT), default=500,
                       help="test sentences cycled through by the clients")
    bench.add_argument("--layouts", nargs="*", default=None, metavar="WxPxT",
                       help="thread layouts compared at the largest level: workers x parallel batches x "
                       "threads per batch (default: every split of the usable cores, and 1x1x1; for the "
                       "torch engine those of one batch at a time); none: skip the comparison")
    bench.add_argument("--data-dir", type=Path, default=None, help="corpora (default: $VASWANI_DATA)")
    bench.add_argument("--out", type=Path, default=None,
                       help="results folder (default runs/serve-bench; the repository's results/ only when named "
                       "here)")
    add_engine_arguments(bench)
    bench.set_defaults(handler=bench_command)


def bench_command(args: argparse.Namespace) -> int:
    from vaswani.decoding.config import EngineOptions
    from vaswani.io import check_output
    from vaswani.serve.commands import engine_flags
    from vaswani.serve.settings import ServeSettings
    from vaswani.tools.serve_layouts import parse_layouts
    from vaswani.tools.serve_load import run_load_test

    layouts = parse_layouts(args.layouts)
    explicit = args.out is not None
    args.out = args.out if explicit else Path("runs") / "serve-bench"
    check_output(args.out, command="serve-bench", writes="files", inputs=[args.checkpoint, args.data_dir],
                 explicit=explicit)
    options = EngineOptions(engine=args.engine, quantization=args.quantization, threads=args.threads)
    settings = ServeSettings(engine_options=options, parallel_batches=args.parallel_batches)
    run_load_test(args.checkpoint, args.clients, args.seconds, args.beam, args.sentences, args.out,
                  data_dir=args.data_dir, repeats=args.repeats, engine_flags=engine_flags(args), settings=settings,
                  layouts=layouts)
    return 0
