"""The ukv exception hierarchy (API.md §6).

Every error ukv raises on caller input is a :class:`UkvError`. Each subclass also
derives from the built-in exception a Python caller would naturally catch, so
``except ValueError`` keeps working for code that predates ukv. Every message names
the value that was wrong, and a call that raises leaves the pool exactly as it was.

The Rust core's errors are mapped onto these classes in one place
(``rust/ukv-py/src/errors.rs``); the native module ``ukv._core`` registers the same
class objects, so ``ukv._core.DoubleFreeError is ukv.errors.DoubleFreeError``.
"""

from __future__ import annotations

__all__ = [
    "UkvError",
    "PoolConfigError",
    "InvalidIdError",
    "DoubleFreeError",
    "DeferredFreeError",
    "ArgumentError",
    "InvariantError",
    "PoolPoisonedError",
]


class UkvError(Exception):
    """Base class of every error ukv raises."""


class PoolConfigError(UkvError, ValueError):
    """A spec or pool parameter is invalid (names the field and the value)."""


class InvalidIdError(UkvError, IndexError):
    """An id is out of range, reserved (the padding sink), or negative."""


class DoubleFreeError(InvalidIdError):
    """An id was freed that is not live (already freed, never allocated, or repeated)."""


class DeferredFreeError(DoubleFreeError):
    """A free that was queued (ids on the GPU, or host ids queued behind them) named ids
    that were not live when it was applied.

    Raised by the call that applied it, *before* that call did anything of its own (so a
    retry of the call is safe). The free's valid ids were freed; nothing leaks.

    Attributes:
        failures: One record per rejected free (``sub_pool``, ``ids``, ``rejected``,
            ``freed``, ``reason``); also kept in ``pool.failed_frees``.
    """

    failures: tuple = ()

    @classmethod
    def of(cls, failures: list) -> DeferredFreeError:
        """The error naming these rejected frees."""
        parts = [
            f"{f.sub_pool!r}: ids {f.rejected[:8].tolist()}{'...' if f.rejected.size > 8 else ''} "
            f"of a queued free of {f.ids.size} were not freed ({f.reason}); "
            f"its {f.freed.size} valid ids were freed"
            for f in failures
        ]
        err = cls(
            "a queued free was rejected when applied (this call did nothing else): "
            + "; ".join(parts)
        )
        err.failures = tuple(failures)
        return err


class ArgumentError(UkvError, ValueError):
    """An argument has the wrong dtype, device, shape, length, or is not a page multiple."""


class InvariantError(UkvError, AssertionError):
    """An internal invariant does not hold; the message prints the out-of-sync values."""


class PoolPoisonedError(UkvError, RuntimeError):
    """An internal failure left the pool in an unknown state; it refuses further use."""
