"""Prefix caching: which tokens two requests share, and a radix cache over them.

**Token identity** (:func:`build_identity`). Mooncake's ``hash_ids`` name the 512-token
blocks of each prompt; an id is positional and chained (the same id is the same prefix).
In the conversation trace a later turn extends an earlier one: its prompt is the earlier
prompt, the earlier answer, then new text, so its hash list starts with the earlier
request's *full* blocks (the earlier partial last block differs: it now holds the answer
too). From that the identity of every token is rebuilt, in arrival order:

* the longest prefix of ``k`` blocks seen before is shared with the request that
  introduced block ``k - 1`` (``512 k`` tokens, capped at the prompt);
* if an earlier request ``j`` has all its full blocks in that prefix and
  ``prompt_j + output_j`` tokens fit in this prompt, this request continues ``j``: it
  shares ``j``'s whole sequence (prompt and answer), when that is longer;
* the rest of the prompt, and the answer, are new.

Each request's tokens become a list of *units* (runs of one token stream, cut wherever any
request's sharing starts or stops), so two requests share exactly their common leading
units. A trace without ``hash_ids`` has no sharing (every prompt is new).

**The radix cache** (:class:`RadixCache`) is a tree over pages of ``G`` tokens (the layout's
page, or vLLM's block). A node owns the KV of its pages (a handle of the backend's) and may
hold a *checkpoint* at its end: what a hybrid needs besides KV to resume there (a Mamba
state; for sliding-window models, the window's KV). A request may reuse a cached prefix
that ends at a checkpoint (models with only full attention: any cached prefix). Where the
checkpoints are taken is the *policy*:

* ``sglang`` — SGLang's ``MambaRadixCache`` / SWA radix cache: after every prefill chunk
  and at the end of the prompt (``cache_unfinished_req``, a copied state), and at the end
  of the sequence when the request finishes (``cache_finished_req``, the request's own
  state donated);
* ``vllm`` — vLLM's prefix caching in ``mamba_cache_mode="align"``: states only on the
  block grid (``B`` tokens), at the last boundary of each prefill chunk and at every
  boundary crossed while decoding; only whole blocks are cached;
* ``marconi`` — Marconi (MLSys'25): admission by reuse likelihood: a checkpoint only where
  a request diverges from a cached path (a branch point, taken during its prefill) and at
  the end of each finished sequence (input and output), never at chunk ends;
* ``none`` — a full-attention-only layout (no checkpoints needed).

Eviction (``evict``): ``split`` is SGLang's: a shortage of KV evicts the least recently used
unlocked leaf (its KV and checkpoint), a shortage of state / window memory drops the least
recently used unlocked checkpoint (a node that still has children keeps its KV); ``lru`` is
one evictable pool: the least recently used of both kinds, whatever ran short; ``flops`` is
Marconi's: the candidate with the lowest ``recency + ALPHA * FLOPs saved per byte`` (both
normalised over the candidates).

Locks: a running request locks the node its cached prefix ends at (the path's KV and that
node's checkpoint), as SGLang's ``inc_lock_ref`` does; locked memory is never evicted.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

HASH_BLOCK = 512
"""Tokens per Mooncake hash block."""
POLICIES = ("sglang", "vllm", "marconi", "none")
EVICTIONS = ("split", "lru", "flops")
ALPHA = 1.0
"""Marconi's weight of FLOP efficiency against recency (the paper tunes it online; fixed
here)."""


# ----- token identity -------------------------------------------------------------------------


@dataclass
class Identity:
    """Every request's tokens as units (see the module docstring).

    Attributes:
        uids: Per request, shape ``[U]`` int64 unit ids, prompt then output.
        ends: Per request, shape ``[U]`` int64 token position where each unit ends.
        prompt_len: shape ``[N]`` prompt tokens.
        shared_hash: Requests whose prefix was shared through hash blocks.
        shared_continuation: Requests that continue an earlier request's sequence.
    """

    uids: list[np.ndarray]
    ends: list[np.ndarray]
    prompt_len: np.ndarray
    shared_hash: int = 0
    shared_continuation: int = 0

    def __post_init__(self) -> None:
        self._u = [u.tolist() for u in self.uids]
        self._e = [e.tolist() for e in self.ends]
        self._common: dict[tuple[int, int], int] = {}
        self._keys: dict[tuple[int, int, int], tuple] = {}

    def __len__(self) -> int:
        return len(self.uids)

    def common(self, a: int, b: int) -> int:
        """Tokens requests ``a`` and ``b`` share from the start."""
        key = (a, b) if a < b else (b, a)
        got = self._common.get(key)
        if got is None:
            ua, ub, ea = self._u[a], self._u[b], self._e[a]
            k = 0
            for x, y in zip(ua, ub):
                if x != y:
                    break
                k += 1
            got = ea[k - 1] if k else 0
            self._common[key] = got
        return got

    def page_key(self, r: int, page: int, g: int) -> tuple:
        """The identity of tokens ``[page*g, (page+1)*g)`` of request ``r``: the units
        covering them, each with the offset it starts at."""
        ck = (r, page, g)
        got = self._keys.get(ck)
        if got is not None:
            return got
        ends, uids = self._e[r], self._u[r]
        lo, hi = page * g, (page + 1) * g
        i = bisect.bisect_right(ends, lo)
        key: list[int] = []
        pos = lo
        while pos < hi and i < len(uids):
            start = ends[i - 1] if i else 0
            key += [uids[i], pos - start]
            pos = ends[i]
            i += 1
        got = tuple(key)
        self._keys[ck] = got
        return got


def build_identity(
    prompt_len: np.ndarray,
    output_len: np.ndarray,
    hash_ids: list[np.ndarray] | None,
    block: int = HASH_BLOCK,
) -> Identity:
    """Rebuild every request's token identity (module docstring); requests in arrival
    order. Without ``hash_ids`` every prompt is new."""
    n = int(prompt_len.size)
    # pieces: per request, [(stream, a, b)]; streams 2i (prompt tail of i), 2i+1 (output)
    pieces: list[list[tuple[int, int, int]]] = []
    owner: dict[int, int] = {}  # hash id -> first request holding it
    by_last_full: dict[int, list[int]] = {}  # hash of a request's last full block -> requests
    shared_hash = shared_cont = 0
    for i in range(n):
        pl, ol = int(prompt_len[i]), int(output_len[i])
        src, shared = -1, 0
        h = hash_ids[i] if hash_ids is not None else None
        if h is not None and len(h):
            k = 0
            while k < len(h) and int(h[k]) in owner:
                k += 1
            if k:
                src, shared = owner[int(h[k - 1])], min(block * k, pl)
            cont, cont_len = -1, 0
            for m in range(min(k, len(h)) - 1, -1, -1):
                for j in by_last_full.get(int(h[m]), ()):
                    nj = len(hash_ids[j]) if hash_ids is not None else 0
                    total = int(prompt_len[j]) + int(output_len[j])
                    if nj - 2 == m and total <= pl and total >= cont_len:
                        cont, cont_len = j, total
                if cont >= 0:
                    break
            if cont >= 0 and cont_len >= shared:
                src, shared = cont, cont_len
                shared_cont += 1
            elif src >= 0:
                shared_hash += 1
            for x in h:
                owner.setdefault(int(x), i)
            if len(h) >= 2:
                by_last_full.setdefault(int(h[-2]), []).append(i)
        mine = _cut(pieces[src], shared) if src >= 0 and shared > 0 else []
        if pl > shared:
            mine.append((2 * i, 0, pl - shared))
        mine.append((2 * i + 1, 0, ol))
        pieces.append(mine)
    # Cut every stream wherever some request's piece starts or ends in it.
    cuts: dict[int, set[int]] = {}
    for ps in pieces:
        for s, a, b in ps:
            c = cuts.setdefault(s, set())
            c.add(a)
            c.add(b)
    sorted_cuts = {s: sorted(c) for s, c in cuts.items()}
    unit_id: dict[tuple[int, int], int] = {}
    uids, ends = [], []
    for ps in pieces:
        u: list[int] = []
        e: list[int] = []
        pos = 0
        for s, a, b in ps:
            cs = sorted_cuts[s]
            j = bisect.bisect_left(cs, a)
            while cs[j] < b:
                lo, hi = cs[j], cs[j + 1]
                u.append(unit_id.setdefault((s, lo), len(unit_id)))
                pos += hi - lo
                e.append(pos)
                j += 1
        uids.append(np.asarray(u, dtype=np.int64))
        ends.append(np.asarray(e, dtype=np.int64))
    return Identity(uids, ends, np.asarray(prompt_len, dtype=np.int64), shared_hash, shared_cont)


def _cut(ps: list[tuple[int, int, int]], length: int) -> list[tuple[int, int, int]]:
    """The first ``length`` tokens of a piece list."""
    out, pos = [], 0
    for s, a, b in ps:
        if pos >= length:
            break
        take = min(b - a, length - pos)
        out.append((s, a, a + take))
        pos += take
    return out


# ----- the radix cache ------------------------------------------------------------------------


class Node:
    """One run of cached pages ``[start, end)`` of request ``ref``'s tokens."""

    __slots__ = (
        "parent",
        "children",
        "ref",
        "start",
        "end",
        "kv",
        "ckpt",
        "lock",
        "ckpt_lock",
        "last",
        "alive",
        "key",
        "loose",
        "broken",
    )

    def __init__(self, parent: Node | None, ref: int, start: int, end: int, key: tuple) -> None:
        self.parent, self.ref, self.start, self.end, self.key = parent, ref, start, end, key
        self.children: dict[tuple, Node] = {}
        self.kv: Any = None
        self.ckpt: Any = None
        self.lock = 0
        self.ckpt_lock = 0
        self.last = 0
        self.alive = True
        # SWA window checkpoints only (see RadixCache.trim): pages of ``ckpt`` a locking
        # request's window has slid past (evictable though the rest is locked), and whether
        # eviction took some of them (the window is incomplete: no hit here any more).
        self.loose: Any = None
        self.broken = False

    @property
    def pages(self) -> int:
        return self.end - self.start


