"""SGLang 0.5.23's ``UnifiedKVPool``: N sub-pools (one ``"float"`` middle), token-major views.

The drop-in pool of 0.5.16 (claims, the deferred build of ukv's pool, geometry) with
0.5.23's contract: two END sub-pools plus at most one ``"float"`` middle (ukv's middle
band: ukv's core floats one band between the ends), SGLang's canonical chain order
(``[up, float, down]``), and SGLang 0.5.23's token-major views over ukv's buffer
(``(num_slots, *row)`` per layer, the entry as slot stride). Every sub-pool is an
envelope in ukv's core (``specs``), so the bytes sit where SGLang 0.5.23 puts them.
"""

from __future__ import annotations

from typing import Any, cast

import torch

from ukv.integrations.sglang import pool as v16
from ukv.integrations.sglang.errors import (
    SGLangArgumentError,
    SGLangConfigError,
    SGLangNotImplementedError,
)
from ukv.integrations.sglang.v0523.specs import (
    MambaSubPoolSpec,
    MHASubPoolSpec,
    MLASubPoolSpec,
    _reserved_floor_bytes,
    dense_views,
    state_views,
)

__all__ = ["UnifiedKVPool"]

_KINDS = (MHASubPoolSpec, MLASubPoolSpec, MambaSubPoolSpec)


def _refuse(what: str, why: str) -> SGLangNotImplementedError:
    return SGLangNotImplementedError(f"{what}: {why} (docs/SGLANG.md, SGLang 0.5.23)")


