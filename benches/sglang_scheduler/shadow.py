"""The shadow model: what every live token's K/V and every live state slot must hold.

Keyed by *virtual* ids, which relocation never changes. A token's K/V must hold its
content key (``values``): the key of the tokens up to it, whichever request wrote it.
The shadow records, per virtual token, the key of its last write and whether that write
has landed (its forward completed). After every scheduler iteration :meth:`Shadow.check`
reads back, through the pools' own translation and views:

* every token a request holds (``req_to_token`` up to ``kv_allocated_len``): its
  recorded key must be the request's key at that position (the radix cache handed out
  the right prefix), and once landed its bytes must match on every full layer, and on
  every SWA layer for the tokens inside the request's window (which must be mapped);
* every token the tree cache holds (its nodes' values, with the keys of the node's path);
* every live state: a running request's slot holds the state of the tokens its landed
  forwards covered, a tree node's slot the state of its path.

A mismatch raises :class:`LostBytes` naming the token, layer and bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from sglang_scheduler import release, values
from sglang_scheduler.forward import Launched, gather_rows
from sglang_scheduler.stack import KV_DTYPE, Stack
from sglang_scheduler.trace import Arrival, sampled_token


class LostBytes(AssertionError):
    """A live token's K/V or a live state read back wrong."""


class Sequence:
    """A request's tokens (prompt, then the tokens it samples) and their content keys."""

    def __init__(self, arrival: Arrival, vocab: int) -> None:
        self.index = arrival.index
        self.prompt = arrival.prompt
        self.vocab = vocab
        self._keys = np.empty(0, dtype=np.int64)

    def token(self, p: int) -> int:
        if p < len(self.prompt):
            return self.prompt[p]
        return sampled_token(self.index, p, self.vocab)

    def keys(self, n: int) -> np.ndarray:
        """Content keys of positions ``0..n-1``."""
        have = len(self._keys)
        if n > have:
            start = int(self._keys[-1]) if have else values._SEED
            more = values.chain([self.token(p) for p in range(have, n)], start)
            self._keys = np.concatenate([self._keys, more])
        return self._keys[:n]


