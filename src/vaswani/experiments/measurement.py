"""How every experiment measures: synchronised timing, peak tensor memory, and a training step on synthetic
batches.

Timing is synchronised (``torch.cuda.synchronize`` around every timed region on GPU, where kernels run
asynchronously). Peak memory is measured two ways, because PyTorch only keeps allocator statistics on CUDA:

- CUDA: ``torch.cuda.reset_peak_memory_stats`` + ``max_memory_allocated``, the caching allocator's own count
  of bytes in live tensors (not the reserved pool, not the CUDA context).
- CPU: ``torch.profiler`` with ``profile_memory=True`` records every allocation and free made through PyTorch's
  CPU allocator with a timestamp; replaying them in order gives the high-water mark of tensor memory during the
  region. It does not see memory that oneDNN/MKL/OpenMP allocate internally (matmul scratch), Python objects,
  or allocator fragmentation, so it is a lower bound of the process's real growth (RSS), measured in a separate,
  untimed pass because the profiler slows every operator down.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch

from vaswani.config import ModelConfig, apply_model_settings
from vaswani.data.batching import Batch
from vaswani.devices import synchronize as sync
from vaswani.errors import is_out_of_memory
from vaswani.model import Transformer
from vaswani.training.config import TrainConfig
from vaswani.training.loss import TranslationLoss
from vaswani.training.optim import build_optimizer
from vaswani.training.presets import load_preset
from vaswani.training.step import TeacherForcedBatch, train_step

MiB = 2**20
GiB = 2**30


def available_ram_bytes() -> int | None:
    """MemAvailable from /proc/meminfo: used to skip CPU points that would push the machine into swap/OOM."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# ---- timing -------------------------------------------------------------------------------------------------
@dataclass
class Timing:
    """Wall-clock seconds of repeated calls (after warm-up), each bracketed by device synchronisation."""

    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        ordered = sorted(self.seconds)
        n = len(ordered)
        return float("nan") if n == 0 else (ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2)

    @property
    def mean(self) -> float:
        return sum(self.seconds) / len(self.seconds) if self.seconds else float("nan")


def time_call(fn: Callable[[], Any], device: torch.device, warmup: int, repeats: int,
              max_seconds: float | None = None) -> Timing:
    """Run ``fn`` ``warmup`` times untimed (allocator, kernel selection, caches), then time up to ``repeats``
    calls, stopping early once ``max_seconds`` of timed work has accumulated (at least one call is timed)."""
    for _ in range(warmup):
        fn()
    timing = Timing()
    for _ in range(max(repeats, 1)):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        timing.seconds.append(time.perf_counter() - start)
        if max_seconds is not None and sum(timing.seconds) >= max_seconds:
            break
    return timing


# ---- peak memory --------------------------------------------------------------------------------------------
@dataclass
class PeakMemory:
    """Tensor memory during a region: ``at_start`` bytes of the tensors the caller knows are live (parameters,
    optimizer state, inputs), ``above_start`` the high-water mark of what the region added on top, and
    ``peak = at_start + above_start``. On CUDA ``allocator_peak`` is the allocator's absolute
    ``max_memory_allocated``, which also holds what is cached outside the model (cuBLAS workspaces, leftovers):
    the number that decides an out-of-memory error."""

    method: str
    at_start: int = 0
    above_start: int = 0
    allocator_peak: int | None = None

    @property
    def peak(self) -> int:
        return self.at_start + self.above_start


CUDA_METHOD = ("torch.cuda.max_memory_allocated (caching allocator, bytes in live tensors) minus the allocation at "
               "the start, plus the bytes of the parameters, optimizer state and inputs")
CPU_METHOD = ("torch.profiler(profile_memory=True): replay of every CPU-allocator allocation/free, plus the bytes "
              "of the parameters, optimizer state and inputs live at the start; excludes oneDNN/MKL scratch, "
              "Python objects and fragmentation (a lower bound of RSS growth)")


def memory_method(device: torch.device) -> str:
    """How :func:`track_peak_memory` measures on ``device``, in words for a results file."""
    return CUDA_METHOD if device.type == "cuda" else CPU_METHOD


@contextlib.contextmanager
def track_peak_memory(device: torch.device, live_at_start: int = 0) -> Iterator[PeakMemory]:
    """Measure the peak tensor memory of the enclosed code, as ``live_at_start`` + the region's high-water mark.

    The region's part is read from the CUDA allocator's statistics, or on CPU (where the allocator keeps none)
    replayed from the profiler's allocation events.
    """
    if device.type == "cuda":
        sync(device)
        result = PeakMemory(memory_method(device), at_start=live_at_start)
        allocated = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        yield result
        sync(device)
        result.allocator_peak = torch.cuda.max_memory_allocated(device)
        result.above_start = result.allocator_peak - allocated
        return
    from torch.profiler import ProfilerActivity, profile

    result = PeakMemory(memory_method(device), at_start=live_at_start)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        yield result
    result.above_start = _replay_allocations(prof)


