"""Config readers of the families with recurrent state: hybrids of attention and Mamba,
Gated-DeltaNet, lightning attention, KDA or short convolutions, and pure state models.

Each reader takes the config's fields and returns the shape; it names the keys it reads in
the config's own spelling, and applies transformers' default where a published config
leaves a key out (the default is the ``default=`` next to the key).
"""

from __future__ import annotations

from collections.abc import Mapping

from ukv.errors import PoolConfigError
from ukv.models import layers
from ukv.models.config_fields import ConfigFields, assemble
from ukv.models.layers import LayerKind
from ukv.models.shape import ModelShape
from ukv.models.state import (
    GatedDeltaNetMixer,
    KDAMixer,
    LightningMixer,
    Mamba1Mixer,
    Mamba2Mixer,
    ShortConvMixer,
)

__all__ = ["STATE_READERS"]

_LINEAR_FULL: Mapping[str, LayerKind] = {"full_attention": "full", "linear_attention": "mamba"}
_GRANITE: Mapping[str, LayerKind] = {"attention": "full", "mamba": "mamba"}
_NEMOTRON_BLOCKS: Mapping[str, LayerKind] = {
    "mamba": "mamba",
    "attention": "full",
    "mlp": "none",
    "moe": "none",
}
_ZAMBA2_BLOCKS: Mapping[str, LayerKind] = {"mamba": "mamba", "hybrid": "full+mamba"}
_LFM2: Mapping[str, LayerKind] = {"full_attention": "full", "conv": "mamba"}


def _gqa(cfg: ConfigFields, head_dim: int, kv_default: int | None = None) -> dict:
    """Attention geometry: KV heads (default ``kv_default``, else the query heads, as
    transformers does)."""
    q_heads = cfg.integer("num_attention_heads")
    return {
        "num_kv_heads": cfg.integer(
            "num_key_value_heads", default=q_heads if kv_default is None else kv_default
        ),
        "head_dim": head_dim,
        "num_q_heads": q_heads,
    }


def _text(cfg: ConfigFields) -> ConfigFields:
    """The nested ``text_config`` of a multimodal wrapper, else the config itself."""
    return cfg.mapping("text_config") if cfg.has("text_config") else cfg


# -- Gated-DeltaNet -------------------------------------------------------------------------


def _qwen3_next(cfg: ConfigFields, name: str) -> ModelShape:
    """Qwen3-Next and Qwen3.5 (same maths; Qwen3.5 nests it in ``text_config``):
    ``layer_types`` if present, else full attention at ``(i + 1) % full_attention_interval
    == 0``; transformers' defaults: 16 key / 32 value heads of 128, conv 4, head_dim 256."""
    outer, text = cfg, _text(cfg)
    if text.has("layer_types"):
        kinds = layers.from_layer_types(
            text.sequence("layer_types"), _LINEAR_FULL, text.key("layer_types")
        )
    else:
        interval = text.integer("full_attention_interval", default=4)
        kinds = layers.every_nth(
            text.integer("num_hidden_layers"), interval, interval - 1, "full", "mamba"
        )
    mixer = GatedDeltaNetMixer(
        num_k_heads=text.integer("linear_num_key_heads", default=16),
        num_v_heads=text.integer("linear_num_value_heads", default=32),
        head_k_dim=text.integer("linear_key_head_dim", default=128),
        head_v_dim=text.integer("linear_value_head_dim", default=128),
        conv_kernel=text.integer("linear_conv_kernel_dim", default=4),
    )
    # Qwen3-Next and the Qwen3.5 MoE configs default to 2 KV heads; dense Qwen3.5 names them.
    kv_default = None if text.model_type in ("qwen3_5", "qwen3_5_text") else 2
    attention = _gqa(text, text.integer("head_dim", default=256), kv_default)
    return assemble(
        text, name, kinds, attention=attention, mixer=mixer, outer=None if text is cfg else outer
    )


# -- Mamba2 hybrids -------------------------------------------------------------------------


def _nemotron_h(cfg: ConfigFields, name: str) -> ModelShape:
    """Nemotron-H: ``hybrid_override_pattern`` (``M`` Mamba2, ``*`` attention, ``-``/``E``
    MLP), or transformers 5's ``layers_block_type`` list."""
    if cfg.has("hybrid_override_pattern"):
        kinds = layers.from_nemotron_pattern(cfg.raw("hybrid_override_pattern"))
    elif cfg.has("layers_block_type"):
        kinds = layers.from_layer_types(
            cfg.sequence("layers_block_type"), _NEMOTRON_BLOCKS, "layers_block_type"
        )
    else:
        raise PoolConfigError(
            "nemotron_h config is missing key 'hybrid_override_pattern' "
            "(or transformers 5's 'layers_block_type')"
        )
    mixer = Mamba2Mixer(
        num_heads=cfg.integer("mamba_num_heads"),
        head_dim=cfg.integer("mamba_head_dim"),
        num_groups=cfg.integer("n_groups"),
        d_state=cfg.integer("ssm_state_size"),
        d_conv=cfg.integer("conv_kernel"),
    )
    head_dim = cfg.integer("head_dim", "attention_head_dim", default=128)
    return assemble(cfg, name, kinds, attention=_gqa(cfg, head_dim), mixer=mixer)