class Shadow:
    """Recorded writes and the read-back check."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.seqs: dict[str, Sequence] = {}
        self.key_of = np.zeros(1024, dtype=np.int64)
        self.landed = np.zeros(1024, dtype=bool)
        self.state_len: dict[int, int] = {}  # request index -> tokens its state covers
        self.state_writers: dict[int, int] = {}  # request index -> forwards in flight
        self.pending: list[Launched] = []
        self.checks = 0
        self.tokens_checked = 0
        self.states_checked = 0

    # ----- bookkeeping -------------------------------------------------------------------------

    def add(self, arrival: Arrival) -> None:
        self.seqs[arrival.rid] = Sequence(arrival, self.stack.config.vocab)

    def __getitem__(self, req: Any) -> Sequence:
        return self.seqs[req.rid]

    def _grow(self, top: int) -> None:
        if top >= len(self.key_of):
            n = max(top + 1, 2 * len(self.key_of))
            self.key_of = np.resize(self.key_of, n)
            self.landed = np.resize(self.landed, n)

    def launched(self, forward: Launched) -> None:
        """A forward was launched: its tokens hold these keys once it lands, and the state
        slots it updates in place are not checked until then."""
        if len(forward.vids):
            self._grow(int(forward.vids.max()))
            self.key_of[forward.vids] = forward.keys
            self.landed[forward.vids] = False
        for index, _ in forward.states:
            self.state_writers[index] = self.state_writers.get(index, 0) + 1
        self.pending.append(forward)

    def poll(self) -> None:
        """Mark the forwards whose events completed as landed (launch order)."""
        while self.pending and self.pending[0].event.query():
            fwd = self.pending.pop(0)
            self.landed[fwd.vids] = True
            for index, n in fwd.states:
                self.state_len[index] = n
                self.state_writers[index] -= 1
            fwd.plan = None

    def forget_state(self, req: Any) -> None:
        """The request's state slot was released (finished or retracted)."""
        self.state_len.pop(self.seqs[req.rid].index, None)

    # ----- what is live --------------------------------------------------------------------

    def request_tokens(self, reqs: list[Any]) -> tuple[np.ndarray, np.ndarray, list]:
        """Virtual tokens the requests hold, their keys, and per request its window."""
        rows = self.stack.req_to_token_pool.req_to_token
        vids, keys, windows = [], [], []
        rel = release.current()
        for req in reqs:
            if not rel.holds_kv(req) or rel.row(req) is None:
                continue
            n = rel.allocated_len(req)
            v = rows[rel.row(req), :n].to(torch.int64).cpu().numpy()
            k = self[req].keys(n)
            vids.append(v)
            keys.append(k)
            lo = max(rel.swa_evicted_len(req), rel.committed_len(req) - self.stack.config.window)
            windows.append(v[max(lo, 0) :])
        cat = lambda xs: np.concatenate(xs) if xs else np.empty(0, np.int64)  # noqa: E731
        return cat(vids), cat(keys), windows

    def tree_tokens(self) -> Iterator[tuple[np.ndarray, np.ndarray, Any]]:
        """(virtual tokens, keys, state slot or None) of every node of the tree cache."""
        root = getattr(self.stack.tree_cache, "root_node", None)
        if root is None:  # the chunk cache keeps nothing
            return
        todo = [(root, values._SEED)]
        while todo:
            node, h = todo.pop()
            for child in node.children.values():
                toks = _key_tokens(child.key)
                if not len(toks):
                    continue
                keys = values.chain(toks, h)
                full, mamba = _node_values(child)
                if full is not None:
                    yield full.to(torch.int64).cpu().numpy(), keys, mamba
                todo.append((child, int(keys[-1])))

    # ----- the check ---------------------------------------------------------------------

    def check(self, reqs: list[Any], where: str) -> None:
        """Read back every live token and state (see the module docstring).

        Raises:
            LostBytes: the first thing that reads back wrong.
        """
        self.poll()
        self.checks += 1
        vids, keys, windows = self.request_tokens(reqs)
        self._check_recorded(vids, keys, f"{where}: a request's token")
        tree = list(self.tree_tokens())
        for tv, tk, _ in tree:
            self._check_recorded(tv, tk, f"{where}: a tree token")
        all_v = np.concatenate([vids] + [t[0] for t in tree])
        all_k = np.concatenate([keys] + [t[1] for t in tree])
        live = self.landed[all_v]
        self._check_bytes(all_v[live], all_k[live], where)
        if self.stack.is_swa:
            self._check_windows(windows, where)
        if self.stack.is_mamba:
            self._check_states(reqs, tree, where)

    def _check_recorded(self, vids: np.ndarray, keys: np.ndarray, what: str) -> None:
        if not len(vids):
            return
        self._grow(int(vids.max()))
        wrong = np.nonzero(self.key_of[vids] != keys)[0]
        if len(wrong):
            i = int(wrong[0])
            raise LostBytes(
                f"{what}: virtual token {int(vids[i])} was written for another prefix "
                f"({len(wrong)} such tokens)"
            )

    def _check_bytes(self, vids: np.ndarray, keys: np.ndarray, where: str) -> None:
        st = self.stack
        if not len(vids):
            return
        vids, idx = np.unique(vids, return_index=True)
        keys = keys[idx]
        dev = st.config.device
        v = torch.from_numpy(vids).to(dev)
        k = torch.from_numpy(keys).to(dev)
        self.tokens_checked += len(vids)
        phys = st.allocator.translate_kv_loc(v)
        for layer_id in st.full_layers:
            self._compare(layer_id, phys, k, vids, f"{where}: full layer")
        if st.is_swa:
            swa = st.token_to_kv_pool.translate_loc_from_full_to_swa(v).to(torch.int64)
            mapped = (swa > 0).cpu().numpy()
            if mapped.any():
                m = torch.from_numpy(mapped).to(dev)
                for layer_id in st.swa_layers:
                    self._compare(layer_id, swa[m], k[m], vids[mapped], f"{where}: SWA layer")

    def _compare(self, layer_id: int, phys: Any, keys: Any, vids: np.ndarray, what: str) -> None:
        pool = self.stack.token_to_kv_pool
        hd = self.stack.config.head_num * self.stack.config.head_dim
        for kind, view in (
            (values.K, pool.get_key_buffer(layer_id)),
            (values.V, pool.get_value_buffer(layer_id)),
        ):
            got = gather_rows(view, phys)
            want = values.encode(keys, layer_id, kind, hd, KV_DTYPE)
            bad = (got != want).any(dim=1).cpu().numpy()
            if bad.any():
                i = int(np.nonzero(bad)[0][0])
                raise LostBytes(
                    f"{what} {layer_id} ({'KV'[kind]}): {int(bad.sum())} of {len(vids)} live "
                    f"tokens read back wrong, e.g. virtual {int(vids[i])} at physical "
                    f"{int(phys[i])}: {got[i][:4].tolist()} != {want[i][:4].tolist()}"
                )

    def _check_windows(self, windows: list, where: str) -> None:
        """Every landed token inside a request's window must be mapped on the SWA side."""
        st = self.stack
        for w in windows:
            w = w[self.landed[w]] if len(w) else w
            if not len(w):
                continue
            swa = st.token_to_kv_pool.translate_loc_from_full_to_swa(
                torch.from_numpy(w).to(st.config.device)
            )
            if not bool((swa > 0).all()):
                raise LostBytes(f"{where}: a token inside a request's window has no SWA slot")

    def _check_states(self, reqs: list[Any], tree: list, where: str) -> None:
        slots, keys = [], []
        for req in reqs:
            idx = self[req].index
            slot = release.current().mamba_idx(req)
            if slot is None or idx not in self.state_len:
                continue
            if self.stack.config.device == "cuda" and self.state_writers.get(idx, 0):
                continue  # a forward still running on the GPU updates it in place
            slots.append(int(torch.as_tensor(slot).reshape(())))
            keys.append(int(self[req].keys(self.state_len[idx])[-1]))
        for _, tk, mamba in tree:
            if mamba is not None:
                slots.append(int(torch.as_tensor(mamba).reshape(-1)[0]))
                keys.append(int(tk[-1]))
        if not slots:
            return
        self.states_checked += len(slots)
        st = self.stack
        pool = st.req_to_token_pool
        dev = st.config.device
        phys = pool.translate_mamba_indices(torch.tensor(slots, device=dev)).to(torch.int64)
        k = torch.tensor(keys, dtype=torch.int64, device=dev)
        for layer_id in st.mamba_layers:
            cache = pool.mamba2_layer_cache(layer_id)
            tensors = [(values.CONV, t) for t in cache.conv] + [(values.TEMPORAL, cache.temporal)]
            for i, (kind, t) in enumerate(tensors):
                numel = int(np.prod(t.shape[1:]))
                got = t[phys].reshape(len(slots), -1)
                want = values.encode(k, layer_id, kind + i, numel, t.dtype)
                bad = (got != want).any(dim=1).cpu().numpy()
                if bad.any():
                    j = int(np.nonzero(bad)[0][0])
                    raise LostBytes(
                        f"{where}: state layer {layer_id} tensor {i}: {int(bad.sum())} of "
                        f"{len(slots)} live states read back wrong, e.g. virtual slot "
                        f"{slots[j]} at physical {int(phys[j])}"
                    )


def _key_tokens(key: Any) -> Any:
    if key is None:
        return []
    if hasattr(key, "raw_token_ids"):
        return key.raw_token_ids()
    return key


def _node_values(node: Any) -> tuple[Any, Any]:
    """(full-attention virtual tokens, state slot) of a node of any of SGLang's trees."""
    if hasattr(node, "component_data"):  # UnifiedRadixCache
        ComponentType = release.current().component_type()  # noqa: N806

        full = node.component(ComponentType.FULL).value
        mamba = node.component(ComponentType.MAMBA).value
        return full, mamba
    return node.value, getattr(node, "mamba_value", None)
