"""Device helpers: the CPU allocator setting that training applies."""

from __future__ import annotations

import resource
import sys

import pytest
import torch

from vaswani.devices import reuse_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_memory_is_reused_instead_of_faulted_in_again() -> None:
    """A training step allocates its large tensors, frees them, and allocates them again (a little larger or
    smaller) the next update. With the setting, the next updates find their pages already mapped."""
    if not reuse_freed_memory():
        pytest.skip("not glibc")

    def step_faults(elements: int) -> int:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        tensors = [torch.ones(elements + 1000 * i) for i in range(3)]  # ~3 × 40 MB, touched
        del tensors
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    faults = [step_faults(10_000_000 - 100_000 * k) for k in range(6)]
    first = 3 * 10_000_000 * 4 // 4096  # the pages of the first step
    assert max(faults[2:]) < 0.05 * first, faults
