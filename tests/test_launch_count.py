"""``benches/launch_count.py``: how device activity is attributed to the scopes of a
profile, on synthetic CUDA events (no GPU here), and its CPU mode on a real profile."""

from __future__ import annotations

import pytest
import torch
from script_loader import load_script


def _load():
    return load_script("benches/launch_count.py", register=True)


lc = _load()
CPU, CUDA = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA


class Ev:
    """What ``attribute`` reads of a kineto event."""

    def __init__(self, name, dev, start, end=None, corr=0, linked=0, annotation=False):
        self._v = (name, dev, start, start if end is None else end, corr, linked, annotation)

    def name(self):
        return self._v[0]

    def device_type(self):
        return self._v[1]

    def start_ns(self):
        return self._v[2]

    def end_ns(self):
        return self._v[3]

    def correlation_id(self):
        return self._v[4]

    def linked_correlation_id(self):
        return self._v[5]

    def is_user_annotation(self):
        return self._v[6]


def test_cuda_activity_goes_to_the_scope_its_launch_started_in() -> None:
    events = [
        Ev("ukvbench::alloc", CPU, 100, 200, corr=1, annotation=True),
        Ev("aten::index_select", CPU, 110, 150, corr=2),
        Ev("cudaLaunchKernel", CPU, 120, 125, corr=900, linked=2),  # torch's launch
        Ev("cuLaunchKernel", CPU, 160, 165, corr=901),  # Triton's, in no op
        Ev("cudaMemcpyAsync", CPU, 170, 171, corr=902),
        Ev("cudaStreamSynchronize", CPU, 172, 190, corr=903),
        Ev("ukvbench::translate", CPU, 300, 400, corr=3, annotation=True),
        Ev("cudaLaunchKernelExC", CPU, 310, 312, corr=904),
        Ev("cudaLaunchKernel", CPU, 500, 501, corr=905),  # the bench's own, outside
        # device side: the kernels and the copy, the mirror of a scope, a sync record
        Ev("index_select_kernel", CUDA, 1000, corr=900, linked=2),
        Ev("alloc_kernel", CUDA, 1010, corr=901),
        Ev("Memcpy DtoH (Device -> Pageable)", CUDA, 1020, corr=902),
        Ev("ukvbench::alloc", CUDA, 1000, 1100, annotation=True),
        Ev("Stream Sync", CUDA, 1030, corr=903),
        Ev("gather_kernel", CUDA, 1040, corr=904),
        Ev("arange_kernel", CUDA, 1050, corr=905),
        # a kernel whose launch is not in the trace: placed by its linked op
        Ev("lost_launch_kernel", CUDA, 1060, corr=906, linked=2),
        # one with neither
        Ev("orphan_kernel", CUDA, 1070, corr=907),
        # a Triton launch whose driver call is not in the trace: placed by its marker
        Ev("triton::bind_kernel", CPU, 320, 330, corr=4),
        Ev("bind_kernel", CUDA, 1080, corr=908, linked=4),
    ]
    got = lc.attribute(events, cuda=True)
    alloc, tr = got["alloc"], got["translate"]
    assert (alloc.kernels, alloc.memcpys, alloc.syncs, alloc.launch_calls) == (3, 1, 1, 2)
    assert (tr.kernels, tr.memcpys, tr.syncs, tr.launch_calls, tr.triton) == (2, 0, 0, 1, 1)
    assert got[lc.OUTSIDE].kernels == 1 and got[lc.OUTSIDE].launch_calls == 1
    assert got[lc.UNATTRIBUTED].kernels == 1
    assert alloc.per(2)["kernels"] == 1.5


def test_cpu_mode_counts_aten_ops_per_scope() -> None:
    counter = lc.LaunchCounter(cuda=False)
    x = torch.arange(8)
    with counter.recording():
        with counter.scope("a"):
            y = x * 2
        z = y + 1
        with counter.scope("b"):
            z.sum()
    assert not counter.active
    with counter.scope("c"):  # not recording: no scope, no cost
        pass
    got = counter.counts()
    assert got["a"].aten_ops >= 1 and got["b"].aten_ops >= 1
    assert got[lc.OUTSIDE].aten_ops >= 1  # the add between the scopes
    assert "c" not in got
    assert all(c.kernels == 0 for c in got.values())


def test_triton_launches_are_marked_while_recording() -> None:
    """A Triton kernel (here run by Triton's interpreter, as on CPU) launched inside a
    scope counts as a Triton launch of that scope; the patch is gone afterwards."""
    pytest.importorskip("triton")
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        m = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1, mask=m)

    kernel = InterpretedFunction(add_one)
    run = InterpretedFunction.run
    x = torch.zeros(8)
    counter = lc.LaunchCounter(cuda=False)
    with counter.recording():
        with counter.scope("pool"):
            kernel[(1,)](x, 8, BLOCK=8)
        kernel[(1,)](x, 8, BLOCK=8)
    assert InterpretedFunction.run is run
    assert torch.equal(x, torch.full((8,), 2.0))
    got = counter.counts()
    assert got["pool"].triton == 1 and got[lc.OUTSIDE].triton == 1
