"""The step clock: how much simulated time one scheduler step takes.

Two clocks:

* :class:`FixedClock` — every step costs ``FIXED_STEP_S`` (25 ms), whatever it does. A pure
  capacity model: holding more requests is serving more. Kept as an option
  (``--clock fixed``); it over-states every capacity gain, because a step that reads more
  KV, state and expert weights really does take longer.
* :class:`MeasuredClock` — a step costs the time of its kernels, from a model whose
  constants were measured on the GPU (``benches/measure_step_clock.py`` writes them; the
  simulator reads the committed ``benches/results/step-clock-<card>.json``, see
  :func:`default_clock_path`, or the path given). It refuses to run without that file: no
  constant here is made up.

The measured step model (one step = one forward of the whole batch: every decoding
request's next token plus this step's prefill chunks; ``T`` tokens in all)::

    t = floor + t_linear + t_attn + t_state
    floor    = layers * (MM_PER_LAYER * mm_floor_s + OTHER_PER_LAYER * launch_s)
               + full_layers * attn_floor_s + state_layers * state_floor_s
    t_linear = max(weight_bytes(T) / weight_bw,  2 * T * active_params / matmul_flops)
    t_attn   = kv_bytes_read / attn_bw + prefill_attention_flops / prefill_attn_flops
    t_state  = decoding_requests * 2 * state_bytes / state_bw

* ``weight_bytes(T)``: the dense weights, plus for a mixture of experts the experts the
  step touches: ``moe_layers * E * (1 - (1 - k/E)**T)`` experts of ``expert_bytes``
  (uniform routing of ``T`` tokens to ``k`` of ``E`` experts).
* ``kv_bytes_read``: every decoding request reads its full-attention KV (all its tokens)
  and its sliding-window KV (its window); a prefill chunk reads the KV before it too.
* ``prefill_attention_flops``: ``4 * q_heads * head_dim * n * (o + n/2)`` per full layer
  for a chunk of ``n`` tokens after ``o`` cached or computed ones (causal), the window
  instead of ``o + n/2`` on sliding layers.
* ``t_state``: a decode step reads and writes each request's recurrent state once.
  Prefill's state work (the chunked scan) is left out: it is ~1% of the prefill FLOPs of
  these models (Nemotron-Nano: 0.2 GFLOP of scan against 17.8 GFLOP of matmuls per token).

Each constant is one of the measured kernels' fits (:func:`fit`): a line ``t = a + x / rate``
per kernel family, its intercept ``a`` the per-launch floor. ``MM_PER_LAYER`` and
``OTHER_PER_LAYER`` (how many matmuls and small kernels one decoder layer launches) are
counts, not measurements: 4 matmuls (input projection, output projection, up/gate, down)
and 4 small kernels (two norms, an activation, a residual / rotary / router).

Model compute profiles (:data:`COMPUTE`) are parameter counts read off each preset's
published ``config.json`` (the fixtures in ``tests/fixtures/configs``), not measurements;
:func:`compute_profile` divides them by the tensor-parallel size.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ukv.errors import ArgumentError

if TYPE_CHECKING:
    from ukv.models import ModelShape

FIXED_STEP_S = 0.025
"""Simulated seconds per step of the fixed clock (one decode iteration of a large batch)."""
STEP_CLOCK_CARDS = ("h200", "h100")
"""Cards whose committed measurement the measured clock reads by default, in this order of
preference (the first whose file exists; ``--clock-json`` picks another)."""
STEP_CLOCK_PATTERN = "benches/results/step-clock-{card}.json"
"""Where a card's measured constants live, relative to the repository root."""
STEP_CLOCK_JSON = STEP_CLOCK_PATTERN.format(card="<card>")
"""How help texts name the default (``<card>``: one of :data:`STEP_CLOCK_CARDS`)."""
SCHEMA = "ukv-step-clock/1"
MM_PER_LAYER = 4
"""Matmul launches per decoder layer (a count, not a measurement)."""
OTHER_PER_LAYER = 4
"""Small-kernel launches per decoder layer besides matmuls and the mixer (a count)."""
CONSTANT_KEYS = (
    "copy_bw",
    "weight_bw",
    "matmul_flops",
    "mm_floor_s",
    "attn_bw",
    "attn_floor_s",
    "prefill_attn_flops",
    "prefill_attn_floor_s",
    "state_bw",
    "state_floor_s",
    "launch_s",
    "launch_eager_s",
)
"""What :func:`fit` produces and :class:`MeasuredClock` reads."""
RAW_KEYS = ("copy", "matmul", "decode_attention", "prefill_attention", "state_update", "launch")
"""The measurement families of the JSON's ``raw`` section."""


