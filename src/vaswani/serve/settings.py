"""The server's limits and batching knobs, one dataclass (no torch or FastAPI import: the CLI builds it cheaply)."""

from __future__ import annotations

from dataclasses import dataclass, field

from vaswani.config import Limit, validate_settings
from vaswani.decoding.config import EngineOptions

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
    # ---- batching ----
    batching: bool = True  # False: every sentence is searched on its own, in arrival order
    batch_wait_ms: float = 5.0  # how long the first waiting sentence waits for others to join its batch
    max_batch_sentences: int = 64  # bounded batch: later arrivals wait at most a few batches
    max_batch_tokens: int = 6144  # padded source tokens × beam per batch (the Translator's token budget)
    # ---- compute ----
    # The engine and what it runs on. An engine and quantization not chosen: the checkpoint's search.json, else
    # auto (ctranslate2 when it can); one CPU thread for the one model thread; ``compile`` compiles the torch
    # engine's decoding step once, at start-up.
    engine_options: EngineOptions = field(default_factory=lambda: EngineOptions(engine=None, threads=1))

    SECTION = "serve"
    LIMITS = {
        **{name: Limit(ge=1) for name in ("max_chars", "max_texts", "max_body_bytes", "max_queue", "max_beam",
                                          "max_request_tokens", "max_batch_sentences", "max_batch_tokens")},
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
