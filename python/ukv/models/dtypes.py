"""Cache dtypes as each serving engine picks them, or as the user names them.

Both engines keep the KV cache and the conv state in the serving dtype (the checkpoint's
``torch_dtype``; an fp32 checkpoint is served in bf16). They differ on the recurrent
(temporal / SSM) state:

* **SGLang** keeps it in fp32 (``--mamba-ssm-dtype`` / ``SGLANG_MAMBA_SSM_DTYPE``, default
  ``float32``; a config's own ``mamba_ssm_dtype`` wins over the default), whatever the mixer:
  ``mamba2_state_dtype`` in ``sglang/srt/configs/mamba_utils.py``.
* **vLLM** keeps it in the serving dtype (``--mamba-ssm-cache-dtype auto``:
  ``MambaStateDtypeCalculator._mamba_state_dtype`` returns the conv dtype), except where a
  per-model hook overrides it (``vllm/model_executor/models/config.py``): Nemotron-H takes
  the config's ``mamba_ssm_cache_dtype``, else fp32; Qwen3.5 the config's
  ``mamba_ssm_dtype``; and KDA's recurrent state is always fp32
  (``MambaStateDtypeCalculator.kda_state_dtype``). Lightning attention's one state tensor
  follows ``mamba_cache_dtype``, i.e. the serving dtype
  (``linear_attention_state_dtype``).

An explicit ``kv`` / ``state`` dtype (``--kv-dtype``, ``--state-dtype``) overrides the
convention: ``state`` sets the recurrent state's dtype (not the conv window).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import torch

from ukv.errors import ArgumentError
from ukv.models.shape import ModelShape
from ukv.specs import SUPPORTED_DTYPES

__all__ = [
    "ENGINES",
    "CacheDtypes",
    "Engine",
    "apply_engine_dtypes",
    "dtype_name",
    "engine_dtypes",
    "parse_dtype",
]

Engine = Literal["sglang", "vllm"]
ENGINES: tuple[Engine, ...] = ("sglang", "vllm")

_NAMES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
    "float8_e5m2": torch.float8_e5m2,
}

_VLLM_CONFIG_SSM = {"nemotron_h": torch.float32, "qwen3_5": None, "qwen3_5_moe": None}
"""vLLM's per-model hooks: the config's SSM dtype wins; the value is the default when the
config names none (None: the serving dtype)."""


def parse_dtype(text: object, what: str = "dtype") -> torch.dtype:
    """``"bf16"``, ``"float16"``, ``"fp8"``, ... -> a torch dtype the pool can store.

    Raises:
        ArgumentError: not one of the known names (the message lists them).
    """
    value = _NAMES.get(str(text).strip().lower()) if isinstance(text, str) else None
    if value is None or value not in SUPPORTED_DTYPES:
        raise ArgumentError(f"bad {what} {text!r}: expected one of {', '.join(_NAMES)}")
    return value


def dtype_name(dtype: torch.dtype | None) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"`` (``"-"`` for None)."""
    return "-" if dtype is None else str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class CacheDtypes:
    """The dtypes one engine (or the user) gives a model's caches.

    Attributes:
        engine: ``"sglang"`` or ``"vllm"``.
        kv: KV cache (full and sliding layers).
        conv: Conv-window state; None without state layers.
        temporal: Recurrent state; None without one (no state layers, or short conv only).
        source: How ``temporal`` was chosen, for the printout.
    """

    engine: Engine
    kv: torch.dtype
    conv: torch.dtype | None
    temporal: torch.dtype | None
    source: str

    def describe(self) -> str:
        """One line: ``engine sglang: kv bfloat16, conv bfloat16, state float32 (...)``."""
        return (
            f"engine {self.engine}: kv {dtype_name(self.kv)}, conv {dtype_name(self.conv)}, "
            f"state {dtype_name(self.temporal)} ({self.source})"
        )

    def as_dict(self) -> dict[str, str]:
        """JSON-friendly form."""
        return {
            "engine": self.engine,
            "kv": dtype_name(self.kv),
            "conv": dtype_name(self.conv),
            "state": dtype_name(self.temporal),
            "state_source": self.source,
        }


