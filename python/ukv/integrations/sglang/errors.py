"""SGLang's assertions as typed ukv errors.

SGLang's unified memory pool guards its calls with ``assert``; callers (and SGLang's own
tests) catch ``AssertionError``. The drop-in raises classes that are both that and the
matching ukv error, so ``except AssertionError`` and ``except ukv.UkvError`` both work,
and every message names the bad value.
"""

from __future__ import annotations

from ukv.errors import (
    ArgumentError,
    DeferredFreeError,
    DoubleFreeError,
    InvalidIdError,
    PoolConfigError,
)

__all__ = [
    "SGLangArgumentError",
    "SGLangConfigError",
    "SGLangDeferredFreeError",
    "SGLangDoubleFreeError",
    "SGLangInstallError",
    "SGLangInvalidIdError",
    "SGLangMisalignedError",
    "SGLangNotImplementedError",
    "SGLangReadOnlyTableError",
    "SGLangUnmarkedWriteLocError",
    "SGLangWriteLocError",
]


class SGLangConfigError(PoolConfigError, AssertionError):
    """A pool, spec or allocator parameter SGLang asserts on (directions, names, sizes,
    page sizes that disagree with a pool already built)."""


class SGLangArgumentError(ArgumentError, AssertionError):
    """A call argument SGLang asserts on (``out=`` dtype or shape, a call on the wrong
    side of a pair, a free group already open)."""


class SGLangMisalignedError(SGLangArgumentError):
    """A size or envelope that is not a whole number of pages ("misaligned")."""


class SGLangWriteLocError(SGLangArgumentError):
    """``set_kv_buffer`` of a hybrid SWA pool got no write location for the layer's side."""


class SGLangUnmarkedWriteLocError(ArgumentError):
    """SGLang 0.5.23: ``set_kv_buffer`` of a unified pool got a write location not marked
    physical (a bare tensor, or ``KVWriteLoc(..., physical=False)``). SGLang's pools raise
    a plain ``ValueError`` there, so this one is a ``ValueError`` and, unlike the other
    argument errors, not an ``AssertionError``."""


class SGLangInvalidIdError(InvalidIdError, AssertionError):
    """An id out of range, reserved, or not live (SGLang's stale-slot assertion)."""


class SGLangDoubleFreeError(DoubleFreeError, AssertionError):
    """A free of an id that is not live (SGLang's eager double-free assertion)."""


class SGLangDeferredFreeError(SGLangDoubleFreeError, DeferredFreeError):
    """A queued free (ids on the GPU) named ids that were not live when it was applied;
    ``failures`` says which ids were freed and which were not (as ukv's
    :class:`~ukv.errors.DeferredFreeError`)."""


class SGLangReadOnlyTableError(ArgumentError, AssertionError):
    """A write into ``virtual_to_physical`` / ``physical_to_virtual``: ukv's tables are
    read-only (the one deliberate difference from SGLang; docs/SGLANG.md)."""


class SGLangInstallError(PoolConfigError, RuntimeError):
    """``install()`` after SGLang imported the modules the drop-in serves: names other
    modules bound from them would stay SGLang's (a mixed installation)."""


class SGLangNotImplementedError(NotImplementedError, PoolConfigError):
    """A flag SGLang honours that the drop-in does not implement yet (names the flag)."""


class translated:
    """A context that re-raises ukv's caller errors as their SGLang-flavoured classes
    (the original chained as ``__cause__``); anything else passes through."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: object) -> None:
        if exc is None or isinstance(exc, AssertionError):
            return
        for ukv_kind, sglang_kind in _TRANSLATION:
            if isinstance(exc, ukv_kind):
                err = sglang_kind(str(exc))
                if isinstance(exc, DeferredFreeError):
                    err.failures = exc.failures  # type: ignore[attr-defined]
                raise err from exc


# Most specific first.
_TRANSLATION: tuple[tuple[type, type], ...] = (
    (DeferredFreeError, SGLangDeferredFreeError),
    (DoubleFreeError, SGLangDoubleFreeError),
    (InvalidIdError, SGLangInvalidIdError),
    (ArgumentError, SGLangArgumentError),
    (PoolConfigError, SGLangConfigError),
)
