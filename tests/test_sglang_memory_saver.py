"""SGLang's memory saver on the drop-in, with a CUDA graph captured before the release
(SGLang 0.5.16 or 0.5.23, whichever ``UKV_SGLANG_PATH`` holds).

SGLang releases and resumes KV memory around weight updates (``release_memory_occupation``
/ ``resume_memory_occupation``) by pausing and resuming the ``kv_cache`` region of its
``TorchMemorySaverAdapter``; with ``enable_memory_saver=True`` the drop-in allocates its
byte buffer in that region, so the buffer keeps its virtual address and a decode CUDA graph
captured before the release replays correctly after the resume.

Needs a GPU, SGLang on ``UKV_SGLANG_PATH`` and ``torch_memory_saver`` (its in-process
"torch" hook mode, no preload library); skipped otherwise. Runs in a child process, as the
other tests of SGLang's own code do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import ukv

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sglang_stubs import sglang_found  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CHILD = textwrap.dedent(
    """
    import types, torch
    import sglang_stubs
    sglang_stubs.pytest_configure(None)
    import torch_memory_saver
    torch_memory_saver.torch_memory_saver.hook_mode = "torch"  # no preload library
    import ukv.integrations.sglang as dropin
    dropin.install(propagate=False)
    from ukv.integrations.sglang import layouts
    # 0.5.23: a write names its physical ids, marked physical (its pools refuse anything
    # else), and the SWA side's translated ids are int64; 0.5.16: the virtual ids, int32.
    NEW = layouts.current().version == "0.5.23"
    from sglang.srt.constants import GPU_MEMORY_TYPE_KV_CACHE
    from sglang.srt.mem_cache import memory_pool as mp
    from sglang.srt.mem_cache import unified_memory_pool as ump

    H, D, N = 2, 64, 48
    b = ump.init_unified_swa_pools(
        device="cuda", kv_cache_dtype=torch.bfloat16, head_num=H, head_dim=D, v_head_dim=D,
        swa_head_num=H, swa_head_dim=D, swa_v_head_dim=D, page_size=16, start_layer=0,
        end_layer=1, swa_attention_layer_ids=[0], full_attention_layer_ids=[1],
        full_max_total_num_tokens=4096, swa_max_total_num_tokens=4096,
        enable_memory_saver=True, need_sort=False, lazy_compaction=True,
    )
    a, kv, upool = b.token_to_kv_pool_allocator, b.token_to_kv_pool, b.unified_memory_pool
    assert upool.ukv_pool.memory_release_keeps_address
    ids = a.alloc(N)
    virt = ids.clone()
    full_loc = torch.empty_like(virt)
    swa_loc = torch.empty(virt.shape, dtype=torch.int64 if NEW else torch.int32, device="cuda")
    k_in = torch.empty(N, H, D, dtype=torch.bfloat16, device="cuda")
    layers = [types.SimpleNamespace(layer_id=i) for i in (0, 1)]

    def step():  # what a decode graph does with the pool: translate, then write K/V
        a.translate_kv_loc(virt, out=full_loc)
        a.translate_loc_from_full_to_swa(virt, out=swa_loc)
        if NEW:
            write = mp.KVWriteLoc(full_loc, swa_loc=swa_loc, full_loc=full_loc, physical=True)
        else:
            write = mp.KVWriteLoc(loc=virt, swa_loc=swa_loc, full_loc=full_loc)
        for layer in layers:
            kv.set_kv_buffer(layer, write, k_in, -k_in)

    def check(value):
        k_in.fill_(value)
        g.replay()
        torch.cuda.synchronize()
        for layer in layers:
            keys = kv.get_key_buffer(layer.layer_id).reshape(-1, H, D)
            loc = (swa_loc.long() if layer.layer_id == 0 else full_loc)
            got = keys[loc]
            assert bool((got == value).all()), (layer.layer_id, got.flatten()[:4])

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        k_in.fill_(1.0)
        step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    raw = upool._raw.data_ptr()
    check(2.0)
    # SGLang's release/resume around a weight update (its radix cache is flushed first;
    # these ids stay live, and their bytes are rewritten by the replay).
    adapter = upool.memory_saver_adapter
    free_before = torch.cuda.mem_get_info()[0]
    adapter.pause(GPU_MEMORY_TYPE_KV_CACHE)
    freed = torch.cuda.mem_get_info()[0] - free_before
    adapter.resume(GPU_MEMORY_TYPE_KV_CACHE)
    assert upool._raw.data_ptr() == raw
    check(3.0)
    print("memory saver ok: freed", freed, "bytes while paused; layout", layouts.current().version)
    """
)


@pytest.mark.skipif(not sglang_found(), reason="SGLang not found: set UKV_SGLANG_PATH")
def test_a_graph_captured_before_sglangs_release_replays_after_its_resume() -> None:
    pytest.importorskip("torch_memory_saver")
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(ukv.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([HERE, root, env.get("PYTHONPATH", "")])
    res = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0 and "memory saver ok" in res.stdout, (
        res.stdout[-4000:] + res.stderr[-4000:]
    )