class RadixCache:
    """A radix tree of cached pages over a backend (module docstring).

    Args:
        ident: The trace's token identity.
        backend: The memory layout; it owns the bytes (see ``Backend``'s tree methods).
        page: Tokens per tree page ``G`` (the layout's page, or vLLM's block).
        policy: Where checkpoints are taken (:data:`POLICIES`).
        eviction: :data:`EVICTIONS`.
        needs_ckpt: Whether a reused prefix must end at a checkpoint (hybrids).
        flops: ``flops(a, b)``: FLOPs to prefill tokens ``[a, b)`` (Marconi's eviction).
        ckpt_bytes: Bytes of one checkpoint, ``page_bytes``: of one KV page (Marconi).
    """

    def __init__(
        self,
        ident: Identity,
        backend: Any,
        page: int,
        policy: str,
        eviction: str,
        needs_ckpt: bool,
        flops: Callable[[int, int], float] | None = None,
        ckpt_bytes: float = 1.0,
        page_bytes: float = 1.0,
    ) -> None:
        assert policy in POLICIES and eviction in EVICTIONS
        self.ident, self.backend, self.G = ident, backend, int(page)
        self.policy, self.eviction, self.needs_ckpt = policy, eviction, needs_ckpt
        self.flops = flops or (lambda a, b: float(b - a))
        self.ckpt_bytes, self.page_bytes = float(ckpt_bytes), float(page_bytes)
        self.root = Node(None, -1, 0, 0, ())
        self.root.lock = 1
        self.clock = 0
        self.ev_pages = 0  # pages of unlocked nodes
        self.ev_ckpt = 0  # checkpoint units of nodes whose checkpoint is unlocked
        self.leaf_heap: list[tuple[int, int, Node]] = []
        self.ckpt_heap: list[tuple[int, int, Node]] = []
        self._seq = 0
        self.nodes = 0
        self.ckpts = 0
        self.evicted_pages = 0
        self.evicted_ckpts = 0

    # -- bookkeeping --

    def _touch(self, node: Node) -> None:
        self.clock += 1
        node.last = self.clock
        self._push(node)

    def _push(self, node: Node) -> None:
        if node is self.root or not node.alive:
            return
        self._seq += 1
        if not node.children and node.lock == 0:
            heapq.heappush(self.leaf_heap, (node.last, self._seq, node))
        if self._ckpt_evictable(node):
            heapq.heappush(self.ckpt_heap, (node.last, self._seq, node))

    @staticmethod
    def _ckpt_evictable(node: Node) -> bool:
        return (node.ckpt is not None and node.ckpt_lock == 0) or node.loose is not None

    def _ckpt_units(self, node: Node) -> int:
        return int(self.backend.ckpt_units(node.ckpt)) if node.ckpt is not None else 0

    def lock(self, node: Node | None, ckpt: bool = True) -> None:
        """Lock ``node``'s path (KV) and, with ``ckpt``, its checkpoint."""
        if node is None or node is self.root:
            return
        if ckpt:
            self.lock_ckpt(node)
        x: Node | None = node
        while x is not None and x is not self.root:
            if x.lock == 0:
                self.ev_pages -= x.pages
            x.lock += 1
            x = x.parent

    def unlock(self, node: Node | None, ckpt: bool = True) -> None:
        """Undo :meth:`lock` (the same ``ckpt``)."""
        if node is None or node is self.root:
            return
        if ckpt:
            self._unlock_ckpt(node)
        x: Node | None = node
        while x is not None and x is not self.root:
            x.lock -= 1
            assert x.lock >= 0
            if x.lock == 0:
                self.ev_pages += x.pages
            self._push(x)
            x = x.parent

    def lock_ckpt(self, node: Node | None) -> bool:
        """Lock ``node``'s checkpoint alone (False: it has none, nothing locked)."""
        if node is None or node is self.root or node.ckpt is None:
            return False
        if node.loose is not None:  # a new user needs the whole window again
            self.ev_ckpt -= int(self.backend.ckpt_units(node.loose))
            node.ckpt = self.backend.ckpt_merge(node.loose, node.ckpt)
            node.loose = None
            if node.ckpt_lock == 0:
                self.ev_ckpt += self._ckpt_units(node)
        if node.ckpt_lock == 0:
            self.ev_ckpt -= self._ckpt_units(node)
        node.ckpt_lock += 1
        return True

    def unlock_ckpt(self, node: Node | None, slid: bool = False) -> None:
        """Undo :meth:`lock_ckpt`; ``slid``: the locking request's window left it (see
        :meth:`_released`)."""
        if self._unlock_ckpt(node):
            self._released(node, slid)  # type: ignore[arg-type]

    def _released(self, node: Node, slid: bool) -> None:
        """Window pages left a request's window: evictable from now. Under one ``lru``
        pool (ukv, Jenga, vLLM) their recency is this moment, as vLLM's free queue orders a
        block by when it was freed; SGLang's per-side eviction (``split``) keeps the node's
        recency (last inserted or matched), as its SWA LRU does."""
        if slid and self.eviction == "lru":
            self._touch(node)
        else:
            self._push(node)

    def _unlock_ckpt(self, node: Node | None) -> bool:
        if node is None or node is self.root:
            return False
        if node.ckpt is not None and node.ckpt_lock > 0:
            node.ckpt_lock -= 1
            if node.ckpt_lock == 0:
                if node.loose is not None:  # whole again: one evictable checkpoint
                    self.ev_ckpt -= int(self.backend.ckpt_units(node.loose))
                    node.ckpt = self.backend.ckpt_merge(node.loose, node.ckpt)
                    node.loose = None
                self.ev_ckpt += self._ckpt_units(node)
                if node.broken:  # part of its window was evicted: useless now
                    self._drop_ckpt(node)
                    self.evicted_ckpts -= 1  # counted when the part went
                    return False
                return True
        return False

    def trim(self, node: Node, k: int) -> None:
        """SWA: the oldest ``k`` pages of ``node``'s window checkpoint left the window of
        the one request that locks it. They stay cached (a hit here still needs them) but
        become evictable, as vLLM's and SGLang's out-of-window SWA blocks do; evicting them
        leaves the checkpoint incomplete (``broken``: no hit, freed when unlocked)."""
        if k <= 0 or node.ckpt is None or node.broken:
            return
        out, keep = self.backend.ckpt_split(node.ckpt, k)
        node.ckpt = keep
        node.loose = out if node.loose is None else self.backend.ckpt_merge(node.loose, out)
        self.ev_ckpt += int(self.backend.ckpt_units(out))
        self._released(node, slid=True)

    # -- matching --

    def _walk(self, r: int, limit: int) -> tuple[list[Node], Node | None, int]:
        """Nodes of the cached path ``r`` follows completely (within ``limit`` pages), and
        the next node with the pages of it ``r`` shares too (0 if none)."""
        path: list[Node] = []
        node, pos = self.root, 0
        while pos < limit:
            child = node.children.get(self.ident.page_key(r, pos, self.G))
            if child is None:
                return path, None, 0
            common = min(self.ident.common(r, child.ref) // self.G, limit)
            if common < child.end:
                return path, child, max(0, common - child.start)
            path.append(child)
            node, pos = child, child.end
        return path, None, 0

    def match(self, r: int, limit_tokens: int) -> tuple[Node | None, int, int]:
        """The longest reusable cached prefix of request ``r`` (at most ``limit_tokens``).

        Returns:
            ``(node, pages, branch)``: the node it ends at (None: nothing), its length in
            pages, and how far ``r`` follows the cached tree at all (``>= pages``; for
            Marconi's branch points).
        """
        limit = max(0, limit_tokens) // self.G
        path, partial, extra = self._walk(r, limit)
        branch = (path[-1].end if path else 0) + extra
        if not self.needs_ckpt:
            if partial is not None and extra > 0:
                partial = self._split(partial, partial.start + extra)
                path.append(partial)
            best = path[-1] if path else None
        else:
            best = None
            for x in reversed(path):
                if x.ckpt is not None and not x.broken:
                    best = x
                    break
        for x in path:
            self._touch(x)
        if best is None:
            return None, 0, branch
        return best, best.end, branch

    # -- insertion --

    def _split(self, node: Node, at: int) -> Node:
        """Cut ``node`` at page ``at``: returns the new upper part ``[start, at)``."""
        assert node.start < at < node.end
        parent = node.parent
        assert parent is not None
        upper = Node(parent, node.ref, node.start, at, node.key)
        upper.kv, node.kv = self.backend.tree_split(node.kv, at - node.start)
        upper.lock, upper.last = node.lock, node.last
        node.start = at
        node.key = self.ident.page_key(node.ref, at, self.G)
        upper.children[node.key] = node
        parent.children[upper.key] = upper
        node.parent = upper
        self.nodes += 1
        self._push(upper)
        return upper

    def insert(
        self, r: int, upto: int, own_from: int, held: int, ckpt: str | None
    ) -> tuple[Node, int]:
        """Cache request ``r``'s pages ``[0, upto)``; it owns pages ``[own_from, upto)``
        itself (``held`` own tokens, from page ``own_from``). Pages the tree already
        holds are duplicates: the request's copy is freed. ``ckpt``: ``"copy"`` (a new
        state), ``"donate"`` (the request's own state), ``"window"`` (the request's window
        KV), or None.

        Returns:
            ``(node, tokens)``: the node ending at ``upto`` (locked for ``r`` by the
            caller), and how many of ``r``'s own tokens the tree took or freed.
        """
        path, partial, extra = self._walk(r, upto)
        node = path[-1] if path else self.root
        pos = node.end if path else 0
        if partial is not None and extra > 0:
            node = self._split(partial, partial.start + extra)
            pos = node.end
        assert pos >= own_from, (pos, own_from)
        taken = 0
        b = self.backend
        if pos > own_from:  # duplicates of what another request cached meanwhile
            h, _ = b.tree_adopt(r, held, pos - own_from, keep_window=False)
            b.tree_free(h)
            taken += (pos - own_from) * self.G
        if upto > pos:
            leaf = Node(node, r, pos, upto, self.ident.page_key(r, pos, self.G))
            keep = ckpt == "window"
            leaf.kv, win = b.tree_adopt(r, held - taken, upto - pos, keep_window=keep)
            taken += (upto - pos) * self.G
            node.children[leaf.key] = leaf
            self.nodes += 1
            self.ev_pages += leaf.pages
            node = leaf
            if keep:
                self._set_ckpt(node, win)
        if ckpt in ("copy", "donate") and node is not self.root:
            if node.ckpt is None:
                h2 = b.ckpt_donate(r) if ckpt == "donate" else self._ckpt_alloc(node)
                self._set_ckpt(node, h2)
        self._touch(node)
        return node, taken

    def _set_ckpt(self, node: Node, handle: Any) -> None:
        if handle is None or node is self.root:
            return
        if node.ckpt is not None:  # already checkpointed here: ours is a duplicate
            self.backend.ckpt_free(handle)
            return
        node.ckpt = handle
        self.ckpts += 1
        if node.ckpt_lock == 0:
            self.ev_ckpt += self._ckpt_units(node)
        self._push(node)

    def _ckpt_alloc(self, node: Node) -> Any:
        """A new checkpoint (a state copy), evicting other checkpoints if it does not fit;
        None when nothing can make room (the checkpoint is skipped)."""
        self.lock(node)
        try:
            while True:
                h = self.backend.ckpt_copy()
                if h is not None:
                    return h
                if not self.evict(self._kind("ckpt")):
                    return None
        finally:
            self.unlock(node)

    def _kind(self, short: str) -> str:
        return short if self.eviction == "split" else "any"

    # -- eviction --

    def evict(self, kind: str) -> bool:
        """Free one evictable item: ``"full"`` (a leaf's KV and checkpoint), ``"ckpt"`` (a
        checkpoint), or ``"any"`` (the policy's pick). False when nothing is evictable."""
        if self.eviction == "flops":
            return self._evict_flops()
        if kind == "full":
            return self._evict_leaf()
        if kind == "ckpt":
            return self._evict_ckpt() or self._evict_leaf()
        leaf = self._peek(self.leaf_heap, leaf=True)
        ck = self._peek(self.ckpt_heap, leaf=False)
        if leaf is None and ck is None:
            return False
        if ck is None or (leaf is not None and leaf.last <= ck.last):
            return self._evict_leaf()
        return self._evict_ckpt()

    def _valid(self, node: Node, last: int, leaf: bool) -> bool:
        if not node.alive or node.last != last:
            return False
        if leaf:
            return not node.children and node.lock == 0
        return self._ckpt_evictable(node)

    def _peek(self, heap: list, leaf: bool) -> Node | None:
        while heap:
            last, _, node = heap[0]
            if self._valid(node, last, leaf):
                return node
            heapq.heappop(heap)
        return None

    def _evict_leaf(self) -> bool:
        node = self._peek(self.leaf_heap, leaf=True)
        if node is None:
            return False
        heapq.heappop(self.leaf_heap)
        self._remove_leaf(node)
        return True

    def _evict_ckpt(self) -> bool:
        node = self._peek(self.ckpt_heap, leaf=False)
        if node is None:
            return False
        heapq.heappop(self.ckpt_heap)
        if node.ckpt_lock > 0:  # only its slid-out pages are evictable
            self._drop_loose(node)
            return True
        self._drop_ckpt(node)
        if not node.children and node.lock == 0 and self.needs_ckpt:
            self._remove_leaf(node)
        return True

    def _drop_loose(self, node: Node) -> None:
        """Evict the slid-out pages of a locked window checkpoint (it breaks)."""
        self.ev_ckpt -= int(self.backend.ckpt_units(node.loose))
        self.backend.ckpt_free(node.loose)
        node.loose = None
        if not node.broken:
            node.broken = True
            self.evicted_ckpts += 1

    def _drop_ckpt(self, node: Node) -> None:
        if node.loose is not None:
            self.ev_ckpt -= int(self.backend.ckpt_units(node.loose))
            self.backend.ckpt_free(node.loose)
            node.loose = None
        if node.ckpt_lock == 0:
            self.ev_ckpt -= self._ckpt_units(node)
        self.backend.ckpt_free(node.ckpt)
        node.ckpt = None
        node.broken = False
        self.ckpts -= 1
        self.evicted_ckpts += 1

    def _remove_leaf(self, node: Node) -> None:
        """Free a leaf (its checkpoint, then its KV); a parent left as a leaf without a
        checkpoint is useless to a hybrid and goes too (SGLang's tombstone leaves)."""
        while True:
            assert not node.children and node.lock == 0 and node is not self.root
            if node.ckpt is not None:
                self._drop_ckpt(node)
            self.backend.tree_free(node.kv)
            self.ev_pages -= node.pages
            self.evicted_pages += node.pages
            node.alive = False
            parent = node.parent
            assert parent is not None
            del parent.children[node.key]
            self.nodes -= 1
            if (
                parent is self.root
                or parent.children
                or parent.lock
                or (parent.ckpt is not None or not self.needs_ckpt)
            ):
                if parent is not self.root:
                    self._push(parent)
                return
            node = parent

    def _evict_flops(self) -> bool:
        """Marconi: the unlocked leaf or checkpoint with the lowest recency + ALPHA *
        FLOP efficiency (each min-max normalised over the candidates)."""
        cands: list[tuple[Node, bool]] = []
        stack = list(self.root.children.values())
        while stack:
            x = stack.pop()
            stack.extend(x.children.values())
            if not x.children and x.lock == 0:
                cands.append((x, True))
            elif self._ckpt_evictable(x):
                cands.append((x, False))
        if not cands:
            return False
        rec = np.array([x.last for x, _ in cands], dtype=np.float64)
        eff = np.array([self._efficiency(x, leaf) for x, leaf in cands])
        score = _norm(rec) + ALPHA * _norm(eff)
        x, leaf = cands[int(np.argmin(score))]
        if leaf:
            self._remove_leaf(x)
        elif x.ckpt_lock > 0:
            self._drop_loose(x)
        else:
            self._drop_ckpt(x)
        return True

    def _efficiency(self, node: Node, leaf: bool) -> float:
        """FLOPs a hit on ``node`` saves over the nearest checkpoint above it, per byte
        that keeping it costs."""
        anc = node.parent
        while anc is not None and anc is not self.root and anc.ckpt is None:
            anc = anc.parent
        a = anc.end if anc is not None else 0
        saved = self.flops(a * self.G, node.end * self.G)
        cost = (node.pages * self.page_bytes if leaf else 0.0) + (
            self.ckpt_bytes if node.ckpt is not None else 0.0
        )
        return saved / max(cost, 1.0)

    # -- stats --

    def held(self) -> tuple[int, int]:
        """``(pages, checkpoints)`` the tree holds."""
        pages = 0
        stack = list(self.root.children.values())
        while stack:
            x = stack.pop()
            pages += x.pages
            stack.extend(x.children.values())
        return pages, self.ckpts


def _norm(x: np.ndarray) -> np.ndarray:
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)
