"""The model stand-in: a forward that writes and reads the pools as SGLang's layers do.

There is no model. A forward over a ``ScheduleBatch`` does, per SGLang's model runner and
Triton attention backend:

* at launch (the host side of the attention metadata): translate the batch's virtual
  ``out_cache_loc`` to physical (``allocator.translate_kv_loc`` for the full layers,
  ``token_to_kv_pool.translate_loc_from_full_to_swa`` for the SWA layers), the requests'
  context (``req_to_token`` rows) the same way, and the state slots
  (``req_to_token_pool.translate_mamba_indices``);
* on the forward stream (``events``): the deferred Mamba clear and copy-on-write
  (``mamba_pool.clear_slots`` / ``copy_from`` of the batch's ``mamba_clear_indices`` /
  ``mamba_cow_*``, as ``ModelRunner`` does before the layers); per attention layer
  ``token_to_kv_pool.set_kv_buffer(layer, KVWriteLoc(...), k, v)`` (the release's write
  loc: 0.5.16 takes the virtual ids with the translated ones, 0.5.23 the physical ids
  marked physical)
  with K/V rows that encode each token's content key (``values``), then a read of every
  context token the attention would read (all of it on full layers, the sliding window
  on SWA layers), compared with the keys; per Mamba layer a read of the request's state
  (which must be the state of its prefix, or zeros for a fresh slot) and a write of the
  state after the batch's tokens.

With ``speculative_num_draft_tokens`` (``Config.spec_drafts``), every decode forward of
the Mamba hybrid is a verify step, as SGLang's verify kernels and its accept path write
it: per Mamba layer, for batch row ``i`` and draft ``d``, the state after that draft goes
to the pool's per-draft scratch (``intermediate_ssm[i, d]``,
``intermediate_conv_window[k][i, d]``: rows by batch position) and is read back; a seeded
number of drafts is accepted and the last accepted draft's state is committed into the
request's own slot (translated with ``translate_mamba_indices``). The accepted draft's
state is the request's state after this step (the scheduler advances one token per
decode, so the accepted draft stands for that token); the rejected drafts hold states no
prefix has, so a commit of the wrong draft, row or slot is a lost state the shadow finds.

A read that does not match is a lost byte: it is counted (and, on the CPU, described)
and reported by the shadow's check.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import numpy as np
import torch

from sglang_scheduler import release, values
from sglang_scheduler.stack import KV_DTYPE, Stack


@dataclasses.dataclass
class Launched:
    """A launched forward: what lands with it, for the shadow's bookkeeping."""

    event: Any
    vids: np.ndarray  # virtual tokens written
    keys: np.ndarray  # their content keys
    states: list[tuple[int, int]]  # (request index, tokens its state now covers)
    step: int
    # The launch-time tensors the forward stream reads: kept alive until it lands (on CUDA
    # the caching allocator would otherwise hand their memory to the scheduler's stream).
    plan: dict[str, Any] | None = None


