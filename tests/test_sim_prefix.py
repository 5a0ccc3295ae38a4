"""The prefix cache: token identity from Mooncake's block hashes, the radix tree (insert,
match, split, lock, evict, checkpoints), and hit rates on a hand-built trace whose answer is
worked out by hand for every layout's policy."""

from __future__ import annotations

import numpy as np
import pytest

from ukv import models
from ukv.sim import baselines, traces
from ukv.sim.backends import UnifiedBackend
from ukv.sim.clock import FixedClock
from ukv.sim.engine import simulate
from ukv.sim.prefix import RadixCache, build_identity

QWEN = models.load("Qwen3-Next-80B-A3B")

# r0: a 1200-token prompt (blocks 1, 2, 3: the last one partial) and a 100-token answer.
# r1: the next turn: r0's prompt, its answer, 200 new tokens (its block 2 differs: it now
#     holds r0's answer), so it shares r0's whole sequence, 1300 tokens.
# r2, r3: 600-token prompts sharing only r0's first block (a system prompt), 512 tokens.
PROMPT = [1200, 1500, 600, 600]
OUTPUT = [100, 50, 50, 50]
HASHES = (np.array([1, 2, 3]), np.array([1, 2, 7]), np.array([1, 9]), np.array([1, 11]))


def _ident():
    return build_identity(np.array(PROMPT), np.array(OUTPUT), HASHES)


def test_identity_from_block_hashes_and_continuations():
    ident = _ident()
    assert ident.common(1, 0) == 1300  # prompt and answer of r0
    assert ident.common(2, 0) == ident.common(2, 1) == ident.common(3, 2) == 512
    assert ident.shared_continuation == 1 and ident.shared_hash == 2
    none = build_identity(np.array(PROMPT), np.array(OUTPUT), None)
    assert none.common(1, 0) == 0  # no hashes: every prompt is new
    # A page's identity is the units covering it: equal iff the tokens are.
    assert ident.page_key(1, 0, 16) == ident.page_key(0, 0, 16)
    assert ident.page_key(2, 31, 16) == ident.page_key(0, 31, 16)
    assert ident.page_key(2, 32, 16) != ident.page_key(0, 32, 16)


class Counts:
    """A backend stand-in with unbounded room: tree handles are page counts."""

    def __init__(self) -> None:
        self.pages, self.ckpts, self.kind = 0, 0, "mamba"

    def tree_adopt(self, r, held, k, keep_window=False):
        self.pages += k
        return k, None

    def tree_free(self, h):
        self.pages -= h

    def tree_split(self, h, k):
        return k, h - k

    def ckpt_copy(self):
        self.ckpts += 1
        return 1

    def ckpt_donate(self, r):
        self.ckpts += 1
        return 1

    def ckpt_free(self, h):
        self.ckpts -= h

    def ckpt_units(self, h):
        return h


def _tree(needs_ckpt: bool = True, eviction: str = "lru") -> tuple[RadixCache, Counts]:
    b = Counts()
    return RadixCache(_ident(), b, 16, "sglang", eviction, needs_ckpt), b


