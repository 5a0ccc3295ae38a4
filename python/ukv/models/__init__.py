"""Model cache shapes: presets for known hybrid models and a local ``config.json`` reader.

A :class:`ModelShape` says what one request of a hybrid model costs in cache bytes (full
attention KV per token, plus recurrent state per request or sliding-window KV per token),
shards itself for tensor parallelism, and builds the two specs of a
:class:`ukv.UnifiedKVPool`::

    import ukv
    from ukv import models

    shape = models.load("Qwen3-Next-80B-A3B").sharded(tp_size=2)
    pool = ukv.UnifiedKVPool(8 << 30, list(shape.specs()), page_size=16, device="meta")
    assert pool.spec("full").entry_bytes == shape.kv_bytes_per_token()

Models with one kind of cache (full attention, state, or sliding window only) have one
spec. Modules: :mod:`~ukv.models.attention` (KV geometry: GQA, sliding, chunked, MLA),
:mod:`~ukv.models.state` (Mamba1, Mamba2, Gated-DeltaNet, lightning, KDA and short-conv
state formulas), :mod:`~ukv.models.layers` (layer patterns), :mod:`~ukv.models.sharding`
(tensor-parallel rules), :mod:`~ukv.models.shape`, :mod:`~ukv.models.presets`,
:mod:`~ukv.models.hf_config` (the reader) with :mod:`~ukv.models.config_fields`,
:mod:`~ukv.models.family` (a reader as field tables), :mod:`~ukv.models.families_state` and
:mod:`~ukv.models.families_attention` (the tables of each family), :mod:`~ukv.models.dtypes` (SGLang's and vLLM's cache dtypes),
:mod:`~ukv.models.hub_cache` (the local Hugging Face cache), :mod:`~ukv.models.loader`.
"""

from ukv.models.attention import AttentionShape
from ukv.models.hf_config import SUPPORTED_MODEL_TYPES, from_hf_config
from ukv.models.layers import LayerKind
from ukv.models.loader import load
from ukv.models.presets import PRESETS, preset, preset_names
from ukv.models.shape import ModelKind, ModelShape
from ukv.models.state import (
    GatedDeltaNetMixer,
    KDAMixer,
    LightningMixer,
    Mamba1Mixer,
    Mamba2Mixer,
    Mixer,
    ShortConvMixer,
    StateShape,
)

__all__ = [
    "PRESETS",
    "SUPPORTED_MODEL_TYPES",
    "AttentionShape",
    "GatedDeltaNetMixer",
    "KDAMixer",
    "LayerKind",
    "LightningMixer",
    "Mamba1Mixer",
    "Mamba2Mixer",
    "Mixer",
    "ModelKind",
    "ModelShape",
    "ShortConvMixer",
    "StateShape",
    "from_hf_config",
    "load",
    "preset",
    "preset_names",
]
