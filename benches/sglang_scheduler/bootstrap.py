"""Make SGLang (0.5.16 or 0.5.23) importable in this process, with its pool or with the
drop-in.

The order matters and is SGLang's deployment order: on the CPU Triton's interpreter is
switched on before Triton is imported (SGLang's paged allocation is a Triton kernel);
then SGLang's directories go on ``sys.path`` with stand-ins for the third-party packages
it imports but this path never calls (``tests/sglang_stubs.py``); then, for the drop-in,
``ukv.integrations.sglang.install()`` runs before any SGLang module imports its pool (a
late install is refused by design). One process runs one pool.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def prepare(pool: str, device: str, sglang_path: str) -> None:
    """Import paths, stand-ins and (``pool == "ukv"``) the drop-in, before SGLang loads.

    Raises:
        SystemExit: SGLang is not found on ``sglang_path``.
    """
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        # One thread: every op here is small, and torch's thread pool on a loaded small
        # machine costs milliseconds per op in wake-ups (as benches/peer_sglang.py notes).
        import torch

        torch.set_num_threads(1)
    # SGLang's idle leak check raises instead of warning (its CI's setting).
    os.environ["SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE"] = "1"
    os.environ["UKV_SGLANG_PATH"] = sglang_path
    for p in (ROOT / "tests", ROOT / "benches"):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    import sglang_stubs

    if not sglang_stubs.sglang_paths():
        raise SystemExit(
            "SGLang not found: pass --sglang-path or set UKV_SGLANG_PATH (docs/SGLANG.md)"
        )
    from sglang_scheduler import release

    os.environ.update(release.current().environ)
    if device == "cuda":
        import peer_sglang  # serves sgl_kernel when the GPU machine has none

        peer_sglang.install_standin()
    # SGLang on sys.path, and the drop-in's ``bases`` bound to SGLang's base classes
    # (importing them does not import SGLang's unified pool).
    sglang_stubs.pytest_configure(None)
    if pool == "ukv":
        import ukv.integrations.sglang as dropin

        dropin.install(propagate=False)
    module = sys.modules.get("sglang.srt.mem_cache.unified_memory_pool")
    served = bool(module is not None and getattr(module, "__ukv_dropin__", False))
    assert served == (pool == "ukv") or module is None, "a mixed installation"


def pool_module() -> Any:
    """``sglang.srt.mem_cache.unified_memory_pool`` as this process serves it."""
    import importlib

    return importlib.import_module("sglang.srt.mem_cache.unified_memory_pool")


def is_dropin() -> bool:
    return bool(getattr(pool_module(), "__ukv_dropin__", False))


_override: Any = None


def publish_server_args(**fields: Any) -> Any:
    """Publish SGLang's process-wide ``ServerArgs`` (what ``get_server_args()`` returns).

    A real ``ServerArgs(model_path="dummy")``, SGLang's own test-only construction
    (``RuntimeContext.override_server_args``): every field at its default but those given,
    without the model-resolution pass a launched server runs. One field that pass would
    compute from the model's config is set here: ``mamba_cache_chunk_size`` (FLA's chunk,
    64, or the page size if larger).
    """
    from sglang.srt.runtime_context import get_context

    from sglang_scheduler import release

    global _override
    if _override is not None:
        _override.restore()
    derived = {"_mamba_cache_chunk_size": max(64, fields.get("page_size", 1))}
    as_fields = release.current().derived_server_args_as_fields
    _override = get_context().override_server_args(**fields, **(derived if as_fields else {}))
    args = _override.install()
    if not as_fields:
        for name, value in derived.items():
            object.__setattr__(args, name, value)
    return args
