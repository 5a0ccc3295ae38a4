"""SGLang's scheduler event loop, condensed to the memory path, over SGLang's own objects.

The methods below are SGLang 0.5.16's ``Scheduler`` methods (``managers/scheduler.py``)
with the branches this configuration never takes removed (disaggregation, HiCache,
speculative decoding, dLLM, LoRA, grammar, priority preemption, PP, metrics): the
overlap loop (``event_loop_overlap``) or the normal one (``event_loop_normal``),
``get_next_batch_to_run``, ``_get_new_batch_prefill_raw`` (SGLang's ``PrefillAdder``
with its Mamba gap reservation, the chunked request, ``alloc_group_begin``/``end``),
``update_running_batch`` (``check_decode_mem`` and ``retract_decode``), ``run_batch``
(the forward, then ``set_latest_forward_done_event`` / ``set_inflight_forward`` with the
forward's done event in the overlap loop, as the unified pool wants), ``process_batch_result``
(SGLang's ``SchedulerBatchResultProcessor``) and ``on_idle`` (``flush_opportunistic``,
then the leak check ``_check_all_pools`` in strict mode, ``_check_req_pool``,
``_check_tree_cache``). Everything in between is SGLang's: ``Req``, ``ScheduleBatch``
(``prepare_for_extend`` / ``prepare_for_decode`` -> ``mem_cache.allocation``'s
``alloc_for_extend`` / ``alloc_for_decode`` with ``evict_from_tree_cache`` and
``maybe_evict_swa`` -> ``free_swa_out_of_window_slots``), the tree cache, the pools.

Retraction: SGLang releases a retracted request's KV and recomputes it later
(``release_req``); its decode-disaggregation path first copies the KV to the host
(``Req.offload_kv_cache`` -> ``allocator.get_cpu_copy``) and later loads it back
(``load_kv_cache`` -> ``load_cpu_copy``). The unified pool runs without
disaggregation, so the driver exercises that pair at retraction as a round trip (see
:meth:`Loop._offload_round_trip`) before SGLang's own release.
"""

from __future__ import annotations

import dataclasses
import traceback
import types
from array import array
from pathlib import Path
from typing import Any

import torch

from sglang_scheduler import release
from sglang_scheduler import stack as stack_mod
from sglang_scheduler import trace as trace_mod
from sglang_scheduler.config import Config
from sglang_scheduler.forward import Forward
from sglang_scheduler.shadow import LostBytes, Shadow


@dataclasses.dataclass
class StepRecord:
    """What one scheduler iteration did."""

    step: int
    kind: str  # "extend", "decode" or "idle"
    admitted_tokens: int = 0  # new tokens PrefillAdder admitted (extend lengths)
    admitted_reqs: int = 0
    cached_tokens: int = 0  # of the admitted requests' prompts, served by the tree
    decode_tokens: int = 0
    running: int = 0
    waiting: int = 0
    retracted: int = 0
    evicted: int = 0  # tokens and slots the tree cache evicted (all kinds)
    views: dict = dataclasses.field(default_factory=dict)  # capacities SGLang read first


@dataclasses.dataclass
class Totals:
    retracted: int = 0
    aborted: int = 0
    evicted_full: int = 0
    evicted_swa: int = 0
    evicted_mamba: int = 0
    finished: int = 0
    offload_round_trips: int = 0
    offload_unsupported: str = ""
    idle_checks: int = 0
    busy_checks: int = 0
    flush_moves: int = 0