def engine_dtypes(
    shape: ModelShape,
    engine: str = "sglang",
    *,
    kv: torch.dtype | None = None,
    state: torch.dtype | None = None,
) -> CacheDtypes:
    """The cache dtypes ``engine`` would use for ``shape`` (see the module docstring).

    Args:
        shape: The model (its ``model_dtype``, ``config_ssm_dtype`` and mixer decide).
        engine: ``"sglang"`` or ``"vllm"``.
        kv: Explicit KV dtype (``--kv-dtype``); None: the serving dtype.
        state: Explicit recurrent-state dtype (``--state-dtype``); None: the convention.

    Raises:
        ArgumentError: ``engine`` is unknown, or ``state`` given for a model without a
            recurrent state.
    """
    if engine not in ENGINES:
        raise ArgumentError(f"bad engine {engine!r}: expected one of {', '.join(ENGINES)}")
    model = shape.model_dtype
    kv_dtype = model if kv is None else kv
    if shape.state is None:
        if state is not None:
            raise ArgumentError(
                f"--state-dtype given, but model {shape.name!r} ({shape.kind}) has no state"
            )
        return CacheDtypes(engine, kv_dtype, None, None, "no state layers")  # type: ignore[arg-type]
    mixer = shape.state.mixer.kind
    if shape.state.temporal_shape is None:
        if state is not None:
            raise ArgumentError(
                f"--state-dtype given, but model {shape.name!r}'s {mixer} layers keep only a "
                f"conv window (in the serving dtype)"
            )
        return CacheDtypes(engine, kv_dtype, model, None, "short conv: no recurrent state")  # type: ignore[arg-type]
    temporal, source = _temporal(shape, engine, mixer)
    if state is not None:
        temporal, source = state, "--state-dtype"
    return CacheDtypes(engine, kv_dtype, model, temporal, source)  # type: ignore[arg-type]


def _temporal(shape: ModelShape, engine: str, mixer: str) -> tuple[torch.dtype, str]:
    """The recurrent-state dtype of ``engine``'s convention, and why."""
    if mixer == "kda":
        return torch.float32, f"{engine}: KDA state is always fp32"
    named = shape.config_ssm_dtype
    if engine == "sglang":
        if named is not None:
            return named, "sglang: the config's mamba_ssm_dtype"
        return torch.float32, "sglang: --mamba-ssm-dtype default float32"
    if mixer == "lightning":
        return shape.model_dtype, "vllm: lightning state in the serving dtype"
    family = shape.architecture.removesuffix("_text")
    if family in _VLLM_CONFIG_SSM:
        if named is not None:
            return named, f"vllm: {family} hook, the config's SSM dtype"
        default = _VLLM_CONFIG_SSM[family]
        if default is not None:
            return default, f"vllm: {family} hook default"
    return shape.model_dtype, "vllm: --mamba-ssm-cache-dtype auto = serving dtype"


def apply_engine_dtypes(
    shape: ModelShape,
    engine: str = "sglang",
    *,
    kv: torch.dtype | None = None,
    state: torch.dtype | None = None,
) -> tuple[ModelShape, CacheDtypes]:
    """``shape`` with the cache dtypes of :func:`engine_dtypes` applied.

    Returns:
        ``(shape, dtypes)``.

    Raises:
        ArgumentError: as :func:`engine_dtypes`.
    """
    dtypes = engine_dtypes(shape, engine, kv=kv, state=state)
    out = shape.with_dtypes(kv=dtypes.kv)
    if out.state is not None:
        out = dataclasses.replace(
            out,
            state=dataclasses.replace(
                out.state,
                conv_dtype=dtypes.conv or out.state.conv_dtype,
                temporal_dtype=dtypes.temporal or out.state.temporal_dtype,
            ),
        )
    return out, dtypes
