"""The drop-in against SGLang 0.5.16's real base classes and call sites.

Needs SGLang installed ``--no-deps`` outside site-packages and named by
``UKV_SGLANG_PATH`` (docs/SGLANG.md, "Testing against SGLang"); skipped otherwise (CI has
no SGLang). Each test runs a child process, so SGLang, its stand-in dependencies
(``tests/sglang_stubs.py``) and the installed finder never leak into this process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sglang_stubs import child_env, needs_release, run_child  # noqa: E402

pytestmark = needs_release("0.5.16")  # 0.5.23: tests/test_sglang_0523.py


def test_dropin_suite_runs_on_sglangs_bases() -> None:
    """tests/test_sglang_dropin.py and test_sglang_review4.py, with every drop-in class
    deriving from SGLang's own."""
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "sglang_stubs",
            os.path.join(HERE, "test_sglang_dropin.py"),
            os.path.join(HERE, "test_sglang_review4.py"),
        ],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]


CALL_SITES = textwrap.dedent(
    """
    import os, sys, types, torch
    import sglang_stubs
    DEV = os.environ.get("UKV_TEST_DEVICE", "cpu")
    sglang_stubs.pytest_configure(None)
    import ukv.integrations.sglang as dropin
    dropin.install()
    from sglang.srt.managers import schedule_policy
    from sglang.srt.mem_cache import common, mamba_radix_cache, radix_cache, swa_radix_cache
    from sglang.srt.mem_cache import unified_memory_pool as ump, multi_ended_allocator as mea
    from sglang.srt.mem_cache import memory_pool as mp, swa_memory_pool as smp
    from sglang.srt.mem_cache.allocator import BaseTokenToKVPoolAllocator
    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
    import ukv.integrations.sglang.composites as ours

    # SGLang's own modules hold the drop-in's classes under SGLang's names.
    assert ump.__ukv_dropin__ and mea.__ukv_dropin__
    # Names SGLang's tests replace at runtime are there to replace.
    from sglang.srt.mem_cache.allocator import paged
    assert mea.alloc_extend_kernel is paged.alloc_extend_kernel
    assert mea.alloc_decode_kernel is paged.alloc_decode_kernel
    assert schedule_policy.UnifiedMambaTokenToKVPoolAllocator is ours.UnifiedMambaTokenToKVPoolAllocator
    assert mamba_radix_cache.UnifiedMambaTokenToKVPoolAllocator is ours.UnifiedMambaTokenToKVPoolAllocator

    cp = types.SimpleNamespace(
        shape=types.SimpleNamespace(conv=[(4, 3)], temporal=(2, 2, 2)),
        dtype=types.SimpleNamespace(conv=torch.float32, temporal=torch.float32),
        layers=[0, 2],
    )
    b = ump.init_unified_mamba_pools(
        device=DEV, kv_cache_dtype=torch.bfloat16, head_num=2, head_dim=4, page_size=4,
        start_layer=0, end_layer=3, is_draft_worker=False, use_mla_backend=False,
        mamba_layer_ids=[0, 2], full_attention_layer_ids=[1, 3], mamba2_cache_params=cp,
        model_context_len=64, extra_max_context_len=0, max_total_num_tokens=256,
        max_mamba_cache_size=8, max_num_reqs=8, enable_memory_saver=False,
        enable_mamba_extra_buffer=False, speculative_num_draft_tokens=None,
        disable_overlap_schedule=False, need_sort=False, lazy_compaction=True,
    )
    a = b.token_to_kv_pool_allocator
    assert isinstance(a, BaseTokenToKVPoolAllocator)
    assert isinstance(a, mea.UnifiedMambaTokenToKVPoolAllocator)
    assert isinstance(a.full_attn_allocator, BaseTokenToKVPoolAllocator)
    assert isinstance(b.token_to_kv_pool, mp.HybridLinearKVPool)
    assert isinstance(b.token_to_kv_pool.full_kv_pool, mp.MHATokenToKVPool)
    assert isinstance(b.req_to_token_pool, mp.HybridReqToTokenPool)
    assert isinstance(b.req_to_token_pool, mp.ReqToTokenPool)
    assert isinstance(b.req_to_token_pool.mamba_pool, mp.MambaPool)

    # SGLang's HybridReqToTokenPool.alloc hands out state slots through the drop-in.
    reqs = [types.SimpleNamespace(req_pool_idx=None, mamba_pool_idx=None,
                                  mamba_ping_pong_track_buffer=None) for _ in range(2)]
    assert b.req_to_token_pool.alloc(reqs) is not None
    virt = torch.stack([torch.as_tensor(r.mamba_pool_idx) for r in reqs])
    assert bool((b.req_to_token_pool.translate_mamba_indices(virt) > 0).all())

    # SGLang's HybridLinearKVPool routes a full layer's write to the drop-in's pool.
    ids = a.alloc(4)
    phys = a.translate_kv_loc(ids)
    k = torch.randn(4, 2, 4, device=DEV)
    b.token_to_kv_pool.set_kv_buffer(types.SimpleNamespace(layer_id=3), phys, k, k)
    got = b.token_to_kv_pool.get_key_buffer(3).reshape(-1, 2, 4)[phys]
    assert torch.equal(got, k.bfloat16())

    # SGLang's own retraction (Req.offload_kv_cache / load_kv_cache) through the drop-in.
    from sglang.srt.managers.schedule_batch import Req
    rq = reqs[0]
    toks = a.alloc(8)
    b.req_to_token_pool.write((rq.req_pool_idx, slice(0, 8)), toks.to(torch.int32))
    kk = torch.randn(8, 2, 4, device=DEV)
    b.token_to_kv_pool.set_kv_buffer(types.SimpleNamespace(layer_id=1), a.translate_kv_loc(toks), kk, kk)
    rq.seqlen = 9  # offload copies tokens [0, seqlen - 1)
    Req.offload_kv_cache(rq, b.req_to_token_pool, a)
    a.free(toks)
    toks2 = a.alloc(8)
    b.req_to_token_pool.write((rq.req_pool_idx, slice(0, 8)), toks2.to(torch.int32))
    Req.load_kv_cache(rq, b.req_to_token_pool, a)
    got = b.token_to_kv_pool.get_key_buffer(1).reshape(-1, 2, 4)[a.translate_kv_loc(toks2)]
    assert torch.equal(got, kk.bfloat16())

    s = ump.init_unified_swa_pools(
        device=DEV, kv_cache_dtype=torch.float16, head_num=2, head_dim=4, v_head_dim=4,
        swa_head_num=2, swa_head_dim=4, swa_v_head_dim=4, page_size=2, start_layer=0,
        end_layer=3, swa_attention_layer_ids=[0, 2], full_attention_layer_ids=[1, 3],
        full_max_total_num_tokens=64, swa_max_total_num_tokens=32, enable_memory_saver=False,
        need_sort=False, forward_stream=None, lazy_compaction=True,
    )
    assert isinstance(s.token_to_kv_pool_allocator, SWATokenToKVPoolAllocator)
    assert isinstance(s.token_to_kv_pool, smp.SWAKVPool)
    sa = s.token_to_kv_pool_allocator
    ids = sa.alloc(4)
    full_loc, swa_loc = sa.translate_kv_loc(ids), sa.translate_loc_from_full_to_swa(ids)
    write = mp.KVWriteLoc(loc=ids, swa_loc=swa_loc, full_loc=full_loc)
    s.token_to_kv_pool.set_kv_buffer(types.SimpleNamespace(layer_id=2), write, k, k)
    got = s.token_to_kv_pool.get_key_buffer(2).reshape(-1, 2, 4)[swa_loc.long()]
    assert torch.equal(got, k.half())
    # SGLang's own mem_cache.common functions on the drop-in's objects.
    sa.free(ids)
    req_pool = mp.ReqToTokenPool(size=4, max_context_len=64, device=DEV, enable_memory_saver=False)
    r = types.SimpleNamespace(req_pool_idx=None, kv=None, cache_protected_len=0,
                              inflight_middle_chunks=0, kv_committed_len=0)
    assert req_pool.alloc([r]) is not None
    toks = sa.alloc(24)
    req_pool.write((r.req_pool_idx, slice(0, 24)), toks.to(torch.int32))
    r.kv = types.SimpleNamespace(swa_evicted_seqlen=0)
    common.free_swa_out_of_window_slots(
        r, 24, sliding_window_size=8, page_size=2, req_to_token_pool=req_pool,
        token_to_kv_pool_allocator=sa,
    )
    gone = r.kv.swa_evicted_seqlen
    assert gone == 16, gone
    assert bool((sa.translate_loc_from_full_to_swa(toks[:gone]) == 0).all())
    assert bool((sa.translate_loc_from_full_to_swa(toks[gone:]) > 0).all())
    asked = []
    tree = types.SimpleNamespace(is_chunk_cache=lambda: False, token_to_kv_pool_allocator=sa,
                                 evict=asked.append)
    common.evict_from_tree_cache(tree, sa.full_available_size() + 2)
    assert len(asked) == 1 and asked[0].num_tokens == 2  # the SWA-allocator branch
    try:  # a bare loc carries no swa_loc: SGLang's assertion, typed
        s.token_to_kv_pool.set_kv_buffer(types.SimpleNamespace(layer_id=2), ids, k, k)
        raise SystemExit("a bare loc was accepted for an SWA layer")
    except AssertionError as exc:
        assert "swa_loc" in str(exc)
    print("call sites ok")
    """
)


def test_sglang_call_sites_import_and_isinstance_check_the_dropin() -> None:
    res = run_child(CALL_SITES, child_env())
    assert res.returncode == 0 and "call sites ok" in res.stdout, (
        res.stdout[-4000:] + res.stderr[-4000:]
    )


LATE_INSTALL = textwrap.dedent(
    """
    import sglang_stubs
    sglang_stubs.pytest_configure(None)
    from sglang.srt.managers import schedule_policy  # binds SGLang's allocator class
    import ukv.integrations.sglang as dropin
    from ukv.integrations.sglang.errors import SGLangInstallError
    try:
        dropin.install()
        raise SystemExit("a late install was accepted")
    except SGLangInstallError as exc:
        assert "multi_ended_allocator" in str(exc), exc
    assert not dropin.installed()
    print("late install refused")
    """
)


def test_a_late_install_into_sglang_is_refused() -> None:
    """Review F9: once SGLang's scheduler modules bound its classes, installing would give
    a mixed installation (admission without the drop-in's state-slot reservation)."""
    res = run_child(LATE_INSTALL, child_env())
    assert res.returncode == 0 and "late install refused" in res.stdout, (
        res.stdout[-4000:] + res.stderr[-4000:]
    )
