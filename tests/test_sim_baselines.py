"""The baselines as engines run them: Jenga's LCM pages, SGLang's slot cap and its Gemma
layout, the per-phase split, and the tree side of every backend."""

from __future__ import annotations

import numpy as np
import pytest

from ukv import models
from ukv.sim import baselines, traces
from ukv.sim.backends import PaddedBackend, SplitBackend, UnifiedBackend, sglang_default_share
from ukv.sim.clock import FixedClock
from ukv.sim.jenga import JengaBackend, JengaGeometry, Slab

QWEN = models.load("Qwen3-Next-80B-A3B")  # one attention layer 2,048 B/token; one GDN layer
GPT_OSS = models.load("gpt-oss-120b")  # 2,146,304 B of state (fp32 temporal)
NEMOTRON = models.load("Nemotron-Nano-9B-v2")


def test_jenga_large_page_is_the_lcm_of_the_per_layer_pages():
    g = JengaGeometry(QWEN, 40 << 30, 16)
    # 16 tokens x 2,048 B = 32,768 B; one state layer 8192x3 bf16 conv + 32x128x128 fp32
    # = 49,152 + 2,097,152 = 2,146,304 B; lcm = 4,292,608 B = 131 pages = 2 states.
    assert (g.small_full, g.small_other) == (32_768, 2_146_304)
    assert g.large == 4_292_608 == 131 * 32_768 == 2 * 2_146_304
    assert (g.per_large_full, g.per_large_other) == (131, 2)
    assert g.count == (40 << 30) // 4_292_608
    assert (g.layers_full, g.layers_other) == (12, 36)
    n = JengaGeometry(NEMOTRON, 40 << 30, 16)  # 41,536 KiB: 649 pages or 8 states
    assert n.large == 41_536 * 1024 and (n.per_large_full, n.per_large_other) == (649, 8)
    o = JengaGeometry(GPT_OSS, 40 << 30, 16)  # equal per-layer pages: no large page at all
    assert o.large == o.small_full == o.small_other == 32_768


def test_slab_keeps_a_large_page_while_any_small_page_lives():
    s = Slab(4, 10)
    a = s.alloc(3)  # one large page, 1 hole
    assert s.used == 1 and s.room == 1 and set(a.tolist()) == {a[0]}
    b = s.alloc(2)  # fills the hole, opens a second
    assert s.used == 2 and s.room == 3 and b[0] == a[0]
    s.free(a[:2])  # the first page still holds one of a and one of b
    assert s.used == 2 and s.room == 5
    assert s.new_needed(5) == 0 and s.new_needed(6) == 1
    s.free(np.concatenate([a[2:], b]))
    assert s.used == 0 and s.room == 0


def test_jenga_strands_half_empty_large_pages_of_the_other_kind():
    total = 4_292_608 * 12 * 4  # four large pages per attention layer's worth
    j = JengaBackend(QWEN, total, 16)
    # Admit 2 requests: 36 state layers x 1 large page (2 states each).
    assert j.admit(0) and j.admit(1) and j.so.used == 1
    free0 = j._free_large()
    j.release(np.array([0]), np.array([0]))
    assert j.so.used == 1 and j._free_large() == free0  # still held by request 1's state
    j.release(np.array([1]), np.array([0]))
    assert j.so.used == 0 and j._free_large() == j.geo.count


def test_sglang_caps_running_requests_at_a_third_of_its_state_slots():
    t = traces.chat(5)
    s = baselines.Setup(QWEN, 40 << 30, t, lambda sh: FixedClock(), 16, None, True)
    share = sglang_default_share(QWEN)
    split = SplitBackend(QWEN, 40 << 30, share, 16, "s")
    assert split.other_cap == 263  # 0.9/1.9 of 40 GiB in 77,266,944-byte states

    def cap(label: str) -> int | None:
        lay = baselines.LAYOUTS[label]
        b, sh = baselines.make_backend(lay, s, share)
        return baselines._cap(lay, s, sh, b)

    assert cap("sglang-default") == 263 // 3 == cap("sglang-unified")
    assert cap("sglang-radix-off") == 263
    assert cap("ukv") == 3413  # SGLang's estimate: tokens / context * 512, in [2048, 4096]
    assert cap("vllm") is None


def test_gemma_runs_every_layer_full_in_sglang():
    g = models.load("Gemma-3-27B")
    assert not baselines.sglang_runs_hybrid(g) and baselines.sglang_runs_hybrid(GPT_OSS)
    full = baselines.all_full_shape(g)
    assert full.kind == "full" and full.kv_bytes_per_token() == 62 * 2 * 16 * 128 * 2
    c = baselines.compare(g, 8 << 30, traces.chat(20, seed=1),
                          layouts=("ukv", "sglang-default", "sglang-unified"))  # fmt: skip
    assert c.summaries["sglang-default"]["share"] == "all layers full"
    assert "sglang-unified" not in c.summaries  # SGLang refuses its unified pool for Gemma


def test_per_phase_split_changes_budgets_at_the_boundaries():
    b = baselines.PhasedSplitBackend(QWEN, 8 << 30, [(0.0, 0.2), (10.0, 0.6)], 16, "p")
    caps = b.other_cap
    b.on_time(5.0)
    assert b.other_cap == caps
    b.on_time(10.0)
    assert b.other_cap == int((8 << 30) * 0.6) // QWEN.state_bytes_per_request() > caps


@pytest.mark.parametrize("kind", ["split", "padded", "unified", "jenga"])
def test_tree_adoption_keeps_the_bytes_and_frees_them_later(kind):
    mem = 8 << 30
    b = {
        "split": lambda: SplitBackend(QWEN, mem, 0.5, 16, "s"),
        "padded": lambda: PaddedBackend(QWEN, mem),
        "unified": lambda: UnifiedBackend(QWEN, mem, 16, 4096),
        "jenga": lambda: JengaBackend(QWEN, mem, 16),
    }[kind]()
    g = b.page_tokens
    assert b.admit(7) and b.grow(np.array([7]), np.array([0]), np.array([3 * g + 5]))
    used = b.usage()
    kv, win = b.tree_adopt(7, 3 * g + 5, 3)  # three pages to the tree, 5 tokens stay
    assert win is None and b.usage() == used
    st = b.ckpt_donate(7)
    assert st is not None and b.ckpt_units(st) == 1
    b.release(np.array([7]), np.array([5]))
    upper, lower = b.tree_split(kv, 1)
    b.tree_free(upper)
    b.tree_free(lower)
    b.ckpt_free(st)
    assert sum(b.usage()) == 0
