"""SGLang paths the driver counts without changing them (``release.counted_paths``).

A counted method is wrapped by a counter that calls SGLang's own method with the same
arguments and returns its result; the run's summary reports the calls (``cli``:
``sglang_paths``), so a configuration shows it reached a path, e.g. 0.5.23's SWA page
handover (``SWAComponent._transfer_swa_pages``), which the drop-in serves since the
driver stopped replacing it (``patches``).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

#: Calls per counted path (``Class.method``), over this process.
COUNTS: dict[str, int] = {}


def install() -> None:
    """Wrap the current release's counted paths (once per process)."""
    from sglang_scheduler import release

    for module, cls_name, method in release.current().counted_paths:
        cls = getattr(importlib.import_module(module), cls_name)
        original = getattr(cls, method)
        if getattr(original, "_driver_counted", False):
            continue
        name = f"{cls_name}.{method}"
        COUNTS.setdefault(name, 0)
        setattr(cls, method, _counter(original, name))


def _counter(original: Any, name: str) -> Any:
    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        COUNTS[name] += 1
        return original(*args, **kwargs)

    counted._driver_counted = True  # type: ignore[attr-defined]
    return counted
