"""The serving stack SGLang's model runner and scheduler build, for one configuration.

What is SGLang's own code: the factories ``init_unified_swa_pools`` /
``init_unified_mamba_pools`` (of whichever module serves
``sglang.srt.mem_cache.unified_memory_pool``: SGLang's, or the drop-in after
``install()``), ``ReqToTokenPool``, the tree cache (``create_tree_cache`` with SGLang's
``CacheInitParams``, or ``SWARadixCache`` / ``MambaRadixCache`` built directly),
``SchedulePolicy``, ``NewTokenRatioTracker``, ``SchedulerPoolStatsObserver`` and
``SchedulerInvariantChecker`` (the idle leak check), ``SchedulerBatchResultProcessor``.

Stand-ins, the smallest that SGLang's code on this path reads:
* the model's config (``ModelConfig``): vocabulary size, no encoder, no reasoning marker;
* the model's layers: ``layer_id`` only (what ``set_kv_buffer`` and the pools route on);
* the Mamba state geometry: SGLang's own ``Mamba2CacheParams`` from a tiny
  ``Mamba2StateShape.create`` (what a model's config would give);
* the result processor's metrics, streaming and logprob collaborators: no-ops.
"""

from __future__ import annotations

import dataclasses
import os
import types
from typing import Any

import torch

from sglang_scheduler import bootstrap, events, patches, paths, release
from sglang_scheduler.config import Config

KV_DTYPE = torch.bfloat16


@dataclasses.dataclass
class Stack:
    """The objects a scheduler holds, plus the model geometry the forward needs."""

    config: Config
    server_args: Any
    model_config: Any
    req_to_token_pool: Any
    token_to_kv_pool: Any
    allocator: Any
    tree_cache: Any
    forward_stream: Any
    full_layers: tuple[int, ...]
    swa_layers: tuple[int, ...]
    mamba_layers: tuple[int, ...]
    checker: Any = None
    stats: Any = None
    result_processor: Any = None
    policy: Any = None
    ratio: Any = None

    @property
    def is_swa(self) -> bool:
        return self.config.hybrid == "swa"

    @property
    def is_mamba(self) -> bool:
        return self.config.hybrid == "mamba"


def server_args_for(cfg: Config) -> Any:
    """SGLang's ``ServerArgs`` for this run (``bootstrap.publish_server_args``), and the
    one environment knob SGLang reads at run time: how often decode frees out-of-window
    SWA tokens (default 128 iterations; small here so short traces free them)."""
    os.environ["SGLANG_SWA_EVICTION_INTERVAL"] = str(cfg.swa_eviction_interval)
    return bootstrap.publish_server_args(
        page_size=cfg.page_size,
        # write_cache_indices / get_last_loc on torch (on CUDA the Triton
        # write_req_to_token_pool kernel reads host pointers of prefix tensors).
        attention_backend="torch_native",
        enable_unified_memory=True,
        disable_radix_cache=cfg.cache == "chunk",
        disable_overlap_schedule=not cfg.overlap,
        mamba_radix_cache_strategy="no_buffer",
        chunked_prefill_size=cfg.chunked_prefill,
        max_prefill_tokens=cfg.max_prefill_tokens,
        max_running_requests=cfg.max_running,
        pp_max_micro_batch_size=cfg.max_running,
        schedule_policy="lpm",
        schedule_conservativeness=cfg.conservativeness,
    )


def model_config_for(cfg: Config) -> Any:
    """The fields of SGLang's ``ModelConfig`` the scheduling path reads."""
    return types.SimpleNamespace(
        vocab_size=cfg.vocab,
        is_encoder_decoder=False,
        think_end_id=None,
        self_opened_think_start_ids=None,  # 0.5.23 reads it
        context_len=cfg.context_len,
        num_key_value_heads=cfg.head_num,
        is_multimodal=False,
    )


def _mamba_params(cfg: Config) -> Any:
    from sglang.srt.configs.mamba_utils import (
        Mamba2CacheParams,
        Mamba2StateDType,
        Mamba2StateShape,
    )

    shape = Mamba2StateShape.create(
        tp_world_size=1,
        intermediate_size=16,
        n_groups=1,
        num_heads=2,
        head_dim=4,
        state_size=4,
        conv_kernel=4,
    )
    dtype = Mamba2StateDType(conv=torch.bfloat16, temporal=torch.float32)
    return Mamba2CacheParams(shape=shape, dtype=dtype, layers=list(cfg.other_layers))