def _replay_allocations(prof: Any) -> int:
    """High-water mark of the running sum of (timestamped) allocation sizes; frees carry negative sizes."""
    events = sorted((event.start_ns(), event.nbytes()) for event in prof.profiler.kineto_results.events()
                    if event.name() == "[memory]" and "CPU" in str(event.device_type()))
    current = peak = 0
    for _, size in events:
        current += size
        peak = max(peak, current)
    return peak


def tensor_bytes(*tensors: torch.Tensor | None) -> int:
    """Bytes of distinct storages among ``tensors`` (tied parameters share one storage: counted once)."""
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if t is None:
            continue
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total


def training_state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> int:
    """Parameters, existing gradients and optimizer state: what is live before a training step starts."""
    tensors: list[torch.Tensor | None] = []
    for p in model.parameters():
        tensors += [p, p.grad]
    if optimizer is not None:
        for state in optimizer.state.values():
            tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return tensor_bytes(*tensors)


def unless_out_of_memory(fn: Callable[[], Any], device: torch.device) -> tuple[Any, bool]:
    """(fn(), False), or (None, True) if it ran out of memory; any other error propagates.

    Memory is freed *after* the except block: until it ends, the traceback's frames still hold the failed
    attempt's tensors.
    """
    try:
        return fn(), False
    except RuntimeError as error:
        if not is_out_of_memory(error):
            raise
    free_memory(device)
    return None, True


def free_memory(device: torch.device) -> None:
    """Return cached GPU blocks between measurements, so one measurement's leftovers never count in the next
    (on CPU, reference counting already freed everything that is unreachable; a full gc pass costs ~0.2 s)."""
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


# ---- a training step on synthetic batches -------------------------------------------------------------------
def preset_model_config(preset: str, model_settings: Sequence[str] = ()) -> ModelConfig:
    """A run preset's ModelConfig with the vocabulary the trainer would give it (the tokenizer's, ≈
    data.vocab_size), then ``model_settings`` (``model.key=value`` items) applied."""
    run_config = load_preset(preset)
    config = dataclasses.replace(run_config.model, vocab_size=run_config.data.vocab_size)
    return apply_model_settings(config, list(model_settings))


def synthetic_batch(vocab_size: int, batch_size: int, src_len: int, tgt_len: int, device: torch.device,
                    seed: int = 0) -> Batch:
    """A batch of random real tokens, no padding: every position counts, shapes are exact.

    Ids start at 4, above the special tokens (pad 0, <s> 1, </s> 2, unk 3), so nothing is masked as padding.
    """
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab_size, (batch_size, src_len), generator=generator)
    tgt = torch.randint(4, vocab_size, (batch_size, tgt_len + 1), generator=generator)
    return Batch(src, tgt[:, :-1].contiguous(), tgt[:, 1:].contiguous(), n_src_tokens=src.numel(),
                 n_tgt_tokens=batch_size * tgt_len, indices=torch.arange(batch_size)).to(device)


class TrainingStep:
    """A model with its optimizer, updated by :func:`vaswani.training.step.train_step` exactly as the trainer
    does (label-smoothed loss over real target tokens, clipping, AdamW), at a constant learning rate of 1e-4: the
    numbers are about speed and memory, not about learning.

    ``step(batch, marks)`` appends a synchronised timestamp after forward, backward and the optimizer, so the
    caller can time each phase.
    """

    def __init__(self, config: Any, device: torch.device, precision: str, seed: int = 0):
        torch.manual_seed(seed)
        self.config, self.device, self.precision = config, device, precision
        self.train_config = TrainConfig()
        self.model = Transformer(config).to(device)
        self.optimizer = build_optimizer(self.model, self.train_config, device)
        for group in self.optimizer.param_groups:
            group["lr"] = 1e-4
        self.loss = TranslationLoss(self.model, self.train_config.label_smoothing).train()

    def __call__(self, batch: TeacherForcedBatch, marks: list[float] | None = None) -> int:
        def mark(phase: str) -> None:
            if marks is not None:
                sync(self.device)
                marks.append(time.perf_counter())

        tokens = int((batch.tgt_out != self.config.pad_id).sum())  # real target tokens: the loss's normaliser
        train_step(self.loss, self.optimizer, [batch], tokens=tokens, precision=self.precision,
                   clip_grad_norm=self.train_config.clip_grad_norm, on_phase=mark)
        return tokens

    def live_bytes(self, batch: TeacherForcedBatch) -> int:
        """What is live before a step: parameters, optimizer state, the batch."""
        return training_state_bytes(self.model, self.optimizer) + tensor_bytes(batch.src, batch.tgt_in, batch.tgt_out)

    def peak_memory(self, batch: TeacherForcedBatch) -> PeakMemory:
        """Peak tensor memory of one step on ``batch`` (call after a warm-up step: AdamW creates its moments in
        the first step, and every later step starts from parameters + moments, without gradients)."""
        free_memory(self.device)
        with track_peak_memory(self.device, live_at_start=self.live_bytes(batch)) as peak:
            self(batch)
        return peak
