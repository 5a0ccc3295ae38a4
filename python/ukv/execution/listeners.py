"""Move listeners: callables told of every executed plan's page moves.

For engines whose own objects mirror the pool's bytes (an integration that reports
relocations to the engine's cache object, or a test shadow). They are registered through
:meth:`ukv.UnifiedKVPool.add_move_listener` and outlive executors (a resumed buffer gets
a new executor, the listeners stay).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ukv.errors import ArgumentError

Moves = list[tuple[str, np.ndarray, np.ndarray]]
"""``[(sub_pool_name, src_pages, dst_pages), ...]``: one entry per sub-pool with moves."""

Listener = Callable[[Moves], None]


class MoveListeners:
    """The registered listeners, in registration order."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def __bool__(self) -> bool:
        return bool(self._listeners)

    def add(self, listener: Listener) -> None:
        """Call ``listener`` after every executed plan that moved pages."""
        self._listeners.append(listener)

    def remove(self, listener: Listener) -> None:
        """Stop calling ``listener``.

        Raises:
            ArgumentError: ``listener`` is not registered (nothing changes).
        """
        try:
            self._listeners.remove(listener)
        except ValueError:
            raise ArgumentError(
                f"bad argument listener = {listener!r}: not a move listener of this pool"
            ) from None

    def report(self, arena: Any, info: list[dict]) -> None:
        """Hand the arena's last plan's page moves to every listener (a plan without moves
        reports nothing). The bytes have moved already; a listener that raises
        propagates, but the pool stays consistent (its plan is complete)."""
        moves = [(info[i]["name"], src, dst) for i, src, dst in arena.plan_moves() if len(src)]
        if moves:
            for listener in list(self._listeners):
                listener(moves)
