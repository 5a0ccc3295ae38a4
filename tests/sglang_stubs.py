"""A pytest plugin (``-p sglang_stubs``) that makes a ``--no-deps`` SGLang importable.

Used by ``test_sglang_dropin_real.py`` and the benches that run SGLang (in child
processes, e.g. ``benches/sglang_upstream.py``): it puts the directories
of ``UKV_SGLANG_PATH`` (``os.pathsep``-separated: SGLang 0.5.16 installed with
``pip install --no-deps --target``, plus any real dependencies installed the same way) in
front of ``sys.path``, and serves stand-in modules for the third-party packages SGLang
imports at module level but the memory-pool path never uses (:data:`STUBBED`, plus the
names in ``UKV_SGLANG_STUBS``). A stand-in's attributes are further stand-ins; classes
may derive from them. The packages of :data:`TYPED` (only where ``UKV_SGLANG_STUBS``
names them) are served differently: their attributes are classes that a pydantic model
may name as a field's type.
"""

from __future__ import annotations

import glob
import importlib.abc
import importlib.machinery
import os
import re
import subprocess
import sys
import types
from typing import Any

#: Third-party top-level packages served as stand-ins (never called on this path).
STUBBED = (
    "aiohttp",
    "compressed_tensors",
    "einops",
    "gguf",
    "sentencepiece",
    "starlette",
    "torchvision",
    "zmq",
) + tuple(n for n in os.environ.get("UKV_SGLANG_STUBS", "").split(",") if n)
# ``UKV_SGLANG_STUBS`` (comma-separated top-level names) adds to the list for one run, e.g.
# ``sgl_kernel`` where SGLang's CUDA path imports it but it is not installed; CI sets none.

#: Stand-ins whose every attribute is a class (:class:`_StandInType`), for packages whose
#: names SGLang puts in its pydantic request models: ``xgrammar`` (45 MB, not carried to the
#: GPU machine; ``sglang.srt.entrypoints.openai.protocol`` names ``xgrammar.StructuralTag``
#: in a field's type, and ``function_call.inkling_detector`` imports it unguarded). Served
#: only when ``UKV_SGLANG_STUBS`` names them; CI installs the real package.
TYPED = ("xgrammar",)


class _StandInBase:
    """What a class deriving from a stand-in derives from."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        pass

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __class_getitem__(cls, item: Any) -> Any:
        return cls


class _StandIn:
    """Any attribute, call, subscript or union of a stand-in is a stand-in."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _StandIn:
        return _StandIn()

    def __getattr__(self, name: str) -> _StandIn:
        return _StandIn()

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (_StandInBase,)

    def __getitem__(self, key: Any) -> _StandIn:
        return _StandIn()

    def __or__(self, other: Any) -> _StandIn:
        return self

    __ror__ = __or__

    def __iter__(self) -> Any:
        return iter(())

    def __bool__(self) -> bool:
        return False


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _StandIn()


class _StandInType(_StandInBase):
    """An attribute of a :data:`TYPED` stand-in: a real class, so ``isinstance`` checks,
    subclassing and type annotations work, and pydantic accepts it as a field's type."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.any_schema()


class _TypedStandInModule(types.ModuleType):
    """A :data:`TYPED` stand-in: each attribute is a :class:`_StandInType` subclass of that
    name, made once (so every importer sees the same class)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        cls = type(name, (_StandInType,), {"__module__": self.__name__})
        setattr(self, name, cls)
        return cls


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        typed = spec.name.split(".")[0] in TYPED
        module = (_TypedStandInModule if typed else _StandInModule)(spec.name)
        module.__path__ = []
        module.__version__ = "0"  # read by transformers' version probes
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def sglang_paths() -> list[str]:
    """The directories of ``UKV_SGLANG_PATH`` that exist."""
    raw = os.environ.get("UKV_SGLANG_PATH", "")
    return [p for p in raw.split(os.pathsep) if p and os.path.isdir(p)]


def sglang_found() -> bool:
    """Whether ``UKV_SGLANG_PATH`` names a directory holding SGLang.

    Raises:
        RuntimeError: SGLang is not found while ``UKV_REQUIRE_SGLANG=1`` (CI sets it: the
            tests that drive SGLang's own code must run there, not skip).
    """
    found = any(os.path.isdir(os.path.join(p, "sglang")) for p in sglang_paths())
    if not found and os.environ.get("UKV_REQUIRE_SGLANG") == "1":
        raise RuntimeError(
            "UKV_REQUIRE_SGLANG=1 but UKV_SGLANG_PATH names no SGLang install: "
            f"{os.environ.get('UKV_SGLANG_PATH', '')!r}"
        )
    return found


