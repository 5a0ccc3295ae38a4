"""A ``last_loc`` on the device (issue 12, item 4): checked by the kernel that finishes the
ids, never read on the host. A value that cannot be its request's last token gives the
tokens continuing it id 0 (the padding sink) and is reported by
``pool.check_device_errors()``; valid values give exactly the host path's ids.

On a CUDA run (``UKV_TEST_DEVICE=cuda``) everything goes through the public API. A CPU
pool always takes ``last_loc`` on the host, so on the CPU the same calls reach the
device path through the allocator's seam (``_alloc_tokens`` with a ``DeviceLast``): the
kernel under Triton's interpreter, and the torch fallback next to it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ukv
from ukv.execution.continuation import DeviceLast, FaultRecord, finish_with_torch

PS = 4


def _pool(device: str, lazy: bool = False) -> ukv.UnifiedKVPool:
    specs = [
        ukv.MHASpec("full", 1, 1, 4, torch.float32, grow="up"),
        ukv.MHASpec("other", 1, 1, 4, torch.float32, grow="down"),
    ]
    return ukv.UnifiedKVPool(1 << 14, specs, page_size=PS, device=device, lazy=lazy)


def _extend(
    alloc: ukv.SubPoolAllocator, pre: list[int], seq: list[int], last: list[int]
) -> torch.Tensor | None:
    """``alloc_extend`` with ``last_loc`` on the pool's device (the seam on a CPU pool)."""
    pool = alloc._rt
    total = sum(s - p for p, s in zip(pre, seq))
    pre_t, seq_t = torch.tensor(pre), torch.tensor(seq)
    if pool.device.type == "cuda":
        loc = torch.tensor(last, device=pool.device)
        return alloc.alloc_extend(pre_t, pre_t, seq_t, seq_t, loc, total)
    dl = DeviceLast(torch.tensor(last), alloc._continuation(), pool.faults)
    p, s = np.array(pre, dtype=np.int64), np.array(seq, dtype=np.int64)
    return alloc._alloc_tokens(lambda: alloc._core_extend(p, s, None), dl, False)


def _decode(alloc: ukv.SubPoolAllocator, seq: list[int], last: list[int]) -> torch.Tensor | None:
    pool = alloc._rt
    seq_t = torch.tensor(seq)
    if pool.device.type == "cuda":
        loc = torch.tensor(last, device=pool.device)
        return alloc.alloc_decode(seq_t, seq_t, loc)
    dl = DeviceLast(torch.tensor(last), alloc._continuation(), pool.faults)
    s = np.array(seq, dtype=np.int64)
    return alloc._alloc_tokens(lambda: alloc._core_decode(s, None), dl, False)


def _host_extend(alloc, pre, seq, last):  # type: ignore[no-untyped-def]
    pre_t, seq_t = torch.tensor(pre), torch.tensor(seq)
    total = sum(s - p for p, s in zip(pre, seq))
    return alloc.alloc_extend(pre_t, pre_t, seq_t, seq_t, torch.tensor(last), total, host=True)


def _two_requests(pool: ukv.UnifiedKVPool) -> tuple[torch.Tensor, torch.Tensor]:
    """Request A holds 6 tokens (last at page offset 1), request B 3 (offset 2)."""
    fa = pool.allocator("full")
    a = _host_extend(fa, [0], [6], [-1])
    b = _host_extend(fa, [0], [3], [-1])
    return a, b


