"""The process group ukv's tensor-parallel modes talk over, and the two collectives they use.

Every collective here moves host (CPU) int64 tensors: plan payloads are born on the host
(the core packs them there) and digests are one word. That needs a group whose backend
handles CPU tensors, ``gloo``; engines that run NCCL for activations keep such a group
next to it for host-side traffic (SGLang's ``cpu_group``), and that is the group to pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ukv.errors import PoolConfigError

__all__ = ["Group"]


@dataclass(frozen=True)
class Group:
    """A ``torch.distributed`` process group as ukv uses it.

    Attributes:
        handle: The group (None: the default group).
        rank: This process's rank in the group.
        size: Number of ranks in the group.
    """

    handle: Any
    rank: int
    size: int

    @classmethod
    def of(cls, group: Any = None) -> Group:
        """Wrap ``group`` (None: the default group), checking it can move CPU tensors.

        Raises:
            PoolConfigError: ``torch.distributed`` is not initialised, or the group's
                backend cannot carry CPU tensors (e.g. NCCL only).
        """
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise PoolConfigError(
                "invalid group: torch.distributed is not initialised (call "
                "torch.distributed.init_process_group first)"
            )
        backend = str(dist.get_backend(group))
        if "gloo" not in backend:
            raise PoolConfigError(
                f"invalid group backend = {backend!r}: ukv's collectives move host tensors; "
                "pass a gloo group (torch.distributed.new_group(backend='gloo'))"
            )
        return cls(group, dist.get_rank(group), dist.get_world_size(group))

    def global_rank(self, rank: int) -> int:
        """The global rank of group rank ``rank`` (collectives name sources globally)."""
        import torch.distributed as dist

        if self.handle is None:
            return rank
        return int(dist.get_global_rank(self.handle, rank))

    def broadcast(self, t: torch.Tensor, src: int = 0) -> None:
        """Broadcast host tensor ``t`` in place from group rank ``src``."""
        import torch.distributed as dist

        dist.broadcast(t, self.global_rank(src), group=self.handle)

    def all_gather_word(self, value: int) -> list[int]:
        """Every rank's ``value`` (one int64 each), in rank order."""
        import torch.distributed as dist

        mine = torch.tensor([value], dtype=torch.int64)
        out = torch.empty(self.size, dtype=torch.int64)
        dist.all_gather_into_tensor(out, mine, group=self.handle)
        return [int(x) for x in out]

    def all_gather_words(self, values: torch.Tensor) -> torch.Tensor:
        """Every rank's equal-length int64 row, shape ``[size, len(values)]``."""
        import torch.distributed as dist

        out = torch.empty(self.size * values.numel(), dtype=torch.int64)
        dist.all_gather_into_tensor(out, values.to(torch.int64).contiguous(), group=self.handle)
        return out.view(self.size, -1)

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's picklable ``obj`` (the error path only: slow, never per step)."""
        import torch.distributed as dist

        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj, group=self.handle)
        return out
