"""Data parallelism through ``torchrun``: the same command runs single-process or on N ranks.

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE; without them this module is a no-op world of one.
The device rule (:func:`vaswani.devices.rank_device`) gives each local rank its own GPU and refuses more ranks than
GPUs; gloo serves CPU processes (``train.device=cpu``, also on a machine with GPUs), NCCL GPUs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from vaswani.devices import rank_device


@dataclass
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1  # processes on this machine

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def sum(self, value: float | int) -> float:
        """Sum a number over ranks (token counts, losses for logging)."""
        if not self.distributed:
            return float(value)
        tensor = torch.tensor([float(value)], dtype=torch.float64, device=collective_device())
        dist.all_reduce(tensor)
        return float(tensor.item())

    def any(self, flag: bool) -> bool:
        return self.sum(1.0 if flag else 0.0) > 0

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


def rank_batches(group: list[list[int]], grad_accum: int, rank: int) -> tuple[list[list[int]], list[float]]:
    """This rank's micro-batches of an update's ``group`` (rank r takes r·accum … r·accum+accum-1) and their
    weights. The last group of an epoch may be short: a rank without a batch of its own still runs the collective
    backward passes, on the group's first batch with weight 0."""
    own = group[rank * grad_accum : (rank + 1) * grad_accum]
    weights = [1.0] * len(own) + [0.0] * (grad_accum - len(own))
    return own + [group[0]] * (grad_accum - len(own)), weights


def ranks_identical(model: torch.nn.Module) -> bool:
    """Do all ranks hold the same parameters? Compares per-tensor checksums by all-reducing their min and max."""
    sums = torch.stack([torch.stack([p.detach().double().sum(), p.detach().double().square().sum()])
                        for p in model.parameters()]).flatten().to(collective_device())
    low, high = sums.clone(), sums.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return bool(torch.equal(low, high))


def collective_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def collective_backend(device_type: str) -> str:
    """NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if device_type == "cuda" else "gloo"


def init_world(device_type: str) -> World:
    """The world torchrun started this process in; on CUDA each rank first claims the GPU of its local rank."""
    if "RANK" not in os.environ or int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return World()
    size = int(os.environ["WORLD_SIZE"])
    world = World(int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", 0)),
                  int(os.environ.get("LOCAL_WORLD_SIZE", size)))
    if not dist.is_initialized():
        if device_type == "cuda":
            gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
            torch.cuda.set_device(rank_device("cuda", world.local_rank, world.local_size, gpus))
        dist.init_process_group(backend=collective_backend(device_type))
    return world


def shutdown(world: World) -> None:
    """Leave the process group together: a rank that destroys it while its peer still ends its run (a checkpoint,
    the summary) can abort at exit with gloo's worker threads still running."""
    if world.distributed and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
