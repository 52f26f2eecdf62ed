"""The server's limits and batching knobs, one dataclass (no torch or FastAPI import: the CLI builds it cheaply)."""

from __future__ import annotations

from dataclasses import dataclass, field

from vaswani.decoding.config import EngineOptions
from vaswani.errors import ConfigError
from vaswani.settings import Limit, validate_settings

# A sentence waits this long for company before its batch starts: beyond a second the wait, not the search,
# would be most of every request's latency (and an endless wait, `inf`, would answer no request at all).
MAX_BATCH_WAIT_MS = 1000.0


@dataclass
class ServeSettings:
    # ---- limits: what a request may ask for ----
    max_chars: int = 1000  # characters per text
    max_texts: int = 32  # texts per /v1/translate request
    max_body_bytes: int = 65_536  # request body; larger bodies get 413 before any parsing
    max_queue: int = 256  # sentences waiting for the model; beyond it, 503 + Retry-After
    max_beam: int = 8  # the widest beam a request may ask for
    # The decode work one request may ask for, as source tokens × beam summed over its texts: what the search's
    # memory and time grow with. Above it the request is refused (422) instead of holding the model for a minute.
    max_request_tokens: int = 8192
    # What one /v1/attention answer may hold, in bytes of JSON, bounded before the search from the most it can
    # hold (every layer and head, for the longest translation the request's length limit allows): a long text
    # at a loose limit would otherwise answer with hundreds of megabytes.
    max_attention_bytes: int = 16 << 20
    # ---- batching ----
    batching: bool = True  # False: every sentence is searched on its own, in arrival order
    # A ceiling, not a delay: how long a free model slot may hold the oldest waiting sentence for company before it
    # searches a batch that is not full. 0: an idle model searches at once; what arrives meanwhile forms the next.
    batch_wait_ms: float = 0.0
    max_batch_sentences: int = 64  # bounded batch: later arrivals wait at most a few batches
    max_batch_tokens: int = 6144  # padded source tokens × beam per batch (the Translator's token budget)
    # ---- compute ----
    # The engine and what it runs on. An engine and quantization not chosen: the checkpoint's search.json, else auto
    # (ctranslate2 when it can); ``threads`` 0: chosen for the machine's cores (thread_layout), else the threads of
    # every worker together; ``compile`` compiles the torch engine's decoding step once, at start-up.
    engine_options: EngineOptions = field(default_factory=lambda: EngineOptions(engine=None, threads=0))
    # ---- processes (see thread_layout) ----
    workers: int = 1  # processes behind the one port, each with its own engine and an even share of the threads
    parallel_batches: int | None = None  # batches one worker searches at once; None: chosen (thread_layout)

    SECTION = "serve"
    LIMITS = {
        **{name: Limit(ge=1) for name in ("max_chars", "max_texts", "max_body_bytes", "max_queue", "max_beam",
                                          "max_request_tokens", "max_attention_bytes", "max_batch_sentences",
                                          "max_batch_tokens",
                                          "workers", "parallel_batches")},
        "batch_wait_ms": Limit(ge=0, le=MAX_BATCH_WAIT_MS),
    }

    def __post_init__(self) -> None:
        validate_settings(self)  # types, finite numbers (no inf or nan), LIMITS

    @property
    def sentences_per_batch(self) -> int:
        return self.max_batch_sentences if self.batching else 1

    @property
    def wait_seconds(self) -> float:
        return self.batch_wait_ms / 1000 if self.batching else 0.0


@dataclass(frozen=True)
class ThreadLayout:
    """How the engines of the server spend its CPU threads: ``workers`` processes, each searching
    ``parallel_batches`` batches at once, each batch on ``threads_per_batch`` engine threads."""

    workers: int
    parallel_batches: int
    threads_per_batch: int

    @property
    def threads(self) -> int:
        return self.workers * self.parallel_batches * self.threads_per_batch


def thread_layout(settings: ServeSettings, cores: int, batches_at_once: bool = True) -> ThreadLayout:
    """The layout ``settings`` ask for on a machine with ``cores`` usable cores. The engine's ``threads`` (0: the
    cores) are split evenly between the workers, and each worker's share between its parallel batches (default: one
    batch per thread, :data:`THREADS_PER_BATCH`); too few threads to give each at least one is a ConfigError naming
    the settings. ``batches_at_once`` False (the torch engine, whose threads are the process's): one batch at a time
    on the worker's share unless ``parallel_batches`` says otherwise."""
    workers = settings.workers
    threads = settings.engine_options.threads or max(cores, workers)
    if threads < workers:
        raise ConfigError(f"`threads` {threads}: fewer than `serve.workers` {workers}; give each worker at least one "
                          "thread", field="threads")
    per_worker = threads // workers
    parallel = settings.parallel_batches
    if parallel is None:
        parallel = max(1, per_worker // THREADS_PER_BATCH) if batches_at_once else 1
    if parallel > per_worker:
        raise ConfigError(f"`serve.parallel_batches` {parallel}: more than the {per_worker} thread(s) of each worker "
                          f"(`threads` {threads} over `serve.workers` {workers}); give each batch at least one "
                          "thread", field="serve.parallel_batches")
    return ThreadLayout(workers, parallel, per_worker // parallel)


# The engine threads of one batch when the server chooses: batches searched side by side on one thread each served
# more, on 2 shared cores, than one batch at a time on both threads, whose threads wait for each other while the
# HTTP work and the load generator hold a core (results/engines/serve/table.md, thread layouts). On more cores this
# is an extrapolation: `vaswani serve-bench` compares every layout of the machine it runs on.
THREADS_PER_BATCH = 1