def test_insert_match_split_and_checkpoints():
    c, b = _tree()
    n0, taken = c.insert(0, 1299 // 16, 0, 1299, "donate")  # r0 finished: 81 pages
    assert taken == 81 * 16 and b.pages == 81 and b.ckpts == 1 and n0.end == 81
    node, pages, branch = c.match(1, 1499)
    assert node is n0 and pages == 81 and branch == 81
    # r2 follows the tree for 32 pages, but no checkpoint ends there: a hybrid reuses nothing.
    assert c.match(2, 599)[1:] == (0, 32)
    # Caching r2 splits r0's node at 32: the upper part holds no checkpoint.
    n2, _ = c.insert(2, 37, 0, 600, "copy")
    upper = n2.parent
    assert (upper.start, upper.end, upper.ckpt) == (0, 32, None) and n0.parent is upper
    assert (n2.start, n2.end) == (32, 37) and b.pages == 81 + 5 and b.ckpts == 2
    assert c.ev_pages == 86 and c.ev_ckpt == 2
    # r3 shares those 32 pages: still no checkpoint there.
    assert c.match(3, 599)[1] == 0
    # Full-attention-only (no checkpoint needed): 32 pages are reusable.
    f, _ = _tree(needs_ckpt=False)
    f.insert(0, 81, 0, 1299, None)
    assert f.match(3, 599)[1] == 32


def test_duplicates_are_freed_and_locks_block_eviction():
    c, b = _tree()
    n0, _ = c.insert(0, 81, 0, 1299, "donate")
    # Another request whose pages the tree already holds: its copies are freed.
    node, taken = c.insert(1, 81, 0, 1299, "copy")
    assert node is n0 and taken == 81 * 16 and b.pages == 81 and b.ckpts == 1
    c.lock(n0)
    assert c.ev_pages == 0 and c.ev_ckpt == 0 and not c.evict("any")
    c.unlock(n0)
    assert c.ev_pages == 81 and c.evict("any") and b.pages == 0 and b.ckpts == 0
    assert c.nodes == 0 and not c.evict("any")


def test_eviction_order_and_tombstone_leaves():
    c, b = _tree(eviction="split")
    n0, _ = c.insert(0, 81, 0, 1299, "donate")
    n2, _ = c.insert(2, 37, 0, 600, "copy")
    # A state shortage drops the least recently used checkpoint (r0's); r0's leaf then has
    # no checkpoint and goes too (useless to a hybrid), its KV with it.
    assert c.evict("ckpt") and not n0.alive and b.ckpts == 1 and b.pages == 37
    assert n2.alive and n2.ckpt is not None
    # A KV shortage frees the remaining leaf, and its checkpoint-less parent after it.
    assert c.evict("full") and b.pages == 0 and b.ckpts == 0 and c.nodes == 0


def _hand_trace():
    return traces.Trace(
        "hand", np.array([0.0, 100, 200, 300]), np.array(PROMPT), np.array(OUTPUT), "", HASHES
    )


@pytest.mark.parametrize(
    "model,layout,hit",
    [
        # SGLang's checkpoints (prompt end, sequence end): r1 reuses r0's 1299 cached tokens
        # down to a page, 1296; the shared system prompt has no checkpoint.
        ("Qwen3-Next-80B-A3B", "sglang-default", 1296),
        ("Qwen3-Next-80B-A3B", "ukv", 1296),
        # Marconi checkpoints r2's branch point at 512, so r3 reuses it.
        ("Qwen3-Next-80B-A3B", "ukv-marconi", 1296 + 512),
        # vLLM's align mode: states on its 544-token block grid only: 2 blocks.
        ("Qwen3-Next-80B-A3B", "vllm", 2 * 544),
        # Gemma in SGLang: every layer full KV, any cached prefix is reusable.
        ("Gemma-3-27B", "sglang-default", 1296 + 512 + 512),
        # Gemma's hybrid layouts need the window's KV: kept where checkpoints are.
        ("Gemma-3-27B", "ukv", 1296),
    ],
)
def test_hit_rates_on_a_hand_built_trace(model, layout, hit):
    c = baselines.compare(models.load(model), 40 << 30, _hand_trace(), layouts=(layout,))
    s = c.summaries[layout]
    assert s["completed"] == 4
    assert s["token_hit_rate"] == pytest.approx(hit / sum(PROMPT), abs=1e-6)


def test_everything_the_tree_holds_is_returned_by_eviction():
    t = traces.Trace(
        "hand", np.array([0.0, 0.5, 1.0, 1.5]), np.array(PROMPT), np.array(OUTPUT), "", HASHES
    )
    b = UnifiedBackend(QWEN, 4 << 30, 16, 2000)
    c = RadixCache(_ident(), b, 16, "sglang", "lru", True)
    run = simulate(t, b, clock=FixedClock(), cache=c)
    assert run.rejected == 0 and np.isfinite(run.finished_at).all()
    assert b.usage() != (0, 0)  # the cache holds sequences and states
    while c.evict("any"):
        pass
    assert b.usage() == (0, 0) and c.nodes == 0 and c.ev_pages == 0 and c.ev_ckpt == 0


class Windows(Counts):
    """Counts, with sliding-window checkpoints: a donated window is 4 pages, and a
    checkpoint splits and merges like a page count."""

    def ckpt_donate(self, r):
        self.ckpts += 4
        return 4

    def ckpt_split(self, h, k):
        return k, h - k

    def ckpt_merge(self, a, b):
        return a + b


@pytest.mark.parametrize("eviction", ["lru", "split"])
def test_window_pages_that_slid_out_are_as_recent_as_the_slide_under_one_lru(eviction):
    b = Windows()
    c = RadixCache(_ident(), b, 16, "sglang", eviction, True)
    n0, _ = c.insert(0, 81, 0, 1299, "donate")  # inserted first: the older node
    n2, _ = c.insert(2, 37, 0, 600, "copy")
    # A request runs on r0's node (its path and its window locked, as the engine does)...
    c.lock(n0, ckpt=False)
    assert c.lock_ckpt(n0)
    # ...and its window leaves 2 of the checkpoint's 4 pages: those become evictable.
    c.trim(n0, 2)
    assert n0.loose == 2 and n0.ckpt == 2 and c.ev_ckpt == 2 + 1
    assert c.evict("any" if eviction == "lru" else "ckpt")
    if eviction == "lru":
        # vLLM's free queue: the pages are as recent as their slide, newer than r2's node,
        # which goes first (its leaf, with its checkpoint); r0's window stays whole.
        assert not n2.alive and not n0.broken and n0.loose == 2
    else:
        # SGLang's SWA LRU: r0's node was inserted first, so its loose pages go first and
        # its window checkpoint breaks.
        assert n2.alive and n0.broken and n0.loose is None
