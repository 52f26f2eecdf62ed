"""Data parallelism through ``torchrun``: the same command runs single-process or on N ranks.

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; without them this module is a no-op world of one. Gloo serves CPU
processes (used by the tests), NCCL GPUs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

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


def collective_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def init_world(device_type: str) -> World:
    if "RANK" not in os.environ or int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return World()
    world = World(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0)))
    if not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        if device_type == "cuda":
            torch.cuda.set_device(world.local_rank)
        dist.init_process_group(backend=backend)
    return world


def shutdown(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()