def _swa_pools(cfg: Config, stream: Any) -> tuple[Any, Any, Any]:
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    module = bootstrap.pool_module()
    end_layer = max(cfg.full_layers + cfg.other_layers) + 1
    bundle = release.construct(
        module.init_unified_swa_pools,
        device=cfg.device,
        kv_cache_dtype=KV_DTYPE,
        head_num=cfg.head_num,
        head_dim=cfg.head_dim,
        v_head_dim=cfg.head_dim,
        swa_head_num=cfg.head_num,
        swa_head_dim=cfg.head_dim,
        swa_v_head_dim=cfg.head_dim,
        page_size=cfg.page_size,
        start_layer=0,
        end_layer=end_layer,
        swa_attention_layer_ids=list(cfg.other_layers),
        full_attention_layer_ids=list(cfg.full_layers),
        full_max_total_num_tokens=cfg.full_tokens,
        swa_max_total_num_tokens=cfg.swa_tokens,
        enable_memory_saver=False,
        need_sort=False,
        forward_stream=events.sglang_stream_arg(stream),
        lazy_compaction=cfg.lazy,
        **release.current().factory_fields(),
    )
    # As model_runner's _init_unified_swa_pools: the request table is SGLang's own.
    req_pool = ReqToTokenPool(
        size=cfg.max_running,
        max_context_len=cfg.context_len + 4,
        device=cfg.device,
        enable_memory_saver=False,
    )
    return req_pool, bundle.token_to_kv_pool, bundle.token_to_kv_pool_allocator


def _mamba_pools(cfg: Config, stream: Any) -> tuple[Any, Any, Any]:
    module = bootstrap.pool_module()
    if not bootstrap.is_dropin():
        patches.mamba_factory_keyword(module)
    end_layer = max(cfg.full_layers + cfg.other_layers) + 1
    bundle = release.construct(
        module.init_unified_mamba_pools,
        device=cfg.device,
        kv_cache_dtype=KV_DTYPE,
        head_num=cfg.head_num,
        head_dim=cfg.head_dim,
        page_size=cfg.page_size,
        start_layer=0,
        end_layer=end_layer,
        is_draft_worker=False,
        use_mla_backend=False,
        mamba_layer_ids=list(cfg.other_layers),
        full_attention_layer_ids=list(cfg.full_layers),
        mamba2_cache_params=_mamba_params(cfg),
        model_context_len=cfg.context_len,
        extra_max_context_len=4,
        max_total_num_tokens=cfg.full_tokens,
        max_mamba_cache_size=cfg.mamba_slots,
        max_num_reqs=cfg.max_running,
        enable_memory_saver=False,
        enable_mamba_extra_buffer=cfg.extra_buffer,  # SGLang: the radix cache's strategy
        speculative_num_draft_tokens=cfg.spec_drafts or None,
        disable_overlap_schedule=not cfg.overlap,
        need_sort=False,
        mamba_full_memory_ratio=None,
        forward_stream=events.sglang_stream_arg(stream),
        lazy_compaction=cfg.lazy,
        **release.current().factory_fields(),
    )
    if not bootstrap.is_dropin():
        patches.mamba_pool_replayssm_attrs(bundle.req_to_token_pool)
    return bundle.req_to_token_pool, bundle.token_to_kv_pool, bundle.token_to_kv_pool_allocator


def _tree_cache(cfg: Config, server_args: Any, model_config: Any, pools: tuple) -> Any:
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache

    req_pool, _, allocator = pools
    disable = cfg.cache == "chunk"
    params = release.construct(
        CacheInitParams,
        disable=disable,
        req_to_token_pool=req_pool,
        token_to_kv_pool_allocator=allocator,
        page_size=cfg.page_size,
        eviction_policy="lru",
        enable_mamba_extra_buffer=False,
        enable_mamba_extra_buffer_lazy=False,
        chunked_prefill_size=cfg.chunked_prefill,
        sliding_window_size=cfg.window if cfg.hybrid == "swa" else None,
    )
    if cfg.cache == "hybrid":
        if cfg.hybrid == "swa":
            from sglang.srt.mem_cache.swa_radix_cache import SWARadixCache

            return SWARadixCache(params)
        from sglang.srt.mem_cache.mamba_radix_cache import MambaRadixCache

        return MambaRadixCache(params)
    return create_tree_cache(
        release.construct(
            TreeCacheBuildContext,
            server_args=server_args,
            params=params,
            is_hybrid_swa=cfg.hybrid == "swa",
            is_hybrid_ssm=cfg.hybrid == "mamba",
            enable_hierarchical_cache=False,
            disable_radix_cache=disable,
            effective_chunked_prefill_size=cfg.chunked_prefill,
            tp_worker=None,
            model_config=model_config,
            tp_size=1,
            tp_rank=0,
            tp_group=None,
            full_tokens_per_layer=cfg.full_tokens if cfg.hybrid == "swa" else None,
        )
    )


