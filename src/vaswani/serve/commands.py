"""``vaswani serve``: the HTTP API and web page, in one process or several workers behind one port."""

from __future__ import annotations

import argparse
import errno
import signal
import socket

from vaswani.arguments import ranged
from vaswani.decoding.commands import engine_options_from_args
from vaswani.decoding.config import ENGINES, QUANTIZATIONS
from vaswani.errors import ConfigError, EnvironmentFault, VaswaniError
from vaswani.provenance import usable_cores
from vaswani.serve.settings import ServeSettings, thread_layout
from vaswani.settings import MAX_BATCH, MAX_LENGTH, MAX_THREADS

DEFAULTS = ServeSettings()


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per :class:`ServeSettings` field (shared by serve and serve-bench)."""
    d = DEFAULTS
    limits = parser.add_argument_group("limits")
    limits.add_argument("--max-chars", type=ranged(int, le=MAX_LENGTH), default=d.max_chars, help="characters per text")
    limits.add_argument("--max-texts", type=ranged(int, le=MAX_BATCH), default=d.max_texts,
                        help="texts per /v1/translate request")
    limits.add_argument("--max-body-bytes", type=ranged(int, le=MAX_BATCH * 64), default=d.max_body_bytes,
                        help="request body size (413 above)")
    limits.add_argument("--max-queue", type=ranged(int, le=MAX_BATCH), default=d.max_queue,
                        help="sentences waiting for the model (503 + Retry-After above)")
    limits.add_argument("--max-beam", type=ranged(int, le=MAX_LENGTH), default=d.max_beam,
                        help="widest beam a request may ask for")
    limits.add_argument("--max-request-tokens", type=ranged(int, le=MAX_BATCH), default=d.max_request_tokens,
                        help="decode work of one request: source tokens x beam, summed over its texts (422 above)")
    limits.add_argument("--max-attention-bytes", type=ranged(int, le=MAX_BATCH * 1024),
                        default=d.max_attention_bytes,
                        help="the most JSON one /v1/attention answer may hold, judged before the search from "
                        "its longest translation (422 above)")
    batching = parser.add_argument_group("batching")
    batching.add_argument("--batching", action=argparse.BooleanOptionalAction, default=d.batching,
                          help="gather concurrent requests into one batch (--no-batching: one sentence at a time)")
    batching.add_argument("--batch-wait-ms", type=float, default=d.batch_wait_ms,
                          help="a ceiling: how long an idle model may hold the oldest waiting sentence for company "
                          "(0: search at once; what arrives during a search forms the next batch)")
    batching.add_argument("--max-batch-sentences", type=ranged(int, le=MAX_BATCH), default=d.max_batch_sentences)
    batching.add_argument("--max-batch-tokens", type=ranged(int, le=MAX_BATCH), default=d.max_batch_tokens,
                          help="padded source tokens x beam per batch")
    add_engine_arguments(parser)
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when available")
    parser.add_argument("--compile", action="store_true",
                        help="compile the torch engine's decoding step with torch.compile at start-up: tens of seconds "
                        "before the server is ready on a CPU, faster decoding after "
                        "(results/bench/decode-readme-model.md)")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """--engine, --quantization, --workers, --threads and --parallel-batches (shared by serve and serve-bench)."""
    parser.add_argument("--engine", choices=ENGINES, default=None,
                        help="torch, ctranslate2 (the checkpoint converted once, next to it), or auto: ctranslate2 "
                        "when it can run the model and its search (default: the checkpoint's search.json, else auto)")
    parser.add_argument("--quantization", choices=QUANTIZATIONS, default=None,
                        help="ctranslate2's weights and arithmetic (default: the checkpoint's search.json, else "
                        "float32)")
    parser.add_argument("--workers", type=ranged(int, ge=1, le=MAX_THREADS), default=DEFAULTS.workers,
                        help="processes behind the one port, each with its own engine and its share of --threads")
    parser.add_argument("--threads", type=ranged(int, ge=0, le=MAX_THREADS), default=0,
                        help="CPU threads of the engines, all workers together; 0: the machine's usable cores "
                        "(docs/serving.md, workers and threads)")
    parser.add_argument("--parallel-batches", type=ranged(int, ge=1, le=MAX_THREADS), default=None,
                        help="batches each worker searches at once, each on its share of the worker's threads "
                        "(ctranslate2; default: one per thread)")


def engine_flags(args: argparse.Namespace) -> list[str]:
    """The flags of :func:`add_engine_arguments` the user gave, to pass on to a `vaswani serve` process."""
    given = [("--engine", args.engine), ("--quantization", args.quantization), ("--threads", args.threads or None),
             ("--parallel-batches", args.parallel_batches)]
    if args.workers != DEFAULTS.workers:
        given.append(("--workers", args.workers))
    return [str(part) for flag, value in given if value is not None for part in (flag, value)]


def settings_from_args(args: argparse.Namespace) -> ServeSettings:
    return ServeSettings(
        max_chars=args.max_chars, max_texts=args.max_texts, max_body_bytes=args.max_body_bytes,
        max_queue=args.max_queue, max_beam=args.max_beam, max_request_tokens=args.max_request_tokens,
        max_attention_bytes=args.max_attention_bytes,
        batching=args.batching, batch_wait_ms=args.batch_wait_ms, max_batch_sentences=args.max_batch_sentences,
        max_batch_tokens=args.max_batch_tokens, engine_options=engine_options_from_args(args),
        workers=args.workers, parallel_batches=args.parallel_batches,
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve a checkpoint over HTTP: JSON API, request batching, and a page that shows the attention",
        description="Serve a trained checkpoint: POST /v1/translate, POST /v1/attention, GET /v1/model, "
        "GET /health, the OpenAPI page at /docs and the attention page at /. Needs the serve extra "
        "(pip install -e '.[serve]'). SIGTERM or Ctrl-C finishes the requests in flight, then exits.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint directory or run directory")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=ranged(int, ge=1, le=65535), default=8000)
    add_settings_arguments(parser)
    parser.add_argument("--force-workers", action="store_true",
                        help="start --workers N even when N is more than the usable cores (each worker "
                        "holds a model and competes for the same cores)")
    parser.set_defaults(handler=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    try:
        import uvicorn
    except ModuleNotFoundError:
        raise VaswaniError("serving needs FastAPI and uvicorn: pip install -e '.[serve]'") from None

    settings = settings_from_args(args)
    cores = usable_cores()
    if settings.workers > cores and not args.force_workers:
        raise ConfigError(f"--workers {settings.workers}: more than the {cores} core(s) this process may "
                          "use; each worker holds a model and they would compete for the same cores, so give "
                          f"at most {cores} (or --force-workers to start them anyway)")
    thread_layout(settings, cores)  # a split of the threads that cannot be made is refused before listening
    # Claim the address first (milliseconds, before even torch is imported), then load the model (seconds, minutes
    # with --compile): a port in use is reported at once, and any problem of the checkpoint is the one-line error
    # translate gives, not a failed start-up inside uvicorn.
    listener = listening_socket(args.host, args.port)
    address = f"http://{args.host}:{args.port}/"
    stopped_by = None
    try:
        if settings.workers > 1:
            from vaswani.serve.workers import serve_workers

            stopped_by = serve_workers(listener, args.checkpoint, settings, address)
            return 0
        from vaswani.serve.app import create_app, load_served_model

        served = load_served_model(args.checkpoint, settings)
        print(f"vaswani serve: {address}  (API docs at /docs)", flush=True)
        # uvicorn handles SIGTERM/SIGINT: stop accepting, finish the requests in flight, run the shutdown, exit.
        config = uvicorn.Config(create_app(served, settings), host=args.host, port=args.port, log_level="info",
                                timeout_graceful_shutdown=30)
        try:
            uvicorn.Server(config).run(sockets=[listener])
        except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it handled once its shutdown is complete
            pass
    finally:
        listener.close()
        if stopped_by == signal.SIGTERM:
            # One worker's uvicorn raises the SIGTERM it drained on again once it is done, so the server ends
            # "terminated by SIGTERM"; several workers end the same way, whatever their number.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)
    return 0


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (as uvicorn binds it: IPv6 when the host has a colon), or a one-line
    error naming --host or --port: a name that does not resolve, an address of another machine, a port in use."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        address = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)[0][4]
    except (socket.gaierror, UnicodeError) as error:
        reason = error.strerror if isinstance(error, socket.gaierror) else str(error)
        raise ConfigError(f"--host {host}: cannot be resolved ({reason}); give an address of this machine, e.g. "
                          "127.0.0.1 (this machine only) or 0.0.0.0 (every interface)") from None
    # IPPROTO_TCP named, not left 0: asyncio switches Nagle's algorithm off (TCP_NODELAY) only on sockets that say
    # they are TCP, and with it on, each answer written in two pieces waits ~40 ms for the client's delayed ACK.
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a restart need not wait
    try:
        listener.bind(address)
    except OSError as error:
        listener.close()
        if error.errno == errno.EADDRINUSE:
            raise EnvironmentFault(f"--port {port}: {host}:{port} is already in use; stop what listens there or "
                                   "choose another --port") from None
        if error.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(f"--host {host}: not an address of this machine; give one of its addresses, e.g. "
                              "127.0.0.1 or 0.0.0.0") from None
        if error.errno == errno.EACCES:
            raise EnvironmentFault(f"--port {port}: not allowed to listen on it (ports below 1024 need "
                                   "privileges); choose --port 1024 or above") from None
        raise EnvironmentFault(f"cannot listen on {host}:{port} ({error.strerror or error})") from None
    return listener