def _granitemoehybrid(cfg: ConfigFields, name: str) -> ModelShape:
    """GraniteMoeHybrid (Granite-4.0): ``layer_types`` of ``"attention"`` / ``"mamba"``;
    a config whose layers are all attention (Granite-4.0-Micro) is a full-attention model."""
    kinds = layers.from_layer_types(cfg.sequence("layer_types"), _GRANITE, "layer_types")
    mixer = None
    if layers.count(kinds, "mamba"):
        mixer = Mamba2Mixer(
            num_heads=cfg.integer("mamba_n_heads"),
            head_dim=cfg.integer("mamba_d_head"),
            num_groups=cfg.integer("mamba_n_groups"),
            d_state=cfg.integer("mamba_d_state"),
            d_conv=cfg.integer("mamba_d_conv"),
        )
    return assemble(cfg, name, kinds, attention=_gqa(cfg, cfg.head_dim_from_hidden()), mixer=mixer)


def _mamba2_heads(cfg: ConfigFields, d_ssm: int, heads_key: str, head_key: str) -> tuple[int, int]:
    """``(heads, head_dim)`` of a Mamba2 mixer whose head size may be ``"auto"``
    (``d_ssm // heads``); the two must multiply to ``d_ssm``."""
    heads = cfg.integer(heads_key)
    head = cfg.raw(head_key, "auto")
    if head == "auto":
        head = d_ssm // heads
    else:
        head = cfg.integer(head_key)
    if heads * head != d_ssm:
        raise PoolConfigError(
            f"{cfg.model_type} config: {heads_key} {heads} x {head_key} {head} != the mixer's "
            f"inner size {d_ssm}"
        )
    return heads, head


def _bamba(cfg: ConfigFields, name: str) -> ModelShape:
    """Bamba: attention at ``attn_layer_indices``, Mamba2 elsewhere; inner size
    ``mamba_expand * hidden_size`` (defaults: expand 2, 128 heads, d_state 256, 1 group)."""
    num_layers = cfg.integer("num_hidden_layers")
    attn = set(_indices(cfg, "attn_layer_indices", num_layers))
    kinds: list[LayerKind] = ["full" if i in attn else "mamba" for i in range(num_layers)]
    d_ssm = cfg.integer("mamba_expand", default=2) * cfg.integer("hidden_size")
    heads = cfg.integer("mamba_n_heads", default=128)
    head = (
        d_ssm // heads if cfg.raw("mamba_d_head", "auto") == "auto" else cfg.integer("mamba_d_head")
    )
    mixer = Mamba2Mixer(
        num_heads=heads,
        head_dim=head,
        num_groups=cfg.integer("mamba_n_groups", default=1),
        d_state=cfg.integer("mamba_d_state", default=256),
        d_conv=cfg.integer("mamba_d_conv", default=4),
    )
    return assemble(cfg, name, kinds, attention=_gqa(cfg, cfg.head_dim_from_hidden()), mixer=mixer)


def _falcon_h1(cfg: ConfigFields, name: str) -> ModelShape:
    """Falcon-H1: every layer runs attention and a Mamba2 mixer side by side; inner size
    ``mamba_d_ssm`` (else ``mamba_expand * hidden_size``), ``mamba_d_head`` may be
    ``"auto"``."""
    num_layers = cfg.integer("num_hidden_layers")
    d_ssm = cfg.integer(
        "mamba_d_ssm", default=cfg.integer("mamba_expand", default=2) * cfg.integer("hidden_size")
    )
    heads, head = _mamba2_heads(cfg, d_ssm, "mamba_n_heads", "mamba_d_head")
    mixer = Mamba2Mixer(
        num_heads=heads,
        head_dim=head,
        num_groups=cfg.integer("mamba_n_groups", default=1),
        d_state=cfg.integer("mamba_d_state", default=256),
        d_conv=cfg.integer("mamba_d_conv", default=4),
    )
    head_dim = cfg.integer("head_dim", default=cfg.head_dim_from_hidden())
    kinds: list[LayerKind] = ["full+mamba"] * num_layers
    return assemble(cfg, name, kinds, attention=_gqa(cfg, head_dim), mixer=mixer)


