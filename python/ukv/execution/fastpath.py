"""The engine-facing hot calls on CUDA: translate and set_kv without the general wrappers.

``translate_kv_loc`` and ``set_kv`` run every forward step, so on a CUDA pool they first
try a path that checks only what decides whether the launch is safe (tensor type,
device, dtype, rank, contiguity, shape) with attribute reads, then launches through
:class:`~ukv.execution.launch.DirectKernel`. Anything unusual (a cast, a strided id
tensor, an overlapping ``out``, fp8 quantisation) returns "not handled" and the caller
takes the validating wrapper in :mod:`ukv.ops`, which raises the documented errors.
"""

from __future__ import annotations

import torch

from ukv import ops
from ukv.execution.launch import DirectKernel

try:
    from ukv.kernels import store_kv as _store_k
    from ukv.kernels import translate as _translate_k
except ImportError:  # pragma: no cover - Triton is Linux-only
    _store_k = _translate_k = None  # type: ignore[assignment]

_ID_DTYPES = (torch.int64, torch.int32)


def _on(t: object, index: int) -> bool:
    """A plain tensor on CUDA device ``index``."""
    return type(t) is torch.Tensor and t.is_cuda and t.get_device() == index


class TranslateLauncher:
    """``translate_kv_loc`` (or, with ``slots``, a state-slot translate that keeps -1)
    through one v2p table on CUDA, into ``out_dtype`` ids."""

    def __init__(
        self,
        v2p: torch.Tensor,
        page_size: int,
        slots: bool = False,
        out_dtype: torch.dtype = torch.int64,
    ) -> None:
        self.v2p = v2p
        self.addr = v2p.data_ptr()
        self.rows = v2p.numel()
        self.index = v2p.get_device()
        self.out_dtype = out_dtype
        self.out_size = torch.empty(0, dtype=out_dtype).element_size()
        self.kernel = DirectKernel(_translate_k.translate_kernel, ops.TRANSLATE_NUM_WARPS)
        self.const = {"PAGE_SIZE": page_size, "BLOCK": ops.TRANSLATE_BLOCK, "SLOTS": slots}

    @classmethod
    def for_table(
        cls,
        v2p: torch.Tensor,
        page_size: int,
        slots: bool = False,
        out_dtype: torch.dtype = torch.int64,
    ) -> TranslateLauncher | None:
        """A launcher for a CUDA table, None elsewhere (the wrapper serves CPU/meta)."""
        if not v2p.is_cuda or _translate_k is None:
            return None
        return cls(v2p, page_size, slots, out_dtype)

    def __call__(self, ids: object, out: object) -> torch.Tensor | None:
        """The physical ids, or None when this path does not handle the arguments."""
        index = self.index
        if not _on(ids, index):
            return None
        assert isinstance(ids, torch.Tensor)
        if ids.dtype not in _ID_DTYPES or ids.dim() != 1 or not ids.is_contiguous():
            return None
        n = ids.numel()
        ip = ids.data_ptr()
        if out is None:
            res = torch.empty(n, dtype=self.out_dtype, device=ids.device)
        else:
            if not _on(out, index):
                return None
            assert isinstance(out, torch.Tensor)
            if out.dtype is not self.out_dtype or out.shape != ids.shape or not out.is_contiguous():
                return None
            op = out.data_ptr()
            same = op == ip and ids.dtype is self.out_dtype
            if not same and op < ip + n * ids.element_size() and ip < op + self.out_size * n:
                return None  # partial overlap: the wrapper stages through a temporary
            res = out
        if n == 0:
            return res
        op = res.data_ptr()
        key = (ids.dtype, ip % 16 == 0, op % 16 == 0)
        block = ops.TRANSLATE_BLOCK
        self.kernel.launch(
            (-(-n // block), 1),
            index,
            key,
            (ip, self.addr, op, n, self.rows, 1, 1, 1),
            lambda: (ids, self.v2p, res, n, self.rows, 1, 1, 1),
            self.const,
        )
        return res


class StoreLauncher:
    """``set_kv`` of one layer on CUDA, for K/V already in the store dtype."""

    def __init__(self, target: ops.StoreTarget) -> None:
        self.t = target
        k_view, v_view = target.k_view, target.v_view
        self.index = k_view.get_device()
        self.dtype = k_view.dtype
        self.k_shape = tuple(k_view.shape[2:])
        self.v_shape = tuple(v_view.shape[2:])
        self.k_addr = target.k_bits.data_ptr()
        self.v_addr = target.v_bits.data_ptr()
        self.view_args = (
            target.num_slots,
            1,
            k_view.stride(0),
            k_view.stride(1),
            v_view.stride(0),
            v_view.stride(1),
        )
        self.kernel = DirectKernel(_store_k.store_kv_kernel, ops.STORE_NUM_WARPS)
        self.const = {
            "PAGE_SIZE": target.page_size,
            "K_ROW": target.k_row,
            "V_ROW": target.v_row,
            "BLOCK_N": target.block_n,
            "BLOCK_K": target.block_k,
            "BLOCK_V": target.block_v,
        }

    @classmethod
    def for_target(cls, target: ops.StoreTarget) -> StoreLauncher | None:
        """A launcher for CUDA views without fp8 quantisation; None elsewhere."""
        if not target.k_view.is_cuda or target.fp8_dtype is not None or _store_k is None:
            return None
        return cls(target)

    def __call__(self, loc: object, k: object, v: object) -> bool:
        """Store and return True, or return False when this path does not handle it."""
        index = self.index
        if not (_on(loc, index) and _on(k, index) and _on(v, index)):
            return False
        assert isinstance(loc, torch.Tensor)
        assert isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
        if k.dtype is not self.dtype or v.dtype is not self.dtype or loc.dtype not in _ID_DTYPES:
            return False
        n = loc.numel()
        if loc.dim() != 1 or loc.stride(0) != 1 and n > 1:
            return False
        if k.shape != (n, *self.k_shape) or v.shape != (n, *self.v_shape):
            return False
        if not (ops._rows_contiguous(k) and ops._rows_contiguous(v)):
            return False
        if n == 0:
            return True
        t = self.t
        lp, kp, vp = loc.data_ptr(), k.data_ptr(), v.data_ptr()
        sk, sv = k.stride(0), v.stride(0)
        key = (loc.dtype, lp % 16 == 0, kp % 16 == 0, vp % 16 == 0, sk, sv, n == 1)
        self.kernel.launch(
            (-(-n // t.block_n), 2),
            index,
            key,
            (self.k_addr, self.v_addr, kp, vp, lp, n, *self.view_args, sk, sv),
            lambda: (
                t.k_bits,
                t.v_bits,
                ops._as_bits(k),
                ops._as_bits(v),
                loc,
                n,
                *self.view_args,
                sk,
                sv,
            ),
            self.const,
        )
        return True
