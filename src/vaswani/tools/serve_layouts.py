"""The thread layouts ``vaswani serve-bench`` compares: how a server spends the machine's cores, as worker
processes × batches searched at once × engine threads per batch."""

from __future__ import annotations

from dataclasses import dataclass

from vaswani.errors import ConfigError


@dataclass(frozen=True)
class Layout:
    """How a server spends its threads: ``workers`` processes × ``parallel_batches`` batches searched at once ×
    ``threads`` engine threads per batch, written ``WxPxT`` (``1x1x2``: one process, one batch at a time on two
    threads)."""

    workers: int
    parallel_batches: int
    threads: int

    @classmethod
    def parse(cls, text: str) -> "Layout":
        parts = text.lower().split("x")
        if len(parts) != 3 or not all(part.isdigit() and int(part) >= 1 for part in parts):
            raise ConfigError(f"--layouts {text}: not WORKERSxPARALLEL_BATCHESxTHREADS of whole numbers >= 1 "
                              "(e.g. 1x1x2: one process searching one batch at a time on two threads)")
        return cls(*map(int, parts))

    @property
    def name(self) -> str:
        return f"{self.workers}x{self.parallel_batches}x{self.threads}"

    @property
    def total_threads(self) -> int:
        return self.workers * self.parallel_batches * self.threads

    def flags(self) -> list[str]:
        return ["--workers", str(self.workers), "--parallel-batches", str(self.parallel_batches), "--threads",
                str(self.total_threads)]


def parse_layouts(texts: list[str] | None) -> list[Layout] | None:
    """The layouts ``--layouts`` names: None when it is not given (every split of the cores), none for
    ``none`` (or no value), which skips the comparison."""
    if texts is None:
        return None
    if texts in ([], ["none"]):
        return []
    return [Layout.parse(text) for text in texts]


def runnable_layouts(layouts: list[Layout], engine: str | None) -> tuple[list[Layout], list[Layout]]:
    """``layouts`` split into those the server's ``engine`` can run and those it cannot: the torch engine
    searches one batch at a time (its threads are the process's), so a layout of parallel batches is left out
    for it."""
    if engine != "torch":
        return layouts, []
    return ([layout for layout in layouts if layout.parallel_batches == 1],
            [layout for layout in layouts if layout.parallel_batches > 1])


def layouts_for(cores: int) -> list[Layout]:
    """Every way to spend ``cores`` engine threads, and one thread alone for reference: 1x1x1, then e.g.
    1x1x2, 1x2x1, 2x1x1 on 2 cores."""
    found = [Layout(1, 1, 1)]
    for workers in range(1, cores + 1):
        for parallel in range(1, cores // workers + 1):
            if cores % (workers * parallel) == 0:
                layout = Layout(workers, parallel, cores // (workers * parallel))
                if layout not in found:
                    found.append(layout)
    return found


__all__ = ["Layout", "layouts_for", "parse_layouts", "runnable_layouts"]