def _checker(stack: Stack, get_last_batch: Any, get_running_batch: Any) -> tuple[Any, Any]:
    """SGLang's pool statistics and idle invariant checker, as the scheduler wires them."""
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers.scheduler_components.invariant_checker import (
        SchedulerInvariantChecker,
    )
    from sglang.srt.managers.scheduler_components.pool_stats_observer import (
        SchedulerPoolStatsObserver,
    )

    cfg = stack.config
    swa = cfg.hybrid == "swa"
    full_per_layer = cfg.full_tokens if swa else None
    swa_per_layer = cfg.swa_tokens if swa else None
    extra = release.current().collaborators(stack)
    stats = release.construct(
        SchedulerPoolStatsObserver,
        tree_cache=stack.tree_cache,
        token_to_kv_pool_allocator=stack.allocator,
        req_to_token_pool=stack.req_to_token_pool,
        session_controller=types.SimpleNamespace(sessions={}),
        hisparse_coordinator=None,
        is_hybrid_swa=swa,
        is_hybrid_ssm=not swa,
        enable_hisparse=False,
        full_tokens_per_layer=full_per_layer,
        swa_tokens_per_layer=swa_per_layer,
        max_total_num_tokens=cfg.full_tokens,
        get_last_batch=get_last_batch,
        get_running_batch=get_running_batch,
        **extra,
    )
    checker = release.construct(
        SchedulerInvariantChecker,
        is_hybrid_swa=swa,
        is_hybrid_ssm=not swa,
        disaggregation_mode=DisaggregationMode.NULL,
        page_size=cfg.page_size,
        full_tokens_per_layer=full_per_layer,
        swa_tokens_per_layer=swa_per_layer,
        max_total_num_tokens=cfg.full_tokens,
        server_args=stack.server_args,
        tree_cache=stack.tree_cache,
        token_to_kv_pool_allocator=stack.allocator,
        req_to_token_pool=stack.req_to_token_pool,
        pool_stats_observer=stats,
        get_last_batch=get_last_batch,
        get_running_batch=get_running_batch,
        **extra,
    )
    return checker, stats


class _NoOp:
    """A collaborator whose every method does nothing (metrics, output streaming)."""

    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def _result_processor(stack: Stack) -> Any:
    """SGLang's ``SchedulerBatchResultProcessor``: finishes (``release_kv_cache`` inside
    ``free_group_begin``/``end``), ``maybe_cache_unfinished_req``, chunked accounting."""
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers.scheduler_components.batch_result_processor import (
        SchedulerBatchResultProcessor,
    )

    return release.construct(
        SchedulerBatchResultProcessor,
        is_generation=True,
        disaggregation_mode=DisaggregationMode.NULL,
        enable_overlap=stack.config.overlap,
        enable_overlap_mlx=False,
        server_args=stack.server_args,
        model_config=stack.model_config,
        token_to_kv_pool_allocator=stack.allocator,
        tree_cache=stack.tree_cache,
        hisparse_coordinator=None,
        req_to_token_pool=stack.req_to_token_pool,
        decode_offload_manager=None,
        metrics_collector=_NoOp(),
        metrics_reporter=_NoOp(num_generated_tokens=0, forward_ct_decode=0),
        draft_worker=None,
        model_worker=None,
        logprob_result_processor=_NoOp(),
        output_streamer=_NoOp(),
        abort_request=lambda *a, **k: None,
        **release.current().collaborators(stack),
    )


def build(cfg: Config, get_last_batch: Any, get_running_batch: Any) -> Stack:
    """Every object of the serving stack for ``cfg`` (after ``bootstrap.prepare``)."""
    from sglang.srt.managers.schedule_policy import SchedulePolicy
    from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import (
        NewTokenRatioTracker,
    )

    server_args = server_args_for(cfg)
    model_config = model_config_for(cfg)
    stream = events.forward_stream(cfg.device, cfg.forward_delay_us)
    build_pools = _swa_pools if cfg.hybrid == "swa" else _mamba_pools
    pools = build_pools(cfg, stream)
    tree_cache = _tree_cache(cfg, server_args, model_config, pools)
    swa = cfg.hybrid == "swa"
    stack = Stack(
        config=cfg,
        server_args=server_args,
        model_config=model_config,
        req_to_token_pool=pools[0],
        token_to_kv_pool=pools[1],
        allocator=pools[2],
        tree_cache=tree_cache,
        forward_stream=stream,
        full_layers=tuple(cfg.full_layers),
        swa_layers=tuple(cfg.other_layers) if swa else (),
        mamba_layers=() if swa else tuple(cfg.other_layers),
    )
    stack.checker, stack.stats = _checker(stack, get_last_batch, get_running_batch)
    stack.result_processor = _result_processor(stack)
    stack.policy = SchedulePolicy("lpm", tree_cache, False, False, False)
    stack.ratio = release.current().ratio_tracker(NewTokenRatioTracker, server_args)
    patches.scheduling(stack)
    paths.install()
    return stack
