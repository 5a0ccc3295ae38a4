"""Device mirrors of one sub-pool's v2p/p2v tables.

The core owns the tables on the host. On the CPU (and for ``meta`` pools, which keep
their bookkeeping on the host) the torch tables are zero-copy views of the core's memory,
so they are always current and cost nothing to maintain. On CUDA the two tables are
slices of one device tensor with a fixed address for the pool's lifetime (CUDA-graph
safe); after every operation the pool copies the changed rows from pinned host memory
without blocking and scatters them in one launch on the current stream.
"""

from __future__ import annotations

import numpy as np
import torch

from ukv import _core


class DeviceTables:
    """The v2p/p2v tables of sub-pool ``index`` as torch tensors on ``device``.

    Attributes:
        v2p: shape ``[num_virtual_pages + 1]``, int64; last row a -1 sentinel.
        p2v: shape ``[num_pages + 1]``, int64; last row a -1 sentinel.
        both: the concatenation ``[v2p | p2v]`` (one tensor on CUDA; None on the host).
    """

    def __init__(self, arena: _core.Arena, index: int, device: torch.device) -> None:
        self._arena = arena
        self._index = index
        self.device = device
        host_v2p = torch.from_numpy(arena.v2p(index))
        host_p2v = torch.from_numpy(arena.p2v(index))
        self.mirrored = device.type == "cuda"
        if self.mirrored:
            self.both: torch.Tensor | None = torch.cat([host_v2p, host_p2v]).to(device)
            self.v2p = self.both[: host_v2p.numel()]
            self.p2v = self.both[host_v2p.numel() :]
        else:
            self.both = None
            self.v2p = host_v2p
            self.p2v = host_p2v

    def reupload(self) -> None:
        """Copy both host tables whole (after ``clear``)."""
        if self.mirrored and self.both is not None:
            host = np.concatenate([self._arena.v2p(self._index), self._arena.p2v(self._index)])
            self.both.copy_(to_device(host, self.device))


def to_device(arr: np.ndarray, device: torch.device) -> torch.Tensor:
    """Host array → tensor on ``device``: a view on the CPU; on CUDA one memcpy into pinned
    memory from torch's caching host allocator, then a non-blocking copy. The allocator
    keeps that pinned block until the copy has completed, so it is never overwritten early.
    """
    host = torch.from_numpy(arr)
    if device.type != "cuda":
        return host
    pinned = torch.empty(host.shape, dtype=host.dtype, pin_memory=True)
    pinned.copy_(host)
    return pinned.to(device, non_blocking=True)
