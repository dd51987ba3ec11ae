"""Data parallel over the processes a launcher started (`accelerate launch --num_processes N`, or torchrun): one
model copy per process, work split by rank, results gathered on rank 0.

The launcher sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; `shard()` joins the process group
(NCCL on GPUs, gloo on CPUs) the first time it is called and nothing happens at import. Without a launcher
(WORLD_SIZE unset or 1) it is a single shard and no process group is made.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class Shard:
    rank: int
    world: int

    def take(self, items: Sequence) -> list:
        """This rank's items: every world-th from its rank on (item order is kept within a rank)."""
        return list(items[self.rank :: self.world])

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's `obj`, by rank, on rank 0; None on the others (a collective: every rank calls it)."""
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out: list[Any] | None = [None] * self.world if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0)
        return out

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, by rank, on every rank."""
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    @property
    def device(self) -> str:
        """The device of this rank's model copy: its local GPU when there are GPUs, else the CPU."""
        import torch

        return f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if torch.cuda.is_available() else "cpu"


def shard() -> Shard:
    """This process's shard, joining the launcher's process group when there is more than one process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Shard(0, 1)
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        # object collectives on NCCL move pickles through the GPU; gloo serves them on the CPU either way
        dist.init_process_group("gloo")
    return Shard(dist.get_rank(), dist.get_world_size())
