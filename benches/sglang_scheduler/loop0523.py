"""SGLang 0.5.23's scheduler methods, condensed to the memory path as ``loop`` condenses
0.5.16's (``release.Release0523`` selects this class).

What 0.5.23 changed on this path, each method below following its ``managers/scheduler.py``:

* ``get_next_batch_to_run``: a stashed chunk goes to the tree through
  ``checkpoint_kv_cache`` (``stash_chunked_request``), and the running batch is filtered
  every step (overlap merges a prefill's requests before its result finishes them);
* ``_get_new_batch_prefill_raw``: the adder's ``budget_state`` ends the pass, the number
  of allocatable requests counts rows the admitted requests already hold, ``NO_TOKEN``
  marks the batch full only when something runs, the chunked request gets
  ``shortest_prefill_chunk_limit``, a request's memory fields live in ``req.kv``;
* ``update_running_batch``: requests whose queued result finishes them are left out of
  the decode's memory check, and when memory is short while they finish the decode is
  skipped for a step instead of retracting (``None``); ``retract_decode`` takes no
  arguments and calls ``release_req(idx, remaining, offload_kv)``;
* the overlap loop: ``is_disable_overlap_for_batch`` (off unless
  ``SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP``), with an opportunistic flush at that
  boundary; ``process_batch_result`` then ``tree_cache.flush_pending_backups()``;
* ``on_idle``: after the leak checks the allocator's byte accounting
  (``verify_byte_accounting``), then the new-token ratio reset.

Left out, as ``loop`` leaves them out: disaggregation, HiCache and storage prefetch,
LoRA, grammar, dLLM, beam search (its coordinator is SGLang's, with no beam groups),
priority preemption, PP, mixed chunks, the prefill delayers, metrics. The
write-after-read barrier after each launch is kept, coarse (see ``_apply_war_barrier``).
"""

from __future__ import annotations

from typing import Any

from sglang_scheduler.loop import Loop


