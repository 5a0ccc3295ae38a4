"""``.ci/check_imports.py``: it passes on this tree and fails on each kind of drift.

Each test copies what the check reads (``python/ukv``, ``rust/*/src``, ``docs/DESIGN.md``)
into a temporary directory, breaks one thing, and looks for the problem line it must print.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType

import pytest
from script_loader import load_script

REPO = Path(__file__).resolve().parent.parent


def _load_check() -> ModuleType:
    return load_script(".ci/check_imports.py")


check_imports = _load_check()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(
        REPO / "python" / "ukv",
        tmp_path / "python" / "ukv",
        ignore=shutil.ignore_patterns("__pycache__", "*.so"),
    )
    for src in (REPO / "rust").glob("*/src"):
        shutil.copytree(src, tmp_path / "rust" / src.parent.name / "src")
    (tmp_path / "docs").mkdir()
    shutil.copy(REPO / "docs" / "DESIGN.md", tmp_path / "docs" / "DESIGN.md")
    return tmp_path


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def _edit_map(tree: Path, old: str, new: str) -> None:
    design = tree / "docs" / "DESIGN.md"
    text = design.read_text()
    assert old in text
    design.write_text(text.replace(old, new, 1))


def test_this_tree_passes(tree: Path) -> None:
    assert check_imports.check(tree) == []


def test_a_python_cycle_fails(tree: Path) -> None:
    _append(tree / "python" / "ukv" / "errors.py", "\n\ndef _late():\n    from ukv import specs\n")
    problems = check_imports.check(tree)
    assert "import cycle in python/ukv: errors <-> specs" in problems
    assert "package map (python/ukv): `errors` imports `specs`, not on its line" in problems


def test_a_rust_cycle_fails_but_a_doc_link_does_not(tree: Path) -> None:
    geometry = tree / "rust" / "ukv-core" / "src" / "geometry.rs"
    _append(geometry, "\n/// See [`crate::arena`] for the bands.\npub(crate) struct Marker;\n")
    assert check_imports.check(tree) == []
    _append(geometry, "\n#[allow(dead_code)]\nfn _probe(a: &crate::arena::Arena) {}\n")
    problems = check_imports.check(tree)
    assert any(
        p.startswith("import cycle in rust/ukv-core: ") and "geometry" in p for p in problems
    )
    assert "package map (rust/ukv-core): `geometry` imports `arena`, not on its line" in problems


def test_relative_imports_resolve(tree: Path) -> None:
    _append(tree / "python" / "ukv" / "kernels" / "state.py", "\nfrom . import translate\n")
    problems = check_imports.check(tree)
    assert problems == [
        "package map (python/ukv): `kernels.state` imports `kernels.translate`, not on its line"
    ]


def test_a_stale_or_missing_line_fails(tree: Path) -> None:
    _edit_map(tree, "- `specs` — ", "- `specz` — ")
    _edit_map(tree, "→ `sim.engine`, `sim.traces`\n", "→ `sim.engine`, `sim.traces`, `errors`\n")
    (tree / "python" / "ukv" / "newmod.py").write_text("from ukv.errors import UkvError\n")
    problems = check_imports.check(tree)
    assert "package map (python/ukv): no line for `specs` (it imports `errors`)" in problems
    assert "package map (python/ukv): `specz` is not a module" in problems
    assert "package map (python/ukv): no line for `newmod` (it imports `errors`)" in problems
    assert (
        "package map (python/ukv): `sim.metrics` lists `errors` but does not import it" in problems
    )


def test_the_map_must_open_design_md(tree: Path) -> None:
    design = tree / "docs" / "DESIGN.md"
    design.write_text("# notes\n\n## Something else\n\n" + design.read_text())
    problems = check_imports.check(tree)
    assert problems == ["DESIGN.md: the first '## ' heading must be '## Package map'"]


def test_an_allowed_cycle_that_is_gone_must_leave_the_list(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(check_imports.ALLOWED_CYCLES, frozenset({"errors", "specs"}), "a test")
    assert "ALLOWED_CYCLES lists errors <-> specs, gone now: remove it" in check_imports.check(tree)
    _append(tree / "python" / "ukv" / "errors.py", "\n\ndef _late():\n    from ukv import specs\n")
    problems = check_imports.check(tree)
    assert not any("cycle" in p or "ALLOWED" in p for p in problems)