def gather_rows(view: torch.Tensor, phys: torch.Tensor) -> torch.Tensor:
    """Rows of a K or V buffer at physical tokens: ``[len(phys), H * D]``.

    Args:
        view: one layer's buffer, ``[num_pages, page_size, H, D]`` or ``[num_slots, H, D]``.
    """
    phys = phys.to(torch.int64)
    if view.dim() == 4:
        ps = view.shape[1]
        rows = view[phys // ps, phys % ps]
    else:
        rows = view[phys]
    return rows.reshape(phys.numel(), -1)


def _layer(layer_id: int) -> Any:
    """The attribute of SGLang's ``RadixAttention`` the pools read."""
    return types.SimpleNamespace(layer_id=layer_id, k_scale=None, v_scale=None)


class Forward:
    """Launches forwards of a :class:`Stack`; counts the lost bytes its reads find."""

    def __init__(self, stack: Stack, seqs: Any) -> None:
        self.stack = stack
        self.seqs = seqs  # request index -> Sequence (shadow)
        dev = stack.config.device
        self.read_errors = torch.zeros((), dtype=torch.int64, device=dev)
        self.details: list[str] = []
        self.cpu = dev == "cpu"
        # Speculative verify steps: how many, drafts written to the scratch, drafts
        # accepted (the committed one and those before it).
        self.spec = {"verify_steps": 0, "drafts_written": 0, "drafts_accepted": 0}

    # ----- launch (host side) -------------------------------------------------------------

    def launch(self, batch: Any, step: int) -> Launched:
        """Launch the forward of ``batch`` (already prepared by SGLang)."""
        st = self.stack
        plan = self._plan(batch)
        if st.is_mamba and st.config.spec_drafts and batch.forward_mode.is_decode():
            self._plan_verify(batch, plan, step)
        effects = lambda: self._effects(plan)  # noqa: E731
        event = st.forward_stream.launch(effects)
        return Launched(event, plan["vids"], plan["write_keys_np"], plan["states"], step, plan)

    def _plan(self, batch: Any) -> dict[str, Any]:
        st = self.stack
        is_decode = batch.forward_mode.is_decode()
        seq_lens = batch.seq_lens_cpu.tolist()
        prefix_lens = [s - 1 for s in seq_lens] if is_decode else list(batch.prefix_lens)
        rows = batch.req_to_token_pool.req_to_token
        out_loc = batch.out_cache_loc
        write_keys, read_vids, read_keys, swa_vids, swa_keys = [], [], [], [], []
        states: list[tuple[int, int]] = []
        old_state_keys, new_state_keys = [], []
        for req, seq, pre in zip(batch.reqs, seq_lens, prefix_lens):
            s = self.seqs[req]
            keys = s.keys(seq)
            write_keys.append(keys[pre:seq])
            ctx = rows[release.current().row(req), :seq].to(torch.int64)
            read_vids.append(ctx)
            read_keys.append(keys)
            lo = max(0, pre - st.config.window + 1)
            swa_vids.append(ctx[lo:])
            swa_keys.append(keys[lo:])
            if st.is_mamba:
                old_state_keys.append(int(keys[pre - 1]) if pre > 0 else 0)
                new_state_keys.append(int(keys[seq - 1]))
                states.append((s.index, seq))
        dev = st.config.device
        write_keys_np = np.concatenate(write_keys)
        plan: dict[str, Any] = {
            "vids": out_loc.to(torch.int64).cpu().numpy(),
            "write_keys_np": write_keys_np,
            "write_keys": torch.from_numpy(write_keys_np).to(dev),
            "loc": out_loc,
            "full_loc": st.allocator.translate_kv_loc(out_loc),
            "read_full": st.allocator.translate_kv_loc(torch.cat(read_vids)),
            "read_full_keys": torch.from_numpy(np.concatenate(read_keys)).to(dev),
            "states": states,
        }
        if st.is_swa:
            pool = st.token_to_kv_pool
            plan["swa_loc"] = pool.translate_loc_from_full_to_swa(out_loc)
            plan["read_swa"] = pool.translate_loc_from_full_to_swa(torch.cat(swa_vids))
            plan["read_swa_keys"] = torch.from_numpy(np.concatenate(swa_keys)).to(dev)
        if st.is_mamba:
            self._plan_mamba(batch, plan, old_state_keys, new_state_keys)
        return plan

    def _plan_mamba(self, batch: Any, plan: dict, old_keys: list, new_keys: list) -> None:
        pool = self.stack.req_to_token_pool
        dev = self.stack.config.device
        idx = release.current().mamba_idx
        slots = torch.stack([torch.as_tensor(idx(r)).reshape(()) for r in batch.reqs])
        plan["slots"] = pool.translate_mamba_indices(slots.to(dev))
        plan["old_state_keys"] = torch.tensor(old_keys, dtype=torch.int64, device=dev)
        plan["new_state_keys"] = torch.tensor(new_keys, dtype=torch.int64, device=dev)
        # ModelRunner's deferred ops (extend forwards only: a decode batch still carries
        # the fields of the extend it was merged from), translated as it does.
        clear, src, dst = batch.mamba_clear_indices, batch.mamba_cow_src_indices, None
        if not batch.forward_mode.is_extend():
            clear = src = None
        if src is not None and len(src):
            dst = batch.mamba_cow_dst_indices
        plan["clear"] = (
            pool.translate_mamba_indices(clear) if clear is not None and len(clear) else None
        )
        plan["cow"] = (
            (pool.translate_mamba_indices(src), pool.translate_mamba_indices(dst))
            if dst is not None
            else None
        )

    def _plan_verify(self, batch: Any, plan: dict, step: int) -> None:
        """The verify step's accepted draft per batch row (seeded by request and length)."""
        cfg = self.stack.config
        d = cfg.spec_drafts
        accept = []
        for req, seq in zip(batch.reqs, batch.seq_lens_cpu.tolist()):
            h = (self.seqs[req].index * 0x9E3779B1 + seq * 0x85EBCA6B) & 0xFFFFFFFF
            accept.append((h >> 7) % d)
        commit = list(accept)
        if cfg.corrupt == "draft" and step >= cfg.corrupt_at:
            commit = [(a + 1) % d for a in accept]  # the checks' self-test: a rejected draft
        dev = cfg.device
        new = plan["new_state_keys"]
        drafts = torch.arange(d, device=dev, dtype=torch.int64)
        acc = torch.tensor(accept, dtype=torch.int64, device=dev)
        rejected = (new[:, None] * 31 + drafts[None, :] + 1) % values._MOD + 1
        plan["draft_keys"] = torch.where(drafts[None, :] == acc[:, None], new[:, None], rejected)
        plan["commit"] = torch.tensor(commit, dtype=torch.int64, device=dev)
        plan["rows"] = torch.arange(len(accept), device=dev, dtype=torch.int64)
        self.spec["verify_steps"] += 1
        self.spec["drafts_written"] += d * len(accept)
        self.spec["drafts_accepted"] += sum(a + 1 for a in accept)

    # ----- effects (forward stream) ---------------------------------------------------------

    def _effects(self, plan: dict[str, Any]) -> None:
        st = self.stack
        if st.is_mamba:
            self._mamba_prologue(plan)
        n = plan["write_keys"].numel()
        hd = st.config.head_num * st.config.head_dim
        shape = (n, st.config.head_num, st.config.head_dim)
        for layer_id in st.full_layers + st.swa_layers:
            k = values.encode(plan["write_keys"], layer_id, values.K, hd, KV_DTYPE).view(shape)
            v = values.encode(plan["write_keys"], layer_id, values.V, hd, KV_DTYPE).view(shape)
            loc = release.current().write_loc(plan["loc"], plan["full_loc"], plan.get("swa_loc"))
            st.token_to_kv_pool.set_kv_buffer(_layer(layer_id), loc, k, v)
        for layer_id in st.full_layers:
            self._check_reads(layer_id, plan["read_full"], plan["read_full_keys"], "full")
        for layer_id in st.swa_layers:
            self._check_reads(layer_id, plan["read_swa"], plan["read_swa_keys"], "swa")
        for layer_id in st.mamba_layers:
            self._state_step(layer_id, plan)

    def _check_reads(
        self, layer_id: int, phys: torch.Tensor, keys: torch.Tensor, side: str
    ) -> None:
        pool = self.stack.token_to_kv_pool
        hd = self.stack.config.head_num * self.stack.config.head_dim
        for kind, view in (
            (values.K, pool.get_key_buffer(layer_id)),
            (values.V, pool.get_value_buffer(layer_id)),
        ):
            got = gather_rows(view, phys)
            want = values.encode(keys, layer_id, kind, hd, KV_DTYPE)
            bad = (got != want).any(dim=1)
            self.read_errors += bad.sum()
            if self.cpu and bool(bad.any()):
                where = torch.nonzero(bad).flatten()[:4].tolist()
                self.details.append(
                    f"forward read of {side} layer {layer_id} ({'KV'[kind]}): "
                    f"{int(bad.sum())} of {phys.numel()} context tokens wrong, "
                    f"e.g. rows {where} at physical {phys[where].tolist()}"
                )

    def _mamba_prologue(self, plan: dict[str, Any]) -> None:
        pool = self.stack.req_to_token_pool.mamba_pool
        if plan["clear"] is not None:
            pool.clear_slots(plan["clear"])
        if plan["cow"] is not None:
            pool.copy_from(*plan["cow"])

    def _state_step(self, layer_id: int, plan: dict[str, Any]) -> None:
        cache = self.stack.req_to_token_pool.mamba2_layer_cache(layer_id)
        slots = plan["slots"].to(torch.int64)
        tensors = [(values.CONV, t) for t in cache.conv] + [(values.TEMPORAL, cache.temporal)]
        scratch = (
            list(cache.intermediate_conv_window) + [cache.intermediate_ssm]
            if "draft_keys" in plan
            else []
        )
        for i, (kind, t) in enumerate(tensors):
            numel = int(np.prod(t.shape[1:]))
            got = t[slots].reshape(len(slots), -1)
            want = values.encode(plan["old_state_keys"], layer_id, kind + i, numel, t.dtype)
            want = torch.where(plan["old_state_keys"][:, None] == 0, torch.zeros_like(want), want)
            bad = (got != want).any(dim=1)
            self.read_errors += bad.sum()
            if self.cpu and bool(bad.any()):
                self.details.append(
                    f"forward read of state layer {layer_id} tensor {i}: slots "
                    f"{slots[bad].tolist()} do not hold their request's prefix state"
                )
            if "draft_keys" in plan:
                self._verify(layer_id, kind + i, t, scratch[i], slots, plan)
                continue
            new = values.encode(plan["new_state_keys"], layer_id, kind + i, numel, t.dtype)
            t[slots] = new.view(len(slots), *t.shape[1:])

    def _verify(
        self, layer_id: int, kind: int, state: Any, scratch: Any, slots: Any, plan: dict
    ) -> None:
        """One state tensor's verify step: every draft's state into the scratch rows, read
        back, then the committed draft's copied into the request's slot."""
        rows, keys = plan["rows"], plan["draft_keys"]
        n, d = keys.shape
        numel = int(np.prod(state.shape[1:]))
        want = values.encode(keys.reshape(-1), layer_id, kind, numel, state.dtype)
        scratch[rows] = want.view(n, d, *state.shape[1:])
        got = scratch[rows].reshape(n * d, -1)
        bad = (got != want).any(dim=1)
        self.read_errors += bad.sum()
        if self.cpu and bool(bad.any()):
            self.details.append(
                f"verify scratch of state layer {layer_id}: {int(bad.sum())} of {n * d} "
                "draft states read back wrong"
            )
        state[slots] = scratch[rows, plan["commit"]]