class Loop0523(Loop):
    """One SGLang 0.5.23 scheduler over one :class:`~sglang_scheduler.stack.Stack`."""

    def get_num_allocatable_reqs(
        self, running_bs: int, running_batch: Any = None, num_held_rows: int = 0
    ) -> int:
        from sglang.srt.runtime_context import get_parallel

        pp_budget = get_parallel().pp_max_micro_batch_size - running_bs
        row_budget = max(self.stack.req_to_token_pool.available_size() + num_held_rows, 0)
        return min(pp_budget, row_budget)

    def get_next_batch_to_run(self) -> Any:
        from sglang.srt.mem_cache.common import checkpoint_kv_cache

        running_batch, last_batch = self.running_batch, self.last_batch
        reqs_to_exclude = set()
        if self.chunked_req is not None:
            reqs_to_exclude.add(self.chunked_req)
            if self.chunked_req.extend_end > self.chunked_req.prefix_len:
                checkpoint_kv_cache(self.chunked_req, self.stack.tree_cache)
        if last_batch and last_batch.forward_mode.is_extend():
            if last_batch.chunked_req is not None:
                reqs_to_exclude.add(last_batch.chunked_req)
            last_bs = last_batch.batch_size()
            last_batch.filter_batch(reqs_to_exclude=list(reqs_to_exclude))
            if last_batch.batch_size() < last_bs:
                running_batch.batch_is_full = False
            if not last_batch.is_empty() and last_batch is not running_batch:
                if running_batch.is_empty():
                    running_batch = last_batch
                else:
                    running_batch.merge_batch(last_batch)
        running_bs = running_batch.batch_size()
        running_batch.filter_batch()
        if running_batch.batch_size() < running_bs:
            running_batch.batch_is_full = False
        new_batch, running_batch = self._get_new_batch_prefill(running_batch)
        if new_batch is not None:
            ret = new_batch
        elif not running_batch.is_empty() and not running_batch.is_prefill_only:
            decode_batch = self.update_running_batch(running_batch)
            ret = decode_batch if decode_batch is not None and not decode_batch.is_empty() else None
        else:
            ret = None
        self.running_batch = running_batch
        return ret

    def _get_new_batch_prefill(self, running_batch: Any) -> tuple[Any, Any]:
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder

        st = self.stack
        if st.is_swa:
            running_batch.batch_is_full = False  # hybrid SWA: retry with a fresh adder
        if running_batch.is_empty():
            running_batch.batch_is_full = False
        if (running_batch.batch_is_full or not self.waiting_queue) and self.chunked_req is None:
            return None, running_batch
        running_bs = len(running_batch.reqs)
        if (
            self.get_num_allocatable_reqs(running_bs, running_batch) <= 0
            and self.chunked_req is None
        ):
            running_batch.batch_is_full = True
            return None, running_batch
        st.policy.calc_priority(self.waiting_queue, running_batch, processed_tokens=0)
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
            max_prefill_bs=int(self.max_prefill_bs),
            max_running_requests=self.cfg.max_running,
            prefill_max_requests=None,
            prefill_delayer_single_pass=None,
            dllm_config=None,
            waiting_queue_len=len(self.waiting_queue),
            prefill_tile_block_m=64,  # torch_native has no extend_attention_block_m
        )
        if self.chunked_req is not None:
            self.chunked_req.init_next_round_input()
            adder.chunked_req_limit = st.policy.shortest_prefill_chunk_limit(
                self.chunked_req,
                self.waiting_queue,
                adder.rem_chunk_tokens or 0,
                self.cfg.page_size,
            )
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        mamba_allocator = getattr(st.req_to_token_pool, "mamba_allocator", None)
        if mamba_allocator is not None:
            mamba_allocator.alloc_group_begin(len(self.waiting_queue))
        for req in self.waiting_queue:
            if adder.budget_state() == AddReqResult.OTHER:
                break
            running_bs = len(running_batch.reqs)
            num_held_rows = sum(r.kv.holds_kv for r in adder.can_run_list)
            if len(adder.can_run_list) >= self.get_num_allocatable_reqs(
                running_bs, running_batch, num_held_rows
            ):
                running_batch.batch_is_full = True
            if running_batch.batch_is_full:
                break
            req.init_next_round_input(st.tree_cache)
            res = adder.add_one_req(
                req, has_chunked_req=self.chunked_req is not None, truncation_align_size=None
            )
            if res != AddReqResult.CONTINUE:
                if res == AddReqResult.NO_TOKEN:
                    running_batch.batch_is_full = len(adder.can_run_list) > 0 or (
                        not running_batch.is_empty()
                    )
                added = len(adder.can_run_list) > 0 and req is adder.can_run_list[-1]
                if not added:
                    req.kv.mamba_cow_src_index = None
                    req.kv.mamba_needs_clear = False
                    if req.kv.holds_mamba:
                        st.tree_cache.req_to_token_pool.mamba_allocator.free(
                            req.kv.mamba_pool_idx.unsqueeze(-1)
                        )
                        req.kv.mamba_pool_idx = None
                break
        if mamba_allocator is not None:
            mamba_allocator.alloc_group_end()
        can_run_list = adder.can_run_list
        if not can_run_list:
            for req in adder.preempt_list:
                self._add_request_to_queue(req)
            return None, running_batch
        can_run_set = set(can_run_list)
        self.waiting_queue = [x for x in self.waiting_queue if x not in can_run_set]
        for req in adder.preempt_list:
            self._add_request_to_queue(req)
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
        new_batch.hisparse_coordinator = None
        self.max_prefill_bs = max(self.max_prefill_bs, len(can_run_list))
        new_batch.prepare_for_extend()
        new_batch.decoding_reqs = None
        rec = self.record
        rec.admitted_reqs = len(can_run_list)
        rec.admitted_tokens = sum(r.extend_len for r in can_run_list)
        rec.cached_tokens = sum(r.prefix_len for r in can_run_list)
        return new_batch, running_batch

    def _reqs_finishing_inflight(self, batch: Any) -> list[Any]:
        """Requests whose queued result commits their last output by length (the
        overlap loop only: SGLang sets ``enable_skip_finishing_decode`` there)."""
        if not self.cfg.overlap or not self.result_queue:
            return []
        assert len(self.result_queue) == 1
        queued = set(self.result_queue[0][0].reqs)
        return [
            r
            for r in batch.reqs
            if r in queued and r.beam_group is None and r.next_output_finishes_by_length()
        ]

    def update_running_batch(self, batch: Any) -> Any:
        initial_bs = batch.batch_size()
        finishing = self._reqs_finishing_inflight(batch)
        batch.filter_batch(reqs_to_exclude=finishing)
        if batch.is_empty():
            batch.batch_is_full = False
            return batch
        short = not batch.check_decode_mem()
        if short and finishing:
            batch.batch_is_full = False
            return None
        if short:
            batch.release_req = lambda idx, n, offload_kv=True: self._release_for_retract(
                batch, idx, n, offload_kv
            )
            try:
                retracted, ratio, to_abort = batch.retract_decode()
            finally:
                del batch.release_req
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

    def _release_for_retract(self, batch: Any, idx: int, remaining: int, offload_kv: Any) -> Any:
        from sglang.srt.managers.schedule_batch import ScheduleBatch

        req = batch.reqs[idx]
        self._offload_round_trip(req)
        self.shadow.forget_state(req)
        return ScheduleBatch.release_req(batch, idx, remaining, offload_kv)

    def process_batch_result(self, batch: Any, result: Any) -> None:
        super().process_batch_result(batch, result)
        self.stack.tree_cache.flush_pending_backups()

    def _iterate_overlap(self) -> None:
        """scheduler.py ``event_loop_overlap``, one pass."""
        from sglang.srt.environ import envs

        batch = self.get_next_batch_to_run()
        disable = bool(
            envs.SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP.get()
            and batch
            and batch.forward_mode.is_extend()
            and self.last_batch
            and self.last_batch.forward_mode.is_extend()
        )
        if disable:
            self._pop_and_process()
            self.totals.flush_moves += int(self.stack.allocator.flush_opportunistic() or 0)
        if batch:
            self.record.kind = "decode" if batch.forward_mode.is_decode() else "extend"
            result = self.run_batch(batch)
            self._apply_war_barrier()
            self.result_queue.append((batch.copy(), result))
        if self.last_batch:
            if not disable:
                self._pop_and_process()
        elif batch is None:
            self.on_idle()
        self.last_batch = batch

    def _apply_war_barrier(self) -> None:
        """scheduler.py ``_apply_war_barrier`` (on by default on CUDA): the scheduler's
        stream waits for the forward's reads of shared memory before it writes again, so
        a page freed while a launched forward still reads it (a request's prompt
        deduplicated into the tree when its prefill result is processed) is zeroed and
        handed out only after that read. The driver's forward reads and writes in one
        step, so this is the coarse barrier (``SGLANG_FORCE_COARSE_WAR_BARRIER``): the
        schedule stream waits for the forward stream. On the CPU that lands the forward
        at once: 0.5.23's overlap loop leaves no forward in flight when the scheduler
        next touches the pool (0.5.16's has no barrier, and the driver keeps them in
        flight there)."""
        stream = self.stack.forward_stream
        if self.cfg.device == "cuda":
            import torch

            torch.cuda.current_stream().wait_stream(stream.stream)
        else:
            from sglang_scheduler import events

            events.HOST_STREAM.wait_stream(stream)

    def _pop_and_process(self) -> None:
        tmp_batch, tmp_result = self.result_queue.pop(0)
        self.process_batch_result(tmp_batch, tmp_result)

    def on_idle(self) -> None:
        """scheduler.py ``on_idle``: flush, SGLang's leak checks (strict: they raise),
        the allocator's byte accounting, the ratio reset."""
        if not self.is_fully_idle():
            return
        st = self.stack
        self.totals.flush_moves += int(st.allocator.flush_opportunistic() or 0)
        has_leak, messages = st.checker._check_all_pools(st.stats.get_pool_stats())
        if has_leak:
            st.checker._report_leak("pool", "\n".join(messages))
        st.checker._check_req_pool()
        violations = st.allocator.verify_byte_accounting()
        if violations:
            st.checker._report_leak("pool-bytes", "\n".join(violations))
        st.checker._check_tree_cache()
        st.ratio.reset()
        self.totals.idle_checks += 1
        self.record.kind = "idle-checked"


def _no_spec() -> Any:
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return SpeculativeAlgorithm.NONE
