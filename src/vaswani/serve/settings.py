"""The server's limits and batching knobs, one dataclass (no torch or FastAPI import: the CLI builds it cheaply)."""

from __future__ import annotations

from dataclasses import dataclass

from vaswani.errors import ConfigError


@dataclass
class ServeSettings:
    # ---- limits: what a request may ask for ----
    max_chars: int = 1000  # characters per text
    max_texts: int = 32  # texts per /v1/translate request
    max_body_bytes: int = 65_536  # request body; larger bodies get 413 before any parsing
    max_queue: int = 256  # sentences waiting for the model; beyond it, 503 + Retry-After
    max_beam: int = 8  # the widest beam a request may ask for
    # ---- batching ----
    batching: bool = True  # False: every sentence is searched on its own, in arrival order
    batch_wait_ms: float = 5.0  # how long the first waiting sentence waits for others to join its batch
    max_batch_sentences: int = 64  # bounded batch: later arrivals wait at most a few batches
    max_batch_tokens: int = 6144  # padded source tokens × beam per batch (the Translator's token budget)
    # ---- compute ----
    threads: int = 1  # torch intra-op threads of the one model thread
    device: str | None = None  # None: cuda when available
    compile: bool = False  # torch.compile the decoding step, once, at start-up (decoding/compiled.py)

    def __post_init__(self) -> None:
        for name in ("max_chars", "max_texts", "max_body_bytes", "max_queue", "max_beam", "max_batch_sentences",
                     "max_batch_tokens", "threads"):
            if getattr(self, name) < 1:
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"serve.{name} ({flag}) must be >= 1, got {getattr(self, name)}")
        if self.batch_wait_ms < 0:
            raise ConfigError(f"serve.batch_wait_ms (--batch-wait-ms) must be >= 0, got {self.batch_wait_ms}")

    @property
    def sentences_per_batch(self) -> int:
        return self.max_batch_sentences if self.batching else 1

    @property
    def wait_seconds(self) -> float:
        return self.batch_wait_ms / 1000 if self.batching else 0.0