# ----- model compute profiles -----------------------------------------------------------------


@dataclass(frozen=True)
class ModelCompute:
    """What one forward step of a model computes and reads, besides its cache.

    Attributes:
        dense_params: Parameters every token's matmuls use (attention / mixer projections,
            dense MLPs, shared experts, routers, the LM head; not the input embedding,
            which is a row lookup).
        expert_params: Parameters of one routed expert in one MoE layer (0: dense model).
        moe_layers: Layers with routed experts.
        experts: Routed experts per MoE layer.
        top_k: Experts each token is routed to.
        dense_bytes: Bytes per dense parameter (2: bf16).
        expert_bytes: Bytes per expert parameter (gpt-oss ships MXFP4 experts: 4.25 bits).
        q_heads: Query heads of the attention layers.
        head_dim: Head dimension of the attention layers.
        layers: Decoder layers.
        source: Where the counts come from.
        embed_params: The input embedding (a row lookup, not read whole by a step; 0
            where it is tied to the LM head, which ``dense_params`` counts).
    """

    dense_params: float
    expert_params: float
    moe_layers: int
    experts: int
    top_k: int
    dense_bytes: float
    expert_bytes: float
    q_heads: int
    head_dim: int
    layers: int
    source: str
    embed_params: float = 0.0

    @property
    def active_params(self) -> float:
        """Parameters one token's matmuls use."""
        return self.dense_params + self.moe_layers * self.top_k * self.expert_params

    @property
    def total_params(self) -> float:
        """Parameters the matmuls hold (the input embedding excluded)."""
        return self.dense_params + self.moe_layers * self.experts * self.expert_params

    def weight_bytes(self, tokens: int) -> float:
        """Weight bytes a step of ``tokens`` tokens reads: the dense weights, and the
        experts ``tokens`` uniformly routed tokens touch in each MoE layer."""
        w = self.dense_params * self.dense_bytes
        if self.moe_layers and tokens > 0:
            touched = self.experts * (1.0 - (1.0 - self.top_k / self.experts) ** tokens)
            w += self.moe_layers * touched * self.expert_params * self.expert_bytes
        return w

    def sharded(self, tp: int) -> ModelCompute:
        """One tensor-parallel rank's share (weights, heads divided by ``tp``)."""
        if tp == 1:
            return self
        from dataclasses import replace

        return replace(
            self,
            dense_params=self.dense_params / tp,
            expert_params=self.expert_params / tp,
            q_heads=max(1, self.q_heads // tp),
        )


MXFP4_BYTES = 4.25 / 8
"""Bytes per parameter of an MXFP4 tensor (4-bit values plus one 8-bit scale per 32)."""

# Parameter counts from each preset's config.json (tests/fixtures/configs), one layer's
# projections multiplied out; tests/test_sim_clock.py checks the totals against the
# published totals (80B, 8.9B, 52B, 3B, 117B, 27B).
COMPUTE: dict[str, ModelCompute] = {
    # hidden 2048, 48 layers (12 gated attention: q+gate 2048x8192, k,v 2048x512, o
    # 4096x2048; 36 Gated-DeltaNet: in_proj_qkvz 2048x12288, in_proj_ba 2048x64, out
    # 4096x2048); every layer MoE: 512 experts of 3x2048x512, top-10, one shared expert
    # 3x2048x512, router 2048x512; LM head 151936x2048 (untied).
    "Qwen3-Next-80B-A3B": ModelCompute(
        dense_params=12 * (2048 * 8192 + 2 * 2048 * 512 + 4096 * 2048)
        + 36 * (2048 * 12288 + 2048 * 64 + 4096 * 2048)
        + 48 * (3 * 2048 * 512 + 2048 * 512)
        + 151936 * 2048,
        expert_params=3 * 2048 * 512,
        moe_layers=48,
        experts=512,
        top_k=10,
        dense_bytes=2,
        expert_bytes=2,
        q_heads=16,
        head_dim=256,
        layers=48,
        source="Qwen/Qwen3-Next-80B-A3B-Instruct config.json",
        embed_params=151936 * 2048,
    ),
    # hidden 4480, 56 layers: 27 Mamba2 (in_proj 4480x(2x10240+2x8x128+128), out
    # 10240x4480), 25 MLP (ReLU^2, 2x4480x15680), 4 attention (q,o 4480x5120, k,v
    # 4480x1024); LM head 131072x4480 (untied).
    "Nemotron-Nano-9B-v2": ModelCompute(
        dense_params=27 * (4480 * (2 * 10240 + 2 * 8 * 128 + 128) + 10240 * 4480)
        + 25 * (2 * 4480 * 15680)
        + 4 * (2 * 4480 * 5120 + 2 * 4480 * 1024)
        + 131072 * 4480,
        expert_params=0,
        moe_layers=0,
        experts=0,
        top_k=0,
        dense_bytes=2,
        expert_bytes=2,
        q_heads=40,
        head_dim=128,
        layers=56,
        source="nvidia/NVIDIA-Nemotron-Nano-9B-v2 config.json",
        embed_params=131072 * 4480,
    ),
    # hidden 4096, 32 layers: 28 Mamba1 (in_proj 4096x16384, x_proj 8192x288, dt_proj
    # 256x8192, out 8192x4096), 4 attention (q,o 4096x4096, k,v 4096x1024); MLP 3x4096x
    # 14336, dense in 16 layers, 16 experts top-2 in the other 16; LM head 65536x4096.
    "Jamba-1.5-Mini": ModelCompute(
        dense_params=28 * (4096 * 16384 + 8192 * 288 + 256 * 8192 + 8192 * 4096)
        + 4 * (2 * 4096 * 4096 + 2 * 4096 * 1024)
        + 16 * (3 * 4096 * 14336)
        + 16 * (4096 * 16)
        + 65536 * 4096,
        expert_params=3 * 4096 * 14336,
        moe_layers=16,
        experts=16,
        top_k=2,
        dense_bytes=2,
        expert_bytes=2,
        q_heads=32,
        head_dim=128,
        layers=32,
        source="ai21labs/AI21-Jamba-1.5-Mini config.json",
        embed_params=65536 * 4096,
    ),
    # hidden 2048, 40 layers: 36 Mamba2 (in_proj 2048x(2x4096+2x128+64), out 4096x2048),
    # 4 attention (q,o 2048x2048, k,v 2048x512); shared MLP 3x2048x8192 in every layer;
    # LM head tied to the 100352x2048 embedding (read by the head matmul).
    "Granite-4.0-H-Micro": ModelCompute(
        dense_params=36 * (2048 * (2 * 4096 + 2 * 128 + 64) + 4096 * 2048)
        + 4 * (2 * 2048 * 2048 + 2 * 2048 * 512)
        + 40 * (3 * 2048 * 8192)
        + 100352 * 2048,
        expert_params=0,
        moe_layers=0,
        experts=0,
        top_k=0,
        dense_bytes=2,
        expert_bytes=2,
        q_heads=32,
        head_dim=64,
        layers=40,
        source="ibm-granite/granite-4.0-h-micro config.json",
    ),
    # hidden 2880, 36 layers, all attention (q 2880x4096, k,v 2880x512, o 4096x2880) and
    # MoE: 128 experts of (2880x5760 + 2880x2880), top-4, MXFP4; router 2880x128; LM head
    # 201088x2880 (untied).
    "gpt-oss-120b": ModelCompute(
        dense_params=36 * (2880 * 4096 + 2 * 2880 * 512 + 4096 * 2880 + 2880 * 128) + 201088 * 2880,
        expert_params=2880 * 5760 + 2880 * 2880,
        moe_layers=36,
        experts=128,
        top_k=4,
        dense_bytes=2,
        expert_bytes=MXFP4_BYTES,
        q_heads=64,
        head_dim=64,
        layers=36,
        source="openai/gpt-oss-120b config.json",
        embed_params=201088 * 2880,
    ),
    # hidden 5376, 62 layers: attention q,o 5376x4096, k,v 5376x2048; MLP 3x5376x21504;
    # LM head tied to the 262144x5376 embedding (text model only).
    "Gemma-3-27B": ModelCompute(
        dense_params=62 * (2 * 5376 * 4096 + 2 * 5376 * 2048 + 3 * 5376 * 21504) + 262144 * 5376,
        expert_params=0,
        moe_layers=0,
        experts=0,
        top_k=0,
        dense_bytes=2,
        expert_bytes=2,
        q_heads=32,
        head_dim=128,
        layers=62,
        source="google/gemma-3-27b-it config.json (text_config)",
    ),
}
"""Compute profiles of the presets (one GPU, TP=1)."""


def compute_profile(shape: ModelShape) -> ModelCompute:
    """The compute profile of ``shape`` (one rank of it).

    Raises:
        ArgumentError: not a preset (the measured clock needs a profile; ``--clock fixed``
            needs none).
    """
    prof = COMPUTE.get(shape.name)
    if prof is None:
        raise ArgumentError(
            f"model {shape.name!r} has no compute profile: the measured clock knows "
            f"{', '.join(sorted(COMPUTE))}; use --clock fixed for other models"
        )
    return prof.sharded(shape.tp_size)


# ----- the clocks --------------------------------------------------------------------------


class Clock:
    """Simulated seconds of one step.

    Attributes:
        name: ``"fixed"`` or ``"measured"``.
        source: What the time comes from (one line).
    """

    name: str
    source: str

    def step_time(self, decode_ctx: np.ndarray, prefill: list[tuple[int, int]]) -> float:
        """Seconds of one step.

        Args:
            decode_ctx: shape ``[B]``, tokens each decoding request holds (its context,
                the new token included).
            prefill: ``(offset, tokens)`` of each prefill chunk of the step.
        """
        raise NotImplementedError

    def describe(self) -> dict:
        """JSON-ready description (name, source and the constants used)."""
        return {"name": self.name, "source": self.source}


class FixedClock(Clock):
    """Every step costs ``step_s`` seconds."""

    def __init__(self, step_s: float = FIXED_STEP_S) -> None:
        self.name, self.step_s = "fixed", float(step_s)
        self.source = f"fixed {self.step_s * 1e3:g} ms per step (not measured)"

    def step_time(self, decode_ctx: np.ndarray, prefill: list[tuple[int, int]]) -> float:
        return self.step_s

    def describe(self) -> dict:
        return {"name": self.name, "source": self.source, "step_s": self.step_s}


def load_constants(path: str | Path | None = None) -> dict:
    """The measured clock's JSON (``path``; default :func:`default_clock_path`).

    Raises:
        ArgumentError: no such file (the measurement has not been run: say how), or a file
            without the constants this clock needs.
    """
    p = _clock_path(path)
    if not p.is_file():
        raise ArgumentError(
            f"the measured step clock needs {p} (its constants are measured on the GPU, "
            "never assumed): run `python benches/measure_step_clock.py --device cuda "
            f"--out {STEP_CLOCK_JSON}` on the GPU machine (<card>: "
            f"{' or '.join(STEP_CLOCK_CARDS)}), or pass --clock-json PATH or --clock fixed"
        )
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ArgumentError(f"bad step-clock file {str(p)!r}: {e}") from None
    consts = data.get("constants") if isinstance(data, dict) else None
    missing = [k for k in CONSTANT_KEYS if not isinstance(consts, dict) or k not in consts]
    if missing:
        raise ArgumentError(
            f"bad step-clock file {str(p)!r}: no constant {', '.join(missing)} "
            f"(expected schema {SCHEMA!r}, written by benches/measure_step_clock.py)"
        )
    assert isinstance(consts, dict)
    for k in CONSTANT_KEYS:
        v = consts[k]
        if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise ArgumentError(f"bad step-clock file {str(p)!r}: constant {k} = {v!r}")
    return data


def default_clock_path(bases: list[Path] | None = None) -> Path | None:
    """The committed measurement the measured clock reads by default: the first of
    ``benches/results/step-clock-{h200,h100}.json`` (:data:`STEP_CLOCK_CARDS`) that exists,
    under the repository root or else the working directory (``bases`` replaces those
    two); None when there is none."""
    if bases is None:
        bases = [Path(__file__).resolve().parents[3], Path()]
    for base in bases:
        for card in STEP_CLOCK_CARDS:
            p = base / STEP_CLOCK_PATTERN.format(card=card)
            if p.is_file():
                return p
    return None


def _clock_path(path: str | Path | None) -> Path:
    if path is not None:
        return Path(path)
    return default_clock_path() or Path(STEP_CLOCK_JSON)


class MeasuredClock(Clock):
    """The step model of the module docstring, with measured constants.

    Args:
        shape: The model (one rank).
        constants: ``load_constants()``'s dict (its ``constants`` are used), or the
            ``constants`` dict itself.
        compute: The model's compute profile (default :func:`compute_profile`).
        source: Where the constants came from (for the JSON).
    """

    def __init__(
        self,
        shape: ModelShape,
        constants: dict,
        compute: ModelCompute | None = None,
        source: str = "",
    ) -> None:
        c = constants.get("constants", constants)
        self.c = {k: float(c[k]) for k in CONSTANT_KEYS}
        self.name = "measured"
        meta = constants.get("meta", {}) if "constants" in constants else {}
        self.source = source or (
            f"measured: {meta.get('device', '?')}, {meta.get('date_utc', '?')}"
        )
        self.compute = compute if compute is not None else compute_profile(shape)
        full = shape.full
        self.full_layers = full.num_layers if full is not None else 0
        self.kv_tok = shape.kv_bytes_per_token() if full is not None else 0
        swa = shape.swa
        self.swa_layers = swa.num_layers if swa is not None else 0
        self.swa_tok = shape.swa_bytes_per_token() if swa is not None else 0
        self.window = int(swa.window) if swa is not None and swa.window is not None else 0
        st = shape.state
        self.state_layers = st.num_layers if st is not None else 0
        self.state_bytes = shape.state_bytes_per_request() if st is not None else 0
        k = self.compute
        self.floor = (
            k.layers * (MM_PER_LAYER * self.c["mm_floor_s"] + OTHER_PER_LAYER * self.c["launch_s"])
            + (self.full_layers + self.swa_layers) * self.c["attn_floor_s"]
            + self.state_layers * self.c["state_floor_s"]
        )
        self._attn_coef = 4.0 * k.q_heads * k.head_dim

    def parts(self, decode_ctx: np.ndarray, prefill: list[tuple[int, int]]) -> dict[str, float]:
        """The step's time by part (``floor``, ``linear``, ``attn``, ``state``), seconds."""
        c, k = self.c, self.compute
        ctx = np.asarray(decode_ctx, dtype=np.float64)
        b = int(ctx.size)
        n_pre = sum(n for _, n in prefill)
        tokens = b + n_pre
        if tokens == 0:
            return {"floor": 0.0, "linear": 0.0, "attn": 0.0, "state": 0.0}
        lin = max(
            k.weight_bytes(tokens) / c["weight_bw"],
            2.0 * tokens * k.active_params / c["matmul_flops"],
        )
        kv = self.kv_tok * float(ctx.sum())
        if self.swa_tok:
            kv += self.swa_tok * float(np.minimum(ctx, self.window).sum())
        flops = 0.0
        for o, n in prefill:
            kv += self.kv_tok * (o + n)
            if self.swa_tok:
                kv += self.swa_tok * min(o + n, self.window + n)
            flops += self._attn_coef * n * (o + n / 2.0) * self.full_layers
            if self.swa_layers:
                flops += (
                    self._attn_coef * n * min(o + n / 2.0, float(self.window)) * self.swa_layers
                )
        attn = kv / c["attn_bw"] + flops / c["prefill_attn_flops"]
        state = b * 2.0 * self.state_bytes / c["state_bw"] if self.state_bytes else 0.0
        return {"floor": self.floor, "linear": lin, "attn": attn, "state": state}

    def step_time(self, decode_ctx: np.ndarray, prefill: list[tuple[int, int]]) -> float:
        return float(sum(self.parts(decode_ctx, prefill).values()))

    def describe(self) -> dict:
        k = self.compute
        return {
            "name": self.name,
            "source": self.source,
            "constants": self.c,
            "floor_s": self.floor,
            "active_params": k.active_params,
            "compute_source": k.source,
        }


def make_clock(kind: str, shape: ModelShape, path: str | Path | None = None) -> Clock:
    """``"fixed"`` or ``"measured"`` (constants from ``path`` or ``STEP_CLOCK_JSON``).

    Raises:
        ArgumentError: an unknown kind, a missing or bad constants file, or a model
            without a compute profile (measured).
    """
    if kind == "fixed":
        return FixedClock()
    if kind == "measured":
        data = load_constants(path)
        p = _clock_path(path)
        meta = data.get("meta", {})
        src = f"measured on {meta.get('device', '?')} ({meta.get('date_utc', '?')}), {_rel(p)}"
        if meta.get("quick"):
            src += " (--quick shapes: a smoke run, not a measurement to report)"
        return MeasuredClock(shape, data, source=src)
    raise ArgumentError(f"bad clock {kind!r}: expected 'fixed' or 'measured'")


def _rel(p: Path) -> str:
    """``p`` relative to the repository root when it lies under it (no machine paths)."""
    root = Path(__file__).resolve().parents[3]
    try:
        return str(p.resolve().relative_to(root))
    except ValueError:
        return p.name


# ----- fitting the measurements -------------------------------------------------------------


def fit_line(x: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """``t ≈ a + x / rate`` minimising the relative error (weights ``1/t²``), ``a >= 0``.

    Returns:
        ``(a, rate)``; a rate of ``inf`` when ``t`` does not grow with ``x``.
    """
    x, t = np.asarray(x, np.float64), np.asarray(t, np.float64)
    w = 1.0 / np.maximum(t, 1e-15) ** 2
    sw, sx, sxx = w.sum(), (w * x).sum(), (w * x * x).sum()
    st, sxt = (w * t).sum(), (w * x * t).sum()
    det = sw * sxx - sx * sx
    if x.size >= 2 and det > 0:
        b = (sw * sxt - sx * st) / det
        a = (st - b * sx) / sw
    else:
        b, a = (st / sx if sx else 0.0), 0.0
    if a < 0 or b <= 0:  # through the origin instead
        a = 0.0
        b = sxt / sxx if sxx else 0.0
    rate = 1.0 / b if b > 0 else math.inf
    return float(max(a, 0.0)), float(rate)


def _matmul_terms(p: dict) -> tuple[float, float]:
    """Bytes (weights + activations, bf16) and FLOPs of one ``m x k @ k x n`` matmul."""
    m, k, n = p["m"], p["k"], p["n"]
    return 2.0 * (k * n + m * k + m * n), 2.0 * m * k * n


def fit(raw: dict) -> tuple[dict, dict]:
    """Fit the clock's constants to the raw measurements.

    Args:
        raw: The JSON's ``raw`` section (:data:`RAW_KEYS`; see
            ``benches/measure_step_clock.py`` for what each entry holds).

    Returns:
        ``(constants, check)``: the :data:`CONSTANT_KEYS`, and per family the measured
        and predicted seconds of every point with their relative error.
    """
    c: dict[str, float] = {}
    copy = raw["copy"]
    c["copy_bw"] = max(p["bytes"] / p["s"] for p in copy)
    # Matmuls: below the ridge they stream their weights, above it they are FLOP-bound.
    mm = raw["matmul"]
    terms = [_matmul_terms(p) for p in mm]
    bw0 = max(b / p["s"] for (b, _), p in zip(terms, mm))
    fl0 = max(f / p["s"] for (_, f), p in zip(terms, mm))
    ridge = fl0 / bw0
    mem = [(b, p["s"]) for (b, f), p in zip(terms, mm) if f / b < ridge]
    cmp_ = [(f, p["s"]) for (b, f), p in zip(terms, mm) if f / b >= ridge]
    a_m, c["weight_bw"] = fit_line(*map(np.array, zip(*mem))) if len(mem) >= 1 else (0.0, bw0)
    a_c, c["matmul_flops"] = fit_line(*map(np.array, zip(*cmp_))) if len(cmp_) >= 1 else (0.0, fl0)
    c["mm_floor_s"] = a_m
    da = raw["decode_attention"]
    c["attn_floor_s"], c["attn_bw"] = fit_line(
        np.array([p["bytes"] for p in da]), np.array([p["s"] for p in da])
    )
    pa = raw["prefill_attention"]
    c["prefill_attn_floor_s"], c["prefill_attn_flops"] = fit_line(
        np.array([p["flops"] for p in pa]), np.array([p["s"] for p in pa])
    )
    su = raw["state_update"]
    c["state_floor_s"], c["state_bw"] = fit_line(
        np.array([p["bytes"] for p in su]), np.array([p["s"] for p in su])
    )
    c["launch_s"] = float(raw["launch"]["graph_s"])
    c["launch_eager_s"] = float(raw["launch"]["eager_s"])
    return c, check(raw, c, a_c)


def predict(family: str, point: dict, c: dict, mm_compute_floor: float = 0.0) -> float:
    """The fitted model's seconds for one raw ``point`` of ``family``."""
    if family == "copy":
        return point["bytes"] / c["copy_bw"]
    if family == "matmul":
        b, f = _matmul_terms(point)
        return max(c["mm_floor_s"] + b / c["weight_bw"], mm_compute_floor + f / c["matmul_flops"])
    if family == "decode_attention":
        return c["attn_floor_s"] + point["bytes"] / c["attn_bw"]
    if family == "prefill_attention":
        return c["prefill_attn_floor_s"] + point["flops"] / c["prefill_attn_flops"]
    if family == "state_update":
        return c["state_floor_s"] + point["bytes"] / c["state_bw"]
    raise ValueError(family)


def check(raw: dict, c: dict, mm_compute_floor: float = 0.0) -> dict[str, Any]:
    """Measured against predicted seconds for every raw point (see :func:`fit`)."""
    out: dict[str, Any] = {}
    for fam in ("copy", "matmul", "decode_attention", "prefill_attention", "state_update"):
        rows = []
        for p in raw[fam]:
            pred = predict(fam, p, c, mm_compute_floor)
            rows.append(
                {"measured_s": p["s"], "predicted_s": pred, "rel_err": abs(pred - p["s"]) / p["s"]}
            )
        errs = [r["rel_err"] for r in rows]
        out[fam] = {
            "points": rows,
            "median_rel_err": float(np.median(errs)) if errs else None,
            "max_rel_err": float(max(errs)) if errs else None,
        }
    out["mm_compute_floor_s"] = mm_compute_floor
    return out