class Loop:
    """One scheduler over one :class:`~sglang_scheduler.stack.Stack`."""

    def __init__(self, cfg: Config) -> None:
        from sglang.srt.managers.schedule_batch import ScheduleBatch

        self.cfg = cfg
        self.rel = release.current()
        self.last_batch: Any = None
        self.stack = stack_mod.build(cfg, lambda: self.last_batch, lambda: self.running_batch)
        self.running_batch = ScheduleBatch(reqs=[], batch_is_full=False)
        self.waiting_queue: list[Any] = []
        self.chunked_req: Any = None
        self.result_queue: list[tuple[Any, Any]] = []
        self.forward_ct = 0
        self.max_prefill_bs = 0
        self.shadow = Shadow(self.stack)
        self.forward = Forward(self.stack, self.shadow)
        self.records: list[StepRecord] = []
        self.totals = Totals()
        self.record = StepRecord(0, "idle")
        self.arrivals = trace_mod.arrivals(cfg)
        self._count_evictions()

    # ----- requests ------------------------------------------------------------------------

    def _new_req(self, a: trace_mod.Arrival) -> Any:
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        params = SamplingParams(max_new_tokens=a.max_new_tokens, temperature=0.0)
        params.normalize(None)
        req = Req(
            a.rid,
            "",
            array("q", a.prompt),
            params,
            vocab_size=self.cfg.vocab,
            eos_token_ids=set(),
        )
        self.shadow.add(a)
        return req

    def _add_request_to_queue(self, req: Any) -> None:
        self.waiting_queue.append(req)

    # ----- SGLang's Scheduler methods (condensed) ---------------------------------------------

    def get_num_allocatable_reqs(self, running_bs: int) -> int:
        res = self.stack.server_args.pp_max_micro_batch_size - running_bs
        return min(res, self.stack.req_to_token_pool.available_size())

    def get_next_batch_to_run(self) -> Any:
        """scheduler.py ``get_next_batch_to_run``: merge the last prefill into the running
        batch, try a new prefill, else decode the running batch."""
        running_batch, last_batch = self.running_batch, self.last_batch
        chunked_req_to_exclude = set()
        if self.chunked_req is not None:
            chunked_req_to_exclude.add(self.chunked_req)
            if self.chunked_req.extend_range.end > len(self.chunked_req.prefix_indices):
                from sglang.srt.mem_cache.common import maybe_cache_unfinished_req

                maybe_cache_unfinished_req(self.chunked_req, self.stack.tree_cache, chunked=True)
        if last_batch and last_batch.forward_mode.is_extend():
            if last_batch.chunked_req is not None:
                chunked_req_to_exclude.add(last_batch.chunked_req)
            last_bs = last_batch.batch_size()
            last_batch.filter_batch(chunked_req_to_exclude=list(chunked_req_to_exclude))
            if last_batch.batch_size() < last_bs:
                running_batch.batch_is_full = False
            if not last_batch.is_empty():
                if running_batch.is_empty():
                    running_batch = last_batch
                else:
                    running_batch.merge_batch(last_batch)
        new_batch, running_batch = self._get_new_batch_prefill(running_batch)
        if new_batch is not None:
            ret = new_batch
        elif not running_batch.is_empty() and not running_batch.is_prefill_only:
            running_batch = self.update_running_batch(running_batch)
            ret = running_batch if not running_batch.is_empty() else None
        else:
            ret = None
        self.running_batch = running_batch
        return ret

    def _get_new_batch_prefill(self, running_batch: Any) -> tuple[Any, Any]:
        """scheduler.py ``_get_new_batch_prefill_raw``."""
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder

        st = self.stack
        if st.is_swa:
            running_batch.batch_is_full = False  # hybrid SWA: retry with a fresh adder
        if (running_batch.batch_is_full or not self.waiting_queue) and self.chunked_req is None:
            return None, running_batch
        running_bs = len(running_batch.reqs)
        if self.get_num_allocatable_reqs(running_bs) <= 0 and self.chunked_req is None:
            running_batch.batch_is_full = True
            return None, running_batch
        st.policy.calc_priority(self.waiting_queue, running_batch)
        adder = PrefillAdder(
            self.cfg.page_size,
            st.tree_cache,
            st.allocator,
            running_batch,
            st.ratio.current,
            self.cfg.max_prefill_tokens,
            self.cfg.chunked_prefill,
            0,
            0,
            max_prefill_bs=self.max_prefill_bs,
            max_running_requests=self.cfg.max_running,
            prefill_max_requests=None,
            prefill_delayer_single_pass=None,
            dllm_config=None,
            waiting_queue_len=len(self.waiting_queue),
        )
        if self.chunked_req is not None:
            self.chunked_req.init_next_round_input()
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        mamba_allocator = getattr(st.req_to_token_pool, "mamba_allocator", None)
        if mamba_allocator is not None:
            mamba_allocator.alloc_group_begin(len(self.waiting_queue))
        for req in self.waiting_queue:
            running_bs = len(running_batch.reqs)
            if len(adder.can_run_list) >= self.get_num_allocatable_reqs(running_bs):
                running_batch.batch_is_full = True
            if running_batch.batch_is_full:
                break
            req.init_next_round_input(st.tree_cache)
            res = adder.add_one_req(
                req, has_chunked_req=self.chunked_req is not None, truncation_align_size=None
            )
            if res != AddReqResult.CONTINUE:
                if res == AddReqResult.NO_TOKEN:
                    running_batch.batch_is_full = True
                added = len(adder.can_run_list) > 0 and req is adder.can_run_list[-1]
                if not added:
                    req.mamba_cow_src_index = None
                    req.mamba_needs_clear = False
                    if req.mamba_pool_idx is not None:
                        st.tree_cache.req_to_token_pool.mamba_allocator.free(
                            req.mamba_pool_idx.unsqueeze(-1)
                        )
                        req.mamba_pool_idx = None
                break
        if mamba_allocator is not None:
            mamba_allocator.alloc_group_end()
        can_run_list = adder.can_run_list
        if not can_run_list:
            return None, running_batch
        can_run_set = set(can_run_list)
        self.waiting_queue = [x for x in self.waiting_queue if x not in can_run_set]
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        new_batch = ScheduleBatch.init_new(
            can_run_list,
            st.req_to_token_pool,
            st.allocator,
            st.tree_cache,
            st.model_config,
            self.cfg.overlap,
            _no_spec(),
            chunked_req=self.chunked_req,
        )
        new_batch.contains_last_prefill_chunk = self.chunked_req is None or len(can_run_list) != 1
        self.max_prefill_bs = max(self.max_prefill_bs, len(can_run_list))
        new_batch.prepare_for_extend()
        new_batch.decoding_reqs = None
        rec = self.record
        rec.admitted_reqs = len(can_run_list)
        rec.admitted_tokens = sum(r.extend_range.length for r in can_run_list)
        rec.cached_tokens = sum(len(r.prefix_indices) for r in can_run_list)
        return new_batch, running_batch

    def update_running_batch(self, batch: Any) -> Any:
        """scheduler.py ``update_running_batch``: retract when decode memory is short."""
        initial_bs = batch.batch_size()
        batch.filter_batch()
        if batch.is_empty():
            batch.batch_is_full = False
            return batch
        if not batch.check_decode_mem():
            batch.release_req = lambda idx, n, sa: self._release_for_retract(batch, idx, n, sa)
            try:
                retracted, ratio, to_abort = batch.retract_decode(self.stack.server_args)
            finally:
                del batch.release_req
            # SGLang aborts the last request when even it cannot decode (it sends the
            # abort to the tokenizer; the request is released and filtered out).
            self.totals.aborted += len(to_abort)
            self.stack.ratio.current = ratio
            self.record.retracted += len(retracted)
            self.totals.retracted += len(retracted)
            for req in retracted:
                self._add_request_to_queue(req)
        else:
            self.stack.ratio.decay_step()
        if batch.batch_size() < initial_bs:
            batch.batch_is_full = False
        if batch.is_empty():
            return batch
        batch.prepare_for_decode()
        return batch

    def _release_for_retract(self, batch: Any, idx: int, remaining: int, server_args: Any) -> None:
        from sglang.srt.managers.schedule_batch import ScheduleBatch

        req = batch.reqs[idx]
        self._offload_round_trip(req)
        self.shadow.forget_state(req)
        ScheduleBatch.release_req(batch, idx, remaining, server_args)

    def run_batch(self, batch: Any) -> Any:
        """scheduler.py ``run_batch``: the forward, reported as SGLang reports it."""
        from sglang.srt.managers.utils import GenerationBatchResult

        self.forward_ct += 1
        batch.forward_iter = self.forward_ct
        launched = self.forward.launch(batch, len(self.records))
        self.shadow.launched(launched)
        if self.cfg.overlap:
            allocator = self.stack.allocator
            allocator.set_latest_forward_done_event(launched.event)
            allocator.set_inflight_forward(launched.event, batch.out_cache_loc)
        seq_lens = batch.seq_lens_cpu.tolist()
        tokens = [
            trace_mod.sampled_token(self.shadow[r].index, s, self.cfg.vocab)
            for r, s in zip(batch.reqs, seq_lens)
        ]
        result = GenerationBatchResult(
            next_token_ids=torch.tensor(tokens, dtype=torch.int64),
            copy_done=launched.event,
            can_run_cuda_graph=False,
        )
        result.extend_input_len_per_req = None
        result.extend_logprob_start_len_per_req = None
        if batch.forward_mode.is_decode():
            self.record.decode_tokens = batch.batch_size()
        return result

    def process_batch_result(self, batch: Any, result: Any) -> None:
        proc = self.stack.result_processor
        before = {id(r) for r in batch.reqs if r.finished()}
        if batch.forward_mode.is_decode():
            proc.process_batch_result_decode(batch, result)
        else:
            proc.process_batch_result_prefill(batch, result)
        for r in batch.reqs:
            if r.finished() and id(r) not in before:
                self.totals.finished += 1
                self.shadow.forget_state(r)

    def is_fully_idle(self) -> bool:
        return (
            self.running_batch.is_empty()
            and self.chunked_req is None
            and (self.last_batch is None or self.last_batch.is_empty())
            and not self.result_queue
            and not self.waiting_queue
        )

    def on_idle(self) -> None:
        """scheduler.py ``on_idle``: flush, then SGLang's leak checks (strict: they raise)."""
        if not self.is_fully_idle():
            return
        st = self.stack
        self.totals.flush_moves += int(st.allocator.flush_opportunistic() or 0)
        has_leak, messages = st.checker._check_all_pools(st.stats.get_pool_stats())
        if has_leak:
            st.checker._report_leak("pool", "\n".join(messages))
        st.checker._check_req_pool()
        st.checker._check_tree_cache()
        self.totals.idle_checks += 1
        self.record.kind = "idle-checked"

    # ----- one iteration ---------------------------------------------------------------

    def iterate(self, step: int, arrivals: list[trace_mod.Arrival]) -> None:
        self.record = StepRecord(step, "idle")
        for a in arrivals:
            self._add_request_to_queue(self._new_req(a))
        self.record.views = self.views()
        if self.cfg.overlap:
            self._iterate_overlap()
        else:
            self._iterate_normal()
        rec = self.record
        rec.running = len(self.running_batch.reqs)
        rec.waiting = len(self.waiting_queue)
        self.records.append(rec)
        if self.cfg.busy_check:
            # SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY: the pool invariant with the
            # running requests' uncached tokens, every iteration (asserts).
            self.stack.checker.self_check_during_busy()
            self.totals.busy_checks += 1
        self._check(f"after iteration {step}")
        if step == self.cfg.corrupt_at:
            self._corrupt()

    def _corrupt(self) -> None:
        """The checks' self-test: overwrite with zeros one live, landed token's K/V on every
        full layer (``kv``: a running request's; ``tree``: one only the tree holds) or one
        running request's state (``state``)."""
        st, sh = self.stack, self.shadow
        sh.poll()
        if self.cfg.corrupt == "draft":
            return None  # the forward commits a rejected draft from here on
        if self.cfg.corrupt == "tree":  # a token only the tree holds: no forward reads it
            held = set(sh.request_tokens(self._live_reqs())[0].tolist())
            for vids, _, _ in sh.tree_tokens():
                for v in vids.tolist():
                    if v not in held and sh.landed[v]:
                        return self._zero_token(torch.tensor([v], device=self.cfg.device))
            raise RuntimeError("no token only the tree holds at the chosen iteration")
        for req in self._live_reqs():
            if self.cfg.corrupt == "state":
                slot = self.rel.mamba_idx(req)
                if slot is None or sh[req].index not in sh.state_len:
                    continue
                idx = torch.as_tensor(slot).reshape(1).to(self.cfg.device)
                pool = st.req_to_token_pool
                pool.mamba_pool.clear_slots(pool.translate_mamba_indices(idx))
                return None
            vid = st.req_to_token_pool.req_to_token[self.rel.row(req), :1].to(torch.int64)
            if sh.landed[int(vid)]:
                return self._zero_token(vid)
        raise RuntimeError(f"nothing live to corrupt ({self.cfg.corrupt}) at the chosen iteration")

    def _zero_token(self, vid: torch.Tensor) -> None:
        st = self.stack
        shape = (1, self.cfg.head_num, self.cfg.head_dim)
        zero = torch.zeros(shape, dtype=stack_mod.KV_DTYPE, device=self.cfg.device)
        loc = self.rel.write_loc(vid, st.allocator.translate_kv_loc(vid), None)
        for layer_id in st.full_layers:
            layer = types.SimpleNamespace(layer_id=layer_id)
            st.token_to_kv_pool.set_kv_buffer(layer, loc, zero, zero)

    def _iterate_normal(self) -> None:
        """scheduler.py ``event_loop_normal``, one pass."""
        batch = self.get_next_batch_to_run()
        if batch:
            self.record.kind = "decode" if batch.forward_mode.is_decode() else "extend"
            result = self.run_batch(batch)
            self.process_batch_result(batch, result)
        else:
            self.on_idle()
        self.last_batch = batch

    def _iterate_overlap(self) -> None:
        """scheduler.py ``event_loop_overlap``, one pass (consecutive prefills overlap:
        ``SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP`` is off by default)."""
        batch = self.get_next_batch_to_run()
        if batch:
            self.record.kind = "decode" if batch.forward_mode.is_decode() else "extend"
            result = self.run_batch(batch)
            self.result_queue.append((batch.copy(), result))
        if self.last_batch:
            tmp_batch, tmp_result = self.result_queue.pop(0)
            self.process_batch_result(tmp_batch, tmp_result)
        elif batch is None:
            self.on_idle()
        self.last_batch = batch

    def _check(self, where: str) -> None:
        self.shadow.poll()
        if self.forward.details:
            raise LostBytes(f"{where}: " + "; ".join(self.forward.details[:3]))
        # On CUDA the count may lag (forwards still running add to it); the end re-reads it.
        if int(self.forward.read_errors):
            raise LostBytes(f"{where}: {int(self.forward.read_errors)} forward reads wrong")
        reqs = self._live_reqs()
        self.shadow.check(reqs, where)

    def _live_reqs(self) -> list[Any]:
        seen: dict[int, Any] = {}
        batches = [self.running_batch, self.last_batch] + [b for b, _ in self.result_queue]
        for b in batches:
            for r in b.reqs if b is not None else []:
                seen[id(r)] = r
        if self.chunked_req is not None:
            seen[id(self.chunked_req)] = self.chunked_req
        return [r for r in seen.values() if self.rel.holds_kv(r) and not r.finished()]

    def views(self) -> dict[str, int]:
        """The capacities SGLang's admission and eviction read, before this iteration."""
        st = self.stack
        a, tree = st.allocator, st.tree_cache
        v = {"available": int(a.available_size())}
        if st.is_swa:
            v.update(
                full=int(a.full_available_size()),
                swa=int(a.swa_available_size()),
                full_evictable=int(tree.full_evictable_size()),
                swa_evictable=int(tree.swa_evictable_size()),
            )
        else:
            m = st.req_to_token_pool.mamba_allocator
            v.update(
                mamba=int(m.available_size()),
                mamba_schedulable=int(m.schedulable_available_size()),
                slot_cost=int(a.mamba_slot_full_token_cost()),
            )
            if tree.supports_mamba():
                v.update(
                    full_evictable=int(tree.full_evictable_size()),
                    mamba_evictable=int(tree.mamba_evictable_size()),
                )
        return v

    # ----- the exercise of SGLang's offload pair -------------------------------------

    def _offload_round_trip(self, req: Any) -> None:
        """``Req.offload_kv_cache`` then ``load_kv_cache`` (the allocator's
        ``get_cpu_copy`` / ``load_cpu_copy``, with the state slot) on a request about to
        be retracted. First a load of the copy as it is (the bytes do not change); then the
        request's own tokens (those no tree node shares) and its state are overwritten with
        zeros through the pools' own write paths and the copy loaded again, so the load must
        put back exactly what the copy read; the next check reads every live token and state
        back. The in-flight forward lands first: the copy must read its writes (SGLang's
        decode-disaggregation path makes the same wait).

        SGLang's own pool never runs this pair (the unified pool asserts disaggregation
        off) and fails it on some configurations; its failure is recorded, not raised."""
        st = self.stack
        st.forward_stream.synchronize()  # on both pools alike: it moves when forwards land
        self.shadow.poll()
        if self.totals.offload_unsupported:
            return  # SGLang's pool failed it once: not again
        if self.cfg.pool != "ukv" and self.cfg.device.startswith("cuda"):
            # SGLang's pool indexes its K/V views with the virtual ids here; where they
            # pass its buffer that is an IndexError on the CPU (recorded below) but a
            # device-side assert on CUDA, which ends the process. The pair changes no
            # allocator state, so leaving it out keeps the two runs comparable.
            self.totals.offload_unsupported = (
                "not run on CUDA (its out-of-range gather is a device-side assert there)"
            )
            return
        try:
            req.offload_kv_cache(st.req_to_token_pool, st.allocator)
            req.load_kv_cache(st.req_to_token_pool, st.allocator)
            req.offload_kv_cache(st.req_to_token_pool, st.allocator)
        except Exception as exc:  # noqa: BLE001 - SGLang's pool: recorded
            if self.cfg.pool == "ukv":
                raise
            where = traceback.extract_tb(exc.__traceback__)[-1]
            self.totals.offload_unsupported = (
                f"{type(exc).__name__}: {str(exc)[:120]} "
                f"({Path(where.filename).name}:{where.lineno})"
            )
            return
        self._scribble(req)
        req.load_kv_cache(st.req_to_token_pool, st.allocator)
        self.totals.offload_round_trips += 1

    def _scribble(self, req: Any) -> None:
        st = self.stack
        n = req.seqlen - 1
        lo = self.rel.protected_len(req)
        if n > lo:
            vids = st.req_to_token_pool.req_to_token[self.rel.row(req), lo:n].to(torch.int64)
            full = st.allocator.translate_kv_loc(vids)
            swa = st.token_to_kv_pool.translate_loc_from_full_to_swa(vids) if st.is_swa else None
            if swa is not None:
                keep = swa > 0
                vids, full, swa = vids[keep], full[keep], swa[keep]
            shape = (vids.numel(), self.cfg.head_num, self.cfg.head_dim)
            zero = torch.zeros(shape, dtype=stack_mod.KV_DTYPE, device=self.cfg.device)
            for layer_id in st.full_layers + st.swa_layers:
                loc = self.rel.write_loc(vids, full, swa)
                st.token_to_kv_pool.set_kv_buffer(
                    types.SimpleNamespace(layer_id=layer_id), loc, zero, zero
                )
        if st.is_mamba and self.rel.mamba_idx(req) is not None:
            idx = torch.as_tensor(self.rel.mamba_idx(req)).reshape(1).to(self.cfg.device)
            st.req_to_token_pool.mamba_pool.clear_slots(
                st.req_to_token_pool.translate_mamba_indices(idx)
            )

    # ----- evictions ----------------------------------------------------------------

    def _count_evictions(self) -> None:
        """Count what the tree evicts, at each of the release's eviction entry points."""
        tree = self.stack.tree_cache
        for name in self.rel.evict_entry_points:
            if hasattr(tree, name):
                setattr(tree, name, self._counted(getattr(tree, name)))

    def _counted(self, evict: Any) -> Any:
        totals = self.totals

        def counted(*args: Any, **kwargs: Any) -> Any:
            res = evict(*args, **kwargs)
            if res is not None:
                full = int(getattr(res, "num_tokens_evicted", 0) or 0)
                swa = int(getattr(res, "swa_num_tokens_evicted", 0) or 0)
                mamba = int(getattr(res, "mamba_num_evicted", 0) or 0)
                totals.evicted_full += full
                totals.evicted_swa += swa
                totals.evicted_mamba += mamba
                self.record.evicted += full + swa + mamba
            return res

        return counted

    # ----- the run ---------------------------------------------------------------------

    def run(self, on_step: Any = None) -> None:
        """The trace's iterations, then iterations without arrivals until SGLang's
        scheduler is fully idle and its idle checks ran (at most 20x the trace)."""
        by_step: dict[int, list] = {}
        for a in self.arrivals:
            by_step.setdefault(a.step, []).append(a)
        step = 0
        limit = self.cfg.steps * 20 + 200
        while step < self.cfg.steps or not self._drained():
            if step >= limit:
                raise RuntimeError(f"the trace did not drain in {limit} iterations (livelock?)")
            self.iterate(step, by_step.get(step, []))
            if on_step is not None:
                on_step(self.records[-1])
            step += 1
        self.stack.forward_stream.synchronize()
        self._check("at the end")
        if self.cfg.device != "cpu" and int(self.forward.read_errors):
            raise LostBytes(f"{int(self.forward.read_errors)} forward reads wrong on the GPU")

    def _drained(self) -> bool:
        return bool(self.records) and self.records[-1].kind == "idle-checked"


def _no_spec() -> Any:
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return SpeculativeAlgorithm.NONE