def sglang_version() -> str | None:
    """The version of the SGLang ``UKV_SGLANG_PATH`` names (its ``sglang-*.dist-info``),
    read without importing it; None when there is none."""
    for path in sglang_paths():
        for meta in sorted(glob.glob(os.path.join(path, "sglang-*.dist-info", "METADATA"))):
            with open(meta, encoding="utf-8", errors="replace") as f:
                m = re.search(r"^Version:\s*(\S+)", f.read(4096), re.MULTILINE)
            if m:
                return m.group(1)
    return None


def sglang_release() -> str | None:
    """The drop-in layout serving that SGLang (``"0.5.16"`` or ``"0.5.23"``), or None
    without one: the tests of one release skip when another is installed."""
    version = sglang_version()
    if version is None:
        return None
    from ukv.integrations.sglang.layouts import layout_for

    return layout_for(version).version


def needs_release(release: str) -> list[Any]:
    """The ``pytestmark`` of a module that drives SGLang ``release`` (``"0.5.16"``): skip
    without SGLang, and when ``UKV_SGLANG_PATH`` holds another release."""
    import pytest

    found = sglang_release()
    return [
        pytest.mark.skipif(
            not sglang_found(),
            reason="SGLang not found: set UKV_SGLANG_PATH to a --no-deps install (docs/SGLANG.md)",
        ),
        pytest.mark.skipif(
            found not in (None, release),
            reason=f"UKV_SGLANG_PATH holds SGLang {found}, not {release}",
        ),
    ]


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process: it imports the ukv this process imported (the
    installed wheel, or python/ with a copied-in _core during development) and this
    directory's plugin; ``extra`` is set on top."""
    import ukv

    env = dict(os.environ)
    ukv_root = os.path.dirname(os.path.dirname(os.path.abspath(ukv.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.abspath(__file__)), ukv_root])
    env.update(extra)
    return env


def run_child(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child Python with ``env``, its output captured (15 minutes at most)."""
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900
    )


def interpreter_numpy2_compat() -> bool:
    """Where ``TRITON_INTERPRET=1`` and numpy is 2.x: let Triton's interpreter take a
    one-element block as a loop bound, as it does with numpy 1.x. Returns whether it
    patched.

    SGLang 0.5.23's paged ``alloc_extend_kernel`` loops ``for block_id in range(
    num_blocks)`` over a value computed from ``tl.load(ptr + pid)``; the interpreter holds
    it as a numpy array of shape ``(1,)`` and its ``__index__`` is ``int(array)``, which
    numpy 2 refuses ("only 0-dimensional arrays can be converted to Python scalars"), so
    every SGLang pool of page size > 1 failed its first extend under the interpreter on
    the GPU image's stack (numpy 2.5; CI's numpy 1.26 converts). The drop-in's kernels do
    not take that path. Compiled Triton (a GPU without the interpreter) is untouched.
    """
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    import numpy as np

    if int(np.__version__.split(".")[0]) < 2:
        return False
    from triton.runtime import interpreter

    if getattr(interpreter._patch_lang_tensor, "__ukv_compat__", False):
        return True
    original = interpreter._patch_lang_tensor

    def _index(self: Any) -> int:
        data = np.asarray(self.handle.data)
        return int(data.reshape(-1)[0]) if data.size == 1 else int(data)

    def _patch_lang_tensor(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", _index)  # restored with the rest, in reverse

    _patch_lang_tensor.__ukv_compat__ = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = _patch_lang_tensor
    return True


def install_finder() -> None:
    """Put ``UKV_SGLANG_PATH`` first on ``sys.path`` and serve the stand-ins (after every
    other finder: an installed package wins), and under Triton's interpreter make it take
    numpy 2 (:func:`interpreter_numpy2_compat`); what :func:`pytest_configure` does before
    it checks ukv's bases. Used alone by ``benches/prepare_peer_wheels.sh``'s import check."""
    sys.path[:0] = sglang_paths()
    sys.meta_path.append(_StandInFinder())
    interpreter_numpy2_compat()


def pytest_configure(config: Any) -> None:
    install_finder()
    from ukv.integrations.sglang import bases

    assert bases.FROM_SGLANG, "SGLang's base classes did not import (see UKV_SGLANG_PATH)"
