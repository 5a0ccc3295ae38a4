"""One run's configuration, and the matrix the tests and the results table run."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

#: Tree caches: ``radix`` is what SGLang's ``create_tree_cache`` builds for a hybrid
#: model (``UnifiedRadixCache`` with the SWA or Mamba component); ``hybrid`` is 0.5.16's
#: per-hybrid radix cache (``SWARadixCache`` / ``MambaRadixCache``; 0.5.23 has none);
#: ``chunk`` is ``--disable-radix-cache`` (0.5.16: ``SWAChunkCache`` / ``ChunkCache``;
#: 0.5.23: ``UnifiedRadixCache`` disabled). ``release.Release*.caches`` says which a
#: release has.
CACHES = ("radix", "hybrid", "chunk")
#: The Mamba hybrid's full-attention tokens at page size 1 (see :func:`make`).
MAMBA_FULL_TOKENS = 128


@dataclasses.dataclass(frozen=True)
class Config:
    """A configuration of the model stand-in, the pool and the trace.

    The pool sizes are SGLang's: tokens per layer for the SWA hybrid
    (``full_tokens``/``swa_tokens``, what ``get_tokens_per_layer_info`` reports), KV tokens
    and state slots for the Mamba hybrid (``full_tokens``/``mamba_slots``). Both pools of a
    comparison get the same numbers, so the same bytes.
    """

    pool: str = "ukv"  # "sglang" (SGLang's own unified pool) or "ukv" (the drop-in)
    hybrid: str = "swa"  # "swa" or "mamba"
    page_size: int = 1
    lazy: bool = True
    cache: str = "radix"
    device: str = "cpu"
    steps: int = 12  # scheduler iterations with arrivals; then the trace drains
    seed: int = 0
    # Model stand-in: one layer of each kind by default (SGLang's K/V store is a Triton
    # kernel whose every program the CPU interprets: the writes are the CPU's cost).
    full_layers: tuple[int, ...] = (1,)
    other_layers: tuple[int, ...] = (0,)  # SWA or Mamba layer ids
    head_num: int = 2
    head_dim: int = 4
    window: int = 16  # sliding window (SWA hybrid)
    context_len: int = 256
    # Pool (per page size 1; page size 16 gets 2x: a request wastes up to a page a side).
    full_tokens: int = 160
    swa_tokens: int = 96
    mamba_slots: int = 8
    max_running: int = 8
    # Scheduler.
    chunked_prefill: int = 32
    max_prefill_tokens: int = 64
    overlap: bool = True  # SGLang's overlap loop (Mamba with radix cache: off, as SGLang)
    swa_eviction_interval: int = 2
    # SGLang's strict memory check during busy iterations too. Off for the SWA hybrid:
    # SGLang's own pool fails it in the overlap loop (its count is off by the token of the
    # in-flight decode), so it checks nothing there.
    busy_check: bool = True
    # SGLang's --schedule-conservativeness: low, so admission counts on few new tokens
    # per running request and decode runs out of memory (retraction) in short traces.
    conservativeness: float = 0.3
    # Trace.
    arrival_rate: float = 1.0  # mean requests per iteration
    num_prefixes: int = 2
    prefix_len: tuple[int, int] = (8, 40)
    suffix_len: tuple[int, int] = (2, 16)
    output_len: tuple[int, int] = (4, 48)
    vocab: int = 1000
    # Speculative decoding on the Mamba hybrid: draft tokens per verify step
    # (``speculative_num_draft_tokens`` to the factories; 0: off). Every decode is then a
    # verify step (``forward``): per-draft states into the scratch, one accepted.
    spec_drafts: int = 0
    # The factories' ``enable_mamba_extra_buffer`` (SGLang passes it with the radix
    # cache's extra_buffer strategy only). Not in the matrix: the model stand-in does not
    # write the track slots that strategy's tree donates.
    extra_buffer: bool = False
    # GPU only: microseconds each forward sleeps on its stream before writing.
    forward_delay_us: int = 0
    # Self-test of the checks: after iteration ``corrupt_at``, overwrite one live token's K/V
    # ("kv": a running request's, "tree": one only the tree holds) or one live state
    # ("state") through the pool's own write path, or ("draft") commit a rejected draft in every
    # verify step from then on; the run must then fail with LostBytes.
    corrupt: str = ""
    corrupt_at: int = -1

    @property
    def name(self) -> str:
        mode = "lazy" if self.lazy else "eager"
        layers = f"{len(self.full_layers)}f{len(self.other_layers)}{self.hybrid[0]}"
        name = f"{self.hybrid}-ps{self.page_size}-{mode}-{self.cache}-{layers}"
        if self.spec_drafts:
            name += f"-spec{self.spec_drafts}" + ("-xbuf" if self.extra_buffer else "")
        return f"{name}-corrupt-{self.corrupt}" if self.corrupt else name

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_json(obj: dict[str, Any]) -> Config:
        fields = {f.name for f in dataclasses.fields(Config)}
        clean = {k: tuple(v) if isinstance(v, list) else v for k, v in obj.items() if k in fields}
        return Config(**clean)


def default_cache(hybrid: str, page_size: int) -> str:
    """What SGLang 0.5.16 builds: ``radix`` (``create_tree_cache``'s ``UnifiedRadixCache``),
    but for Mamba at page size > 1 ``chunk``: its Mamba trees need page size 1 without the
    extra buffer (``MambaComponent`` asserts it)."""
    return "chunk" if hybrid == "mamba" and page_size > 1 else "radix"


def make(
    hybrid: str,
    page_size: int,
    lazy: bool,
    *,
    cache: str | None = None,
    more_swa: bool = False,
    scale: int = 1,
    **fields: Any,
) -> Config:
    """A configuration with SGLang's constraints and the pool sizes applied.

    Args:
        cache: one of :data:`CACHES` (default :func:`default_cache`).
        more_swa: one full layer and three SWA layers (SGLang's own pool then indexes its
            SWA table out of bounds, its defect 1: run it on the drop-in).
        scale: multiplies the pool sizes, the request slots and the arrival rate.
    """
    cache = cache or default_cache(hybrid, page_size)
    fields.update(hybrid=hybrid, page_size=page_size, lazy=lazy, cache=cache)
    fields.setdefault("busy_check", hybrid == "mamba")
    if hybrid == "mamba":
        # SGLang: the Mamba radix cache without the extra buffer runs with the overlap
        # schedule off (its "auto" strategy resolves to no_buffer + disable_overlap).
        fields.setdefault("overlap", cache == "chunk")
    if more_swa:
        fields.update(full_layers=(1,), other_layers=(0, 2, 3))
    base = Config()
    grow = scale * (2 if page_size > 1 else 1)
    # The Mamba hybrid's full side holds every token of every request (no window): a
    # smaller pool gives it the SWA hybrid's pressure.
    full = MAMBA_FULL_TOKENS if hybrid == "mamba" else base.full_tokens
    fields.update(
        full_tokens=full * grow,
        swa_tokens=base.swa_tokens * grow,
        mamba_slots=base.mamba_slots * scale,
        max_running=base.max_running * scale,
        arrival_rate=base.arrival_rate * scale,
    )
    return Config(**fields)


def matrix(
    scale: int = 1, steps: int = 12, seed: int = 0, release: Any = None, **fields: Any
) -> list[tuple[Config, bool]]:
    """The side-by-side matrix: ``(configuration, SGLang's pool can run it)``.

    SWA and Mamba x page sizes 1 and 16 x eager and lazy with the tree cache SGLang builds;
    then the other tree caches of the release once each; then more SWA than full layers
    (0.5.16: drop-in only); then the speculative configurations (:func:`speculative`).
    ``fields`` go to every configuration (e.g. ``forward_delay_us``). ``release``: a
    ``release.Release*`` (default: the SGLang on ``UKV_SGLANG_PATH``).
    """
    if release is None:
        from sglang_scheduler import release as release_mod

        release = release_mod.current()
    out: list[tuple[Config, bool]] = []
    kw: dict[str, Any] = dict(scale=scale, steps=steps, seed=seed, **fields)
    for hybrid in ("swa", "mamba"):
        for ps in (1, 16):
            for lazy in (False, True):
                out.append((make(hybrid, ps, lazy, **kw), True))
    if "hybrid" in release.caches:
        out.append((make("swa", 16, True, cache="hybrid", **kw), True))
        out.append((make("mamba", 1, True, cache="hybrid", **kw), True))
    out.append((make("swa", 1, False, cache="chunk", **kw), True))
    if "hybrid" not in release.caches:
        out.append((make("mamba", 1, True, cache="chunk", **kw), True))
    more_swa = release.sglang_runs_more_swa
    out.append((make("swa", 1, True, more_swa=True, **kw), more_swa))
    out.append((make("swa", 16, False, more_swa=True, **kw), more_swa))
    out += speculative(release, **kw)
    return out


def speculative(release: Any, **kw: Any) -> list[tuple[Config, bool]]:
    """Speculative decoding on the Mamba hybrid: ``speculative_num_draft_tokens`` to the
    factories, every decode a verify step (``forward``: per-draft states written to the
    scratch row of each batch position and read back, a seeded number of drafts accepted,
    the last accepted draft's state committed into the request's slot). The radix cache
    SGLang builds at page size 1 (no extra buffer) and the chunk cache at 16.
    ``release.spec_on_sglang`` says whether SGLang's own pool builds it."""
    ok = release.spec_on_sglang
    return [
        (make("mamba", 1, False, spec_drafts=3, **kw), ok),
        (make("mamba", 16, True, spec_drafts=4, **kw), ok),
    ]


def self_tests(steps: int = 12, seed: int = 0) -> list[Config]:
    """Runs that corrupt a live token's K/V or a live state on purpose (drop-in only):
    they must fail with LostBytes, or the checks check nothing."""
    kw: dict[str, Any] = dict(steps=steps, seed=seed)
    return [
        make("swa", 16, True, corrupt="kv", corrupt_at=6, **kw),
        # Late enough that finished requests left tokens only the tree holds.
        make("swa", 1, False, corrupt="tree", corrupt_at=40, **kw),
        make("mamba", 1, False, corrupt="state", corrupt_at=6, **kw),
        # A verify step that commits a rejected draft's state.
        make("mamba", 1, False, spec_drafts=3, corrupt="draft", corrupt_at=6, **kw),
    ]


def dumps(configs: list[Config]) -> str:
    return json.dumps([c.to_json() for c in configs])


def loads(text: str) -> list[Config]:
    return [Config.from_json(o) for o in json.loads(text)]