def _zamba2(cfg: ConfigFields, name: str) -> ModelShape:
    """Zamba2: ``layers_block_type`` of ``"mamba"`` / ``"hybrid"``; a hybrid layer runs the
    shared attention block (its own KV cache, heads of ``2 * hidden_size /
    num_attention_heads`` on the concatenated input) next to its Mamba2 mixer."""
    kinds = layers.from_layer_types(
        cfg.sequence("layers_block_type"), _ZAMBA2_BLOCKS, "layers_block_type"
    )
    hidden = cfg.integer("hidden_size")
    d_ssm = cfg.integer("mamba_expand", default=2) * hidden
    head = cfg.integer("mamba_headdim", default=64)
    heads = cfg.integer("n_mamba_heads", default=d_ssm // head)
    if heads * head != d_ssm:
        raise PoolConfigError(
            f"zamba2 config: n_mamba_heads {heads} x mamba_headdim {head} != "
            f"mamba_expand * hidden_size {d_ssm}"
        )
    mixer = Mamba2Mixer(
        num_heads=heads,
        head_dim=head,
        num_groups=cfg.integer("mamba_ngroups", default=1),
        d_state=cfg.integer("mamba_d_state", default=64),
        d_conv=cfg.integer("mamba_d_conv", default=4),
    )
    q_heads = cfg.integer("num_attention_heads")
    attention = {
        "num_kv_heads": cfg.integer("num_key_value_heads", default=q_heads),
        "head_dim": cfg.integer("attention_head_dim", default=2 * hidden // q_heads),
        "num_q_heads": q_heads,
    }
    return assemble(cfg, name, kinds, attention=attention, mixer=mixer)


def _mamba2(cfg: ConfigFields, name: str) -> ModelShape:
    """Pure Mamba-2 (e.g. Mamba-Codestral): every layer a Mamba2 mixer; transformers'
    defaults: 128 heads of 64, 8 groups, state 128, conv 4, expand 2."""
    num_layers = cfg.integer("num_hidden_layers", default=64)
    heads = cfg.integer("num_heads", default=128)
    head = cfg.integer("head_dim", default=64)
    mixer = Mamba2Mixer(
        num_heads=heads,
        head_dim=head,
        num_groups=cfg.integer("n_groups", default=8),
        d_state=cfg.integer("state_size", default=128),
        d_conv=cfg.integer("conv_kernel", default=4),
    )
    fields = ConfigFields({**cfg.values, "num_hidden_layers": num_layers}, cfg.model_type)
    return assemble(fields, name, ["mamba"] * num_layers, mixer=mixer)


def _mamba(cfg: ConfigFields, name: str) -> ModelShape:
    """Pure Mamba (v1): every layer a Mamba1 mixer of ``expand * hidden_size`` channels."""
    mixer = Mamba1Mixer(
        d_inner=cfg.integer(
            "intermediate_size",
            default=cfg.integer("expand", default=2) * cfg.integer("hidden_size"),
        ),
        d_state=cfg.integer("state_size", default=16),
        d_conv=cfg.integer("conv_kernel", default=4),
    )
    return assemble(cfg, name, ["mamba"] * cfg.integer("num_hidden_layers"), mixer=mixer)


def _jamba(cfg: ConfigFields, name: str) -> ModelShape:
    """Jamba: attention where ``i % attn_layer_period == attn_layer_offset``; Mamba1
    elsewhere, with ``d_inner = mamba_expand * hidden_size``."""
    kinds = layers.every_nth(
        cfg.integer("num_hidden_layers"),
        cfg.integer("attn_layer_period", default=8),
        cfg.integer("attn_layer_offset", minimum=0, default=4),
        "full",
        "mamba",
    )
    mixer = Mamba1Mixer(
        d_inner=cfg.integer("mamba_expand", default=2) * cfg.integer("hidden_size"),
        d_state=cfg.integer("mamba_d_state", default=16),
        d_conv=cfg.integer("mamba_d_conv", default=4),
    )
    return assemble(cfg, name, kinds, attention=_gqa(cfg, cfg.head_dim_from_hidden()), mixer=mixer)


# -- lightning, KDA, short conv -------------------------------------------------------------


def _minimax(cfg: ConfigFields, name: str) -> ModelShape:
    """MiniMax-Text-01 / M1: ``attn_type_list`` (0 lightning, 1 softmax attention), or
    transformers' ``layer_types``; lightning heads are the attention heads."""
    if cfg.has("layer_types"):
        kinds = layers.from_layer_types(cfg.sequence("layer_types"), _LINEAR_FULL, "layer_types")
    else:
        types = cfg.sequence("attn_type_list")
        kinds = layers.from_layer_types(
            [str(t) for t in types], {"0": "mamba", "1": "full"}, "attn_type_list"
        )
    head_dim = cfg.integer("head_dim", default=cfg.head_dim_from_hidden())
    mixer = LightningMixer(num_heads=cfg.integer("num_attention_heads"), head_dim=head_dim)
    return assemble(cfg, name, kinds, attention=_gqa(cfg, head_dim), mixer=mixer)


def _kimi_linear(cfg: ConfigFields, name: str) -> ModelShape:
    """Kimi-Linear: ``linear_attn_config`` lists the KDA and MLA layers (1-based unless
    ``kda_layer_index_base`` says 0); MLA caches ``kv_lora_rank + qk_rope_head_dim``."""
    lin = cfg.mapping("linear_attn_config")
    num_layers = cfg.integer("num_hidden_layers")
    base = lin.integer("kda_layer_index_base", minimum=0, default=1)
    full = {i - base for i in _indices(lin, "full_attn_layers", num_layers + base, base)}
    kda = {i - base for i in _indices(lin, "kda_layers", num_layers + base, base)}
    kinds: list[LayerKind] = []
    for i in range(num_layers):
        if (i in full) == (i in kda):
            raise PoolConfigError(
                f"kimi_linear config: layer {i + base} must be in exactly one of "
                f"linear_attn_config.full_attn_layers and linear_attn_config.kda_layers"
            )
        kinds.append("full" if i in full else "mamba")
    mixer = KDAMixer(
        num_heads=lin.integer("num_heads"),
        head_dim=lin.integer("head_dim"),
        conv_kernel=lin.integer("short_conv_kernel_size", default=4),
    )
    attention = {
        "num_kv_heads": 1,
        "head_dim": cfg.integer("qk_rope_head_dim"),
        "kv_lora_rank": cfg.integer("kv_lora_rank"),
        "num_q_heads": cfg.integer("num_attention_heads"),
    }
    max_len = cfg.integer("max_position_embeddings", "model_max_length", default=0, minimum=0)
    return assemble(
        cfg, name, kinds, attention=attention, mixer=mixer, max_positions=max_len or None
    )


def _lfm2(cfg: ConfigFields, name: str) -> ModelShape:
    """LFM2: ``layer_types`` (``"conv"`` / ``"full_attention"``), or the older
    ``full_attn_idxs``; a conv layer keeps ``conv_L_cache - 1`` inputs of ``hidden_size``."""
    num_layers = cfg.integer("num_hidden_layers")
    if cfg.has("layer_types"):
        kinds = layers.from_layer_types(cfg.sequence("layer_types"), _LFM2, "layer_types")
    else:
        attn = set(_indices(cfg, "full_attn_idxs", num_layers))
        kinds = tuple("full" if i in attn else "mamba" for i in range(num_layers))
    mixer = ShortConvMixer(
        channels=cfg.integer("hidden_size"), conv_kernel=cfg.integer("conv_L_cache", default=3)
    )
    head_dim = cfg.head_dim_from_hidden()
    return assemble(cfg, name, kinds, attention=_gqa(cfg, head_dim), mixer=mixer)


def _indices(cfg: ConfigFields, key: str, bound: int, low: int = 0) -> list[int]:
    """A list of layer indices in ``[low, bound)`` at ``key``."""
    values = cfg.sequence(key)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v < bound:
            raise PoolConfigError(
                f"{cfg.model_type} config key {cfg.key(key)!r} holds {v!r}; expected layer "
                f"indices in [{low}, {bound})"
            )
    return list(values)


STATE_READERS = {
    "qwen3_next": _qwen3_next,
    "qwen3_5": _qwen3_next,
    "qwen3_5_moe": _qwen3_next,
    "qwen3_5_text": _qwen3_next,
    "qwen3_5_moe_text": _qwen3_next,
    "nemotron_h": _nemotron_h,
    "jamba": _jamba,
    "granitemoehybrid": _granitemoehybrid,
    "bamba": _bamba,
    "falcon_h1": _falcon_h1,
    "zamba2": _zamba2,
    "mamba2": _mamba2,
    "mamba": _mamba,
    "minimax_text_01": _minimax,
    "minimax_m1": _minimax,
    "minimax": _minimax,
    "kimi_linear": _kimi_linear,
    "lfm2": _lfm2,
}
"""``model_type`` -> reader, for the families with recurrent state."""
