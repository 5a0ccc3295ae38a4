"""Digests of plans and tables: one int64 that every rank computes the same way.

``blake2b`` with an 8-byte digest over the raw int64 words (no copy: NumPy arrays
expose their buffer). Python's ``hash`` is salted per process, so it cannot be compared
across ranks; CRC32 has too few bits to leave on for millions of steps.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["chain", "digest_words"]

_MASK = (1 << 64) - 1


def digest_words(words: np.ndarray) -> int:
    """The signed 64-bit digest of a contiguous int64 array."""
    raw = hashlib.blake2b(np.ascontiguousarray(words).data, digest_size=8).digest()
    return int.from_bytes(raw, "little", signed=True)


def chain(values: list[int]) -> int:
    """One signed 64-bit digest of a sequence of digests (order matters)."""
    arr = np.array([v & _MASK for v in values], dtype=np.uint64)
    return digest_words(arr.view(np.int64))
