"""Sending a variable-length int64 message from rank 0 in (usually) one broadcast.

The first broadcast always carries a fixed chunk (default 1,024 words, 8 KiB) whose first
word is the message length; a message that does not fit sends its remainder in a second
broadcast. A step's plans are a few dozen words in steady decoding, so the common step
costs one collective of a fixed size and no allocation.
"""

from __future__ import annotations

import numpy as np
import torch

from ukv.distributed.group import Group

__all__ = ["CHUNK_WORDS", "Channel"]

CHUNK_WORDS = 1024
"""Words of the first, fixed-size broadcast."""


class Channel:
    """Rank 0 sends, every other rank receives, messages whose word 0 is their length.

    Args:
        group: The ranks.
        chunk_words: Size of the fixed first broadcast (>= 1).
    """

    def __init__(self, group: Group, chunk_words: int = CHUNK_WORDS) -> None:
        self.group = group
        self.chunk = torch.zeros(max(1, int(chunk_words)), dtype=torch.int64)
        self.sent_words = 0
        self.broadcasts = 0

    def send(self, msg: np.ndarray) -> None:
        """Broadcast ``msg`` (rank 0 only; ``msg[0] == len(msg)``)."""
        n, c = len(msg), len(self.chunk)
        head = torch.from_numpy(msg[: min(n, c)])
        self.chunk[: len(head)] = head
        self.group.broadcast(self.chunk)
        if n > c:
            self.group.broadcast(torch.from_numpy(np.ascontiguousarray(msg[c:])))
        self.sent_words += max(n, c)
        self.broadcasts += 1 + (n > c)

    def receive(self) -> np.ndarray:
        """The next message from rank 0 (a fresh array the caller may keep)."""
        self.group.broadcast(self.chunk)
        n = int(self.chunk[0])
        c = len(self.chunk)
        if n <= c:
            return self.chunk[:n].numpy().copy()
        rest = torch.empty(n - c, dtype=torch.int64)
        self.group.broadcast(rest)
        return np.concatenate([self.chunk.numpy(), rest.numpy()])
