"""Stand-ins the tests share.

:class:`StandInEvent` plays a forward-completion event (what ``set_inflight_forward`` and
the queued frees of device ids hold): the test decides when it completes, and it counts the
pool's ``synchronize()`` calls, so a test can tell a wait from a query.
"""

from __future__ import annotations

from collections.abc import Callable


class StandInEvent:
    """An event whose completion the test decides.

    Args:
        done: Complete from the start.
        on_done: Runs once, when the event completes (by the test calling :meth:`complete`,
            or by the pool synchronizing on it); not for one created ``done``.
    """

    def __init__(self, done: bool = False, *, on_done: Callable[[], None] | None = None) -> None:
        if not isinstance(done, bool):
            raise TypeError(f"done must be a bool, got {done!r} (on_done is keyword-only)")
        self.done = done
        self.on_done = on_done
        self.syncs = 0

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.syncs += 1
        self.complete()

    def complete(self) -> None:
        if not self.done:
            self.done = True
            if self.on_done is not None:
                self.on_done()
