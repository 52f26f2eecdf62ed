"""The rules that depend on the hardware, checked on the CPU with the machine's facts passed in: which device a
rank computes on, which precision "auto" means; and the CPU allocator setting that training applies.
tests/gpu checks that the real CUDA path follows the same rules."""

from __future__ import annotations

import resource
import sys

import pytest
import torch

from vaswani.devices import rank_device, reuse_freed_memory
from vaswani.errors import ConfigError, EnvironmentFault
from vaswani.precision import choose_precision
from vaswani.training.distributed import collective_backend, init_world


@pytest.mark.parametrize("requested,local_rank,local_ranks,gpus,expected", [
    ("auto", 0, 1, 0, "cpu"),
    ("auto", 0, 1, 2, "cuda:0"),
    ("auto", 1, 2, 2, "cuda:1"),
    ("cuda", 3, 4, 8, "cuda:3"),
    ("cuda:1", 0, 1, 2, "cuda:1"),
    ("cpu", 1, 2, 1, "cpu"),  # gloo ranks on the CPU of a GPU machine, when asked
    ("cpu", 5, 8, 0, "cpu"),
], ids=["auto-no-gpu", "auto-one-rank", "auto-rank-1-of-2", "cuda-rank-3-of-4", "pinned-cuda-1", "cpu-on-gpu-box",
        "cpu-8-ranks"])
def test_each_local_rank_computes_on_its_own_device(requested: str, local_rank: int, local_ranks: int, gpus: int,
                                                    expected: str) -> None:
    assert rank_device(requested, local_rank, local_ranks, gpus) == torch.device(expected)


@pytest.mark.parametrize("requested,local_ranks,gpus,error,words", [
    ("cuda", 2, 1, EnvironmentFault, "2 processes on this machine but 1 CUDA device(s)"),
    ("auto", 2, 1, EnvironmentFault, "train.device=cpu to run the ranks on the CPU (gloo)"),
    ("cuda", 1, 0, EnvironmentFault, "no CUDA device is visible"),
    ("cuda:2", 1, 2, EnvironmentFault, "only 2 CUDA device(s)"),
    ("cuda:0", 2, 2, ConfigError, "pins all 2 ranks to one GPU"),
    ("gpu", 1, 1, ConfigError, "not a device name"),
], ids=["more-ranks-than-gpus", "auto-more-ranks-than-gpus", "cuda-without-gpu", "index-out-of-range",
        "pinned-under-two-ranks", "unknown-name"])
def test_a_device_that_cannot_be_had_is_one_line_saying_what_to_run(requested: str, local_ranks: int, gpus: int,
                                                                    error: type, words: str) -> None:
    with pytest.raises(error) as raised:
        rank_device(requested, 0, local_ranks, gpus)
    assert words in str(raised.value) and "\n" not in str(raised.value)


def test_torchrun_with_more_ranks_than_gpus_stops_before_claiming_a_gpu(monkeypatch) -> None:
    """The launch a 1-GPU machine refuses: two ranks asking for CUDA. The error comes before any
    ``torch.cuda.set_device``, which would fail with "invalid device ordinal" on rank 1."""
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: pytest.fail(f"claimed {device}"))
    with pytest.raises(EnvironmentFault, match="2 processes on this machine but 1 CUDA device"):
        init_world("cuda")
    assert (collective_backend("cuda"), collective_backend("cpu")) == ("nccl", "gloo")


@pytest.mark.parametrize("requested,device_type,bf16_fast,expected", [
    ("auto", "cuda", True, "bf16"),  # Ampere and later
    ("auto", "cuda", False, "fp16"),  # older GPUs: half precision with the gradient scaler
    ("auto", "cpu", True, "bf16"),  # AMX / AVX512-BF16
    ("auto", "cpu", False, "fp32"),  # AVX2 only: bf16 is emulated and slow
    ("fp32", "cuda", True, "fp32"),
    ("bf16", "cpu", False, "bf16"),  # explicit: what was asked, even where slow
    ("fp16", "cuda", True, "fp16"),
], ids=["auto-cuda-bf16", "auto-cuda-fp16", "auto-cpu-bf16", "auto-cpu-fp32", "fp32-on-cuda", "bf16-on-slow-cpu",
        "fp16-on-cuda"])
def test_auto_precision_is_the_fastest_the_hardware_computes(requested: str, device_type: str, bf16_fast: bool,
                                                             expected: str) -> None:
    assert choose_precision(requested, device_type, bf16_fast) == expected


def test_a_precision_the_device_cannot_compute_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="fp16 needs a CUDA device"):
        choose_precision("fp16", "cpu", False)
    with pytest.raises(ConfigError, match="precision must be one of"):
        choose_precision("int8", "cuda", True)


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


@pytest.mark.parametrize("value, expected", [("fast", "bf16"), ("slow", "fp32")])
def test_the_cpu_bf16_override_decides_auto_as_on_that_machine_class(monkeypatch, value: str, expected: str) -> None:
    from vaswani.precision import CPU_BF16_OVERRIDE, bf16_is_fast, resolve_precision

    monkeypatch.setenv(CPU_BF16_OVERRIDE, value)
    bf16_is_fast.cache_clear()
    try:
        assert resolve_precision("auto", torch.device("cpu")) == expected
        assert resolve_precision("fp32", torch.device("cpu")) == "fp32"  # an explicit precision is never overridden
    finally:
        bf16_is_fast.cache_clear()


def test_an_unknown_cpu_bf16_override_is_named_in_one_line(monkeypatch) -> None:
    from vaswani.precision import CPU_BF16_OVERRIDE, bf16_is_fast, resolve_precision

    monkeypatch.setenv(CPU_BF16_OVERRIDE, "yes")
    bf16_is_fast.cache_clear()
    try:
        with pytest.raises(ConfigError, match="VASWANI_CPU_BF16='yes' is not one of fast, slow") as error:
            resolve_precision("auto", torch.device("cpu"))
        assert "\n" not in str(error.value)
    finally:
        bf16_is_fast.cache_clear()


def test_one_slowed_trial_does_not_decide_the_precision() -> None:
    """A CPU where fp32 is four times faster, one fp32 trial preempted by another process: still fp32."""
    from vaswani.precision import faster_of

    fp32 = [0.0004, 0.0004, 0.0120, 0.0004, 0.0004]  # the third trial lost the core for a time slice
    bf16 = [0.0017, 0.0018, 0.0017, 0.0017, 0.0018]
    assert faster_of(bf16, fp32) is False
    assert sum(bf16) < sum(fp32)  # the total, as one timing of all trials would see it, would have chosen bf16
    assert faster_of(fp32, bf16) is True
