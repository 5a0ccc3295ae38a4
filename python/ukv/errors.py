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


class ArgumentError(UkvError, ValueError):
    """An argument has the wrong dtype, device, shape, length, or is not a page multiple."""


class InvariantError(UkvError, AssertionError):
    """An internal invariant does not hold; the message prints the out-of-sync values."""


class PoolPoisonedError(UkvError, RuntimeError):
    """An internal failure left the pool in an unknown state; it refuses further use."""