class UnifiedKVPool(v16.UnifiedKVPool):
    """One byte buffer shared by two END sub-pools and at most one float middle.

    Args:
        total_bytes, device, enable_memory_saver, page_size: As the 0.5.16 drop-in pool.
        sub_pool_specs: 0.5.23 specs: one ``"up"``, one ``"down"``, at most one
            ``"float"``; kept in SGLang's chain order ``[up, float, down]``.
        post_capture_active: Must be False (post-capture virtual-memory backing is not
            implemented).
        bs1_floor_terms: Kept (SGLang checks them at ``finalize_backing``, refused here).
        fused_draft: Must be None (fused draft regions are not implemented).

    Raises:
        SGLangConfigError: what SGLang asserts (fewer than two specs, names, one END of
            each direction) and a buffer too small for its floor plus a page each.
        SGLangNotImplementedError: more than one float middle (ukv's core floats one
            band), ``post_capture_active``, ``fused_draft`` or ``enable_memory_saver``.
    """

    def __init__(
        self,
        *,
        total_bytes: int,
        sub_pool_specs: list[Any],
        device: str,
        enable_memory_saver: bool,
        page_size: int = 1,
        post_capture_active: bool = False,
        bs1_floor_terms: list[tuple[str, int]] | None = None,
        fused_draft: Any = None,
    ) -> None:
        if post_capture_active:
            raise _refuse("post_capture_active=True", "post-capture backing is not implemented")
        if fused_draft is not None:
            raise _refuse("fused_draft", "fused speculative-draft regions are not implemented")
        super().__init__(
            total_bytes=total_bytes,
            sub_pool_specs=sub_pool_specs,
            device=device,
            enable_memory_saver=enable_memory_saver,
            page_size=page_size,
        )
        self.post_capture_active = False
        self.fused_draft = None
        self._bs1_floor_terms = list(bs1_floor_terms or [])
        self._reserved_floor = _reserved_floor_bytes(self.sub_pool_specs, page_size)
        self._views: dict[str, Any] = {}
        for spec in self.sub_pool_specs:
            if not isinstance(spec, MambaSubPoolSpec):
                spec.parts()  # SGLang checks the row alignment when it builds the views

    @staticmethod
    def _checked_specs(specs: list[Any]) -> list[Any]:
        """SGLang 0.5.23's checks, and its chain order ``[up, float, down]``."""
        if len(specs) < 2:
            raise SGLangConfigError(f"UnifiedKVPool needs >= 2 sub-pools; got {len(specs)}")
        for s in specs:
            if not isinstance(s, _KINDS):
                raise SGLangConfigError(
                    f"unsupported SubPoolSpec type: {type(s).__name__} (SGLang 0.5.23's specs "
                    "are served by ukv.integrations.sglang.v0523.specs)"
                )
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise SGLangConfigError(f"sub-pool names must be unique; got {names}")
        by = {d: [s for s in specs if s.grow_direction == d] for d in ("up", "float", "down")}
        if len(by["up"]) != 1 or len(by["down"]) != 1:
            raise SGLangConfigError(
                "UnifiedKVPool needs exactly one grow-up and one grow-down END sub-pool; got "
                f"directions {[s.grow_direction for s in specs]}"
            )
        if len(by["float"]) > 1:
            raise _refuse(
                f"{len(by['float'])} float sub-pools",
                "ukv's core floats one middle band between the two ends",
            )
        return [*by["up"], *by["float"], *by["down"]]

    def _other(self, name: str) -> str:
        """The id owner a non-owner binds: ``"full"`` (SGLang's SWA side binds full's
        ids, in the pair and in the tri-pool alike)."""
        if name != "full" and "full" in self._specs_by_name:
            return "full"
        return super()._other(name)

    def min_slot_index(self, name: str) -> int:
        """SGLang 0.5.23's first slot above the sink, ``ceil(floor / entry_bytes)`` (the
        allocators' first page, ``ceil(that / page_size)``, is ukv's first page)."""
        spec = self.spec(name)
        return -(-_reserved_floor_bytes(self.sub_pool_specs, self.page_size) // spec.entry_bytes())

    # ----- 0.5.23's surface ---------------------------------------------------------------------

    @property
    def post_capture_backed_bytes(self) -> int:
        """0: the whole buffer is backed at construction."""
        return 0

    @property
    def active_allocation_bytes(self) -> int:
        """Bytes safe to access: the whole buffer."""
        return self.total_bytes

    def finalize_backing(self, config: Any) -> None:
        """Refused: there is no post-capture backing to finalize.

        Raises:
            SGLangNotImplementedError: always.
        """
        raise _refuse("finalize_backing", "post-capture backing is not implemented")

    def mla_spec(self, name: str) -> MLASubPoolSpec:
        """The spec of MLA sub-pool ``name`` (SGLangArgumentError if it is not MLA)."""
        s = self.spec(name)
        if not isinstance(s, MLASubPoolSpec):
            raise SGLangArgumentError(
                f"sub-pool {name!r} is {type(s).__name__}, expected MLASubPoolSpec"
            )
        return s

    def require_draft_host_spec(self, name: str) -> Any:
        """Refused: no sub-pool carries a fused draft region.

        Raises:
            SGLangNotImplementedError: always.
        """
        raise _refuse(
            f"require_draft_host_spec({name!r})", "fused draft regions are not implemented"
        )

    build_dense_draft_views = require_draft_host_spec
    build_draft_state_views = require_draft_host_spec

    # ----- views (SGLang 0.5.23's token-major layout over ukv's buffer) --------------------------

    def _num_slots(self, name: str) -> int:
        ps = self.page_size
        return self.max_slots(name) // ps * ps

    def _dense(self, name: str, spec: Any) -> list[list[torch.Tensor]]:
        views = self._views.get(name)
        if views is None:
            raw, slots = self._raw, self._num_slots(name)
            views = [dense_views(raw, p, spec.entry_bytes(), slots) for p in spec.parts()]
            self._views[name] = views
        return views

    def mha_views_for(self, name: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per-layer K and V views of MHA sub-pool ``name``: ``(num_pages * page_size,
        head_num, head_dim)`` with the entry as slot stride, by physical token id."""
        k, v = self._dense(name, self.mha_spec(name))
        return k, v

    def mla_views_for(self, name: str) -> list[torch.Tensor]:
        """Per-layer latent views of MLA sub-pool ``name``: ``(num_pages * page_size, 1,
        kv_cache_dim)``, by physical token id."""
        (kv,) = self._dense(name, self.mla_spec(name))
        return kv

    def mamba_views_for(self, name: str) -> tuple[list[torch.Tensor], torch.Tensor]:
        """State views of sub-pool ``name`` over per-slot entries: ``conv[i]`` of shape
        ``(layers, max_slots, *conv_i)``, temporal ``(layers, max_slots, *temporal)``."""
        spec = self.mamba_spec(name)
        views = self._views.get(name)
        if views is None:
            views = state_views(self._raw, cast(MambaSubPoolSpec, spec), self.max_slots(name))
            self._views[name] = views
        conv, temporal = views
        return list(conv), temporal

    def page_envelopes(self, name: str) -> torch.Tensor:
        """Sub-pool ``name``'s page envelopes as a ``(num_pages, page_bytes)`` view."""
        spec = self.spec(name)
        ps = 1 if isinstance(spec, MambaSubPoolSpec) else self.page_size
        pages = self.max_slots(name) // ps
        page_bytes = ps * spec.entry_bytes()
        return self._raw[: pages * page_bytes].view(pages, page_bytes)

    def __repr__(self) -> str:
        state = self._pool.summary() if self._pool is not None else "not built yet"
        return f"UnifiedKVPool(sglang 0.5.23 drop-in, {self.total_bytes} bytes; {state})"