@pytest.mark.parametrize("lazy", [False, True])
def test_valid_device_last_loc_gives_the_host_paths_ids(device: str, lazy: bool) -> None:
    host_pool, dev_pool = _pool(device, lazy), _pool(device, lazy)
    for pool in (host_pool, dev_pool):
        _two_requests(pool)
    ha, da = host_pool.allocator("full"), dev_pool.allocator("full")
    # A: 6 -> 11 (2 tokens finish its page, then a new page); B: 3 -> 4; C: new, 0 -> 2.
    pre, seq = [6, 3, 0], [11, 4, 2]
    last = [5, PS * 3 + 2, -1]
    want = _host_extend(ha, pre, seq, last)
    got = _extend(da, pre, seq, last)
    assert got is not None and got.device.type == torch.device(device).type
    assert got.cpu().tolist() == want.tolist()
    seq2 = [12, 5]
    last2 = [int(want[4]), int(want[5])]
    want2 = ha.alloc_decode(torch.tensor(seq2), torch.tensor(seq2), torch.tensor(last2), host=True)
    got2 = _decode(da, seq2, last2)
    assert got2 is not None and got2.cpu().tolist() == want2.tolist()
    dev_pool.check_device_errors()  # nothing to report
    dev_pool.check_invariants()


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(-1, id="minus-one"),
        pytest.param(1, id="padding-page"),
        pytest.param(PS * 3 + 3, id="wrong-offset"),
        pytest.param(1 << 20, id="past-the-ids"),
        pytest.param(None, id="freed-page"),
    ],
)
def test_bad_device_last_loc_goes_to_the_sink_and_is_reported(device: str, bad: int | None) -> None:
    pool = _pool(device)
    fa = pool.allocator("full")
    a, b = _two_requests(pool)
    if bad is None:
        # A freed page whose last id still sits at the right offset (stale last_loc).
        gone = _host_extend(fa, [0], [2], [-1])
        bad = int(gone[1])
        fa.free(gone)
    a_bytes = torch.arange(6 * 4, dtype=torch.float32).view(6, 1, 4) + 100
    b_bytes = torch.arange(3 * 4, dtype=torch.float32).view(3, 1, 4) + 500
    put = fa.translate_kv_loc
    pool.set_kv("full", 0, put(a.to(device)), a_bytes.to(device), a_bytes.to(device))
    pool.set_kv("full", 0, put(b.to(device)), b_bytes.to(device), b_bytes.to(device))
    # A continues with a bad last_loc (2 continuing tokens, then a new page); B is fine.
    got = _extend(fa, [6, 3], [11, 4], [bad, int(b[2])])
    assert got is not None
    ids = got.cpu().tolist()
    assert ids[:2] == [0, 0], "continuations of a bad last_loc must go to the sink"
    assert ids[2:5] == [ids[2] + k for k in range(3)] and ids[2] % PS == 0
    assert ids[5] == int(b[2]) + 1
    # Writing K/V for every returned id spares request A's and B's existing tokens.
    new = torch.full((6, 1, 4), -7.0)
    pool.set_kv("full", 0, put(got), new.to(device), new.to(device))
    k = pool.get_cpu_copy("full", torch.cat([a, b]).to(device))[0]
    assert torch.equal(k[:6], a_bytes) and torch.equal(k[6:], b_bytes)
    with pytest.raises(ukv.InvalidIdError, match=rf"last_loc = {bad} \(request 0\)") as err:
        pool.check_device_errors()
    assert "2 token(s)" in str(err.value)
    pool.check_device_errors()  # cleared
    pool.check_invariants()


def test_bad_device_last_loc_in_decode_is_reported_once_per_check(device: str) -> None:
    pool = _pool(device)
    fa = pool.allocator("full")
    a, b = _two_requests(pool)
    got = _decode(fa, [7, 4], [int(a[5]), -1])
    assert got is not None and got.cpu().tolist() == [int(a[5]) + 1, 0]
    got = _decode(fa, [8, 4], [int(a[5]) + 1, PS * 7])
    assert got is not None and got.cpu().tolist()[1] == 0
    with pytest.raises(ukv.InvalidIdError, match=r"last_loc = -1 \(request 1\).*\b2 token"):
        pool.check_device_errors()


def test_torch_fallback_agrees_with_the_kernel(device: str) -> None:
    """Executors that do not write ids finish continuations with torch ops; same outcome."""
    pool = _pool(device)
    fa = pool.allocator("full")
    a, _ = _two_requests(pool)
    check = fa._continuation()
    dev = torch.device(device)
    # Encoded continuations: request 0 (offset 1, k = 1, 2), request 1, request 2.
    tokens = torch.tensor([1 * PS + 1, 1 * PS + 2, 2 * PS + 1, 1 * PS + 1, 40], device=dev)
    req = torch.tensor([0, 0, 1, 2, -1], device=dev)
    last = torch.tensor([int(a[5]), int(a[5]), 2], device=dev)
    record = FaultRecord(dev)
    out = finish_with_torch(tokens, req, DeviceLast(last, check, record))
    # Request 1's last_loc (a[5], offset 1) is not at offset 2; request 2's is the padding page.
    assert out.cpu().tolist() == [int(a[5]) + 1, int(a[5]) + 2, 0, 0, 40]
    assert record.tensor.cpu().tolist()[0] == 2
    with pytest.raises(ukv.InvalidIdError, match=rf"last_loc = {int(a[5])} \(request 1\)"):
        record.raise_if_any()


@pytest.mark.gpu
def test_device_last_loc_on_another_device_is_an_argument_error() -> None:
    pool = _pool("cpu")
    fa = pool.allocator("full")
    a, _ = _two_requests(pool)
    before = pool.stats()
    loc = torch.tensor([int(a[5])], device="cuda")
    s = torch.tensor([7])
    with pytest.raises(ukv.ArgumentError, match="last_loc: on cuda"):
        fa.alloc_decode(s, s, loc)
    assert pool.stats() == before
