"""Fixtures of the training tests."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode


class HostReads(TorchFunctionMode):
    """Counts the calls that bring a tensor's value to the host: on a GPU each of them waits for the device to
    finish everything queued before it."""

    READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__float__, torch.Tensor.__int__,
             torch.Tensor.__bool__, torch.Tensor.cpu, torch.Tensor.numpy, torch.Tensor.nonzero, torch.nonzero,
             torch.Tensor.masked_select, torch.masked_select}

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        indexes = args[1:2] if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) else ()
        masked = any(isinstance(index, torch.Tensor) and index.dtype == torch.bool for index in indexes)
        if func in self.READS or masked:
            self.reads.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


@pytest.fixture
def host_reads() -> type[HostReads]:
    """``with host_reads() as reads: ...`` counts the host reads of tensor values inside the block."""
    return HostReads
