"""Installs the ukv drop-in at start-up in processes an installed launcher starts.

``ukv.integrations.sglang.install()`` puts this directory first on ``PYTHONPATH`` and sets
``UKV_SGLANG_DROPIN=1``; every Python process started from then on (SGLang's scheduler and
detokenizer processes) imports this file at start-up, before SGLang imports its memory
pool, and installs the drop-in there too. Any ``sitecustomize`` that this one shadows is
run afterwards, so a user's own hook keeps working.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _run_shadowed() -> None:
    """Run the next ``sitecustomize`` on ``sys.path`` (the one this file hides), if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    others = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("UKV_SGLANG_DROPIN") == "1":
    import ukv.integrations.sglang

    ukv.integrations.sglang.install()
_run_shadowed()
