#!/usr/bin/env python3
"""The package's layering, checked: no import cycle, and DESIGN.md's package map is true.

Run from anywhere: ``python3 .ci/check_imports.py`` (it finds the repository from its own
path; standard library only, so it runs in a clean clone before anything is installed).

What counts as an import:

* Python (``python/ukv``): every ``import``/``from ... import`` of a ``ukv`` module that the
  file's syntax tree holds, at any depth (function-local and ``TYPE_CHECKING`` imports
  too), relative ones resolved. ``from ukv.a import b`` is an edge to ``ukv.a.b`` when that
  is a module, else to ``ukv.a``. An edge from a module to a package that contains it (a
  submodule reading its own package, or anything reading the root ``ukv``) is not counted:
  Python runs a package's ``__init__`` before its submodules either way. ``ukv._core`` is
  the compiled Rust extension (``_core.pyi`` stands in for it) and imports nothing.
* Rust (every crate under ``rust/``): each ``src/*.rs`` file is a module; a ``crate::name``
  path in code (comments removed) is an edge to module ``name`` when such a file exists.
  ``lib.rs`` only declares the modules and re-exports, so it is not part of the map.

Checks, each failure printed on its own line (exit status 1 if any):

1. No cycle (strongly connected component of more than one module) in either graph.
2. ``docs/DESIGN.md`` opens with ``## Package map`` (its first ``##`` heading); under it,
   ``###`` headings name a tree (``python/ukv``, ``rust/ukv-core``, ``rust/ukv-py``) and
   each module of that tree has exactly one line
   ``- `name` — what it owns → `dep`, `dep` `` (or ``→ nothing``), with names relative to
   the tree (``execution.packed`` for ``ukv.execution.packed``, ``arena`` for a core file).
   The deps listed must be exactly the module's real imports: a missing one means the code
   imports something its line does not allow; an extra one means the map went stale.
   Lines for modules that do not exist are reported too.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "DESIGN.md"
MAP_HEADING = "## Package map"

# python/ukv cycles that are known and owned by someone, with who and why; empty is the goal.
# Each entry allows exactly that set of modules: a cycle that grows or changes fails again,
# and an entry whose cycle is gone fails too (so the list cannot go stale).
ALLOWED_CYCLES: dict[frozenset[str], str] = {}
"""Cycles tolerated for now, each with the reason; an entry whose cycle is gone fails."""

Graph = dict[str, set[str]]


# ---------------------------------------------------------------------------- python


def _python_modules(pkg_root: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module of the ``ukv`` package (stubs of compiled ones)."""
    mods: dict[str, Path] = {}
    for f in sorted((pkg_root / "ukv").rglob("*.py*")):
        if f.suffix not in (".py", ".pyi") or "__pycache__" in f.parts:
            continue
        parts = list(f.relative_to(pkg_root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if f.suffix == ".pyi" and name in mods:
            continue
        if f.suffix == ".py" or not f.with_suffix(".py").exists():
            mods[name] = f
    return mods


def _resolve(target: str, mods: dict[str, Path]) -> str | None:
    """The longest prefix of ``target`` that is a module of the package."""
    parts = target.split(".")
    while parts:
        name = ".".join(parts)
        if name in mods:
            return name
        parts.pop()
    return None


def python_graph(pkg_root: Path) -> Graph:
    mods = _python_modules(pkg_root)
    graph: Graph = {}
    for mod, f in mods.items():
        deps: set[str] = set()
        if f.suffix == ".py":
            is_pkg = f.name == "__init__.py"
            package = mod if is_pkg else mod.rpartition(".")[0]
            for node in ast.walk(ast.parse(f.read_text(), str(f))):
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                        base = ".".join(anchor + ([base] if base else []))
                    targets = [
                        f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                        for a in node.names
                    ]
                else:
                    continue
                for t in targets:
                    if t == "ukv" or t.startswith("ukv."):
                        resolved = _resolve(t, mods)
                        if resolved is not None:
                            deps.add(resolved)
        # A package that contains mod runs before it anyway: not a layering edge.
        graph[mod] = {d for d in deps if d != mod and not mod.startswith(d + ".")}
    return graph


# ------------------------------------------------------------------------------ rust

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_STRING = re.compile(r'"(?:\\.|[^"\\])*"')


def rust_graph(src: Path) -> Graph:
    files = {f.stem: f for f in sorted(src.glob("*.rs")) if f.stem != "lib"}
    graph: Graph = {}
    for name, f in files.items():
        code = _COMMENT.sub("", _STRING.sub('""', f.read_text()))
        used = set(re.findall(r"\bcrate::(\w+)", code))
        graph[name] = {m for m in used if m in files and m != name}
    return graph


# ---------------------------------------------------------------------------- checks


def cycles(graph: Graph) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


_LINE = re.compile(r"^- `(?P<name>[^`]+)` — (?P<owns>.+) → (?P<deps>.+)$")


def read_map(design: Path) -> tuple[dict[str, dict[str, set[str]]], list[str]]:
    """``{tree: {module: allowed deps}}`` from DESIGN.md's package map, and format errors."""
    errors: list[str] = []
    lines = design.read_text().splitlines()
    headings = [i for i, line in enumerate(lines) if line.startswith("## ")]
    if not headings or lines[headings[0]].strip() != MAP_HEADING:
        return {}, [f"{design.name}: the first '## ' heading must be '{MAP_HEADING}'"]
    end = headings[1] if len(headings) > 1 else len(lines)
    trees: dict[str, dict[str, set[str]]] = {}
    tree: str | None = None
    for number, line in enumerate(lines[headings[0] + 1 : end], start=headings[0] + 2):
        if line.startswith("### "):
            named = re.search(r"`(python/ukv|rust/[\w-]+)`", line)
            tree = named.group(1) if named else None
            if tree is None:
                errors.append(f"{design.name}:{number}: a map heading must name its tree")
            else:
                trees.setdefault(tree, {})
            continue
        if not line.startswith("- `"):
            continue
        m = _LINE.match(line)
        if m is None or tree is None:
            errors.append(
                f"{design.name}:{number}: expected '- `module` — what it owns → `dep`, ...'"
                f" (or '→ nothing') under a tree heading, got: {line}"
            )
            continue
        deps_text = m.group("deps").strip()
        deps = set(re.findall(r"`([^`]+)`", deps_text))
        if not deps and deps_text.rstrip(".") != "nothing":
            errors.append(f"{design.name}:{number}: deps must be `names` or 'nothing'")
        if m.group("name") in trees[tree]:
            errors.append(f"{design.name}:{number}: `{m.group('name')}` has a second line")
        trees[tree][m.group("name")] = deps
    return trees, errors


def _relative(graph: Graph, prefix: str) -> Graph:
    def rel(name: str) -> str:
        return name[len(prefix) :] if name.startswith(prefix) else name

    return {rel(m): {rel(d) for d in deps} for m, deps in graph.items()}


def real_graphs(root: Path) -> dict[str, Graph]:
    graphs = {"python/ukv": _relative(python_graph(root / "python"), "ukv.")}
    for src in sorted((root / "rust").glob("*/src")):
        graphs[f"rust/{src.parent.name}"] = rust_graph(src)
    return graphs


def check(root: Path) -> list[str]:
    problems: list[str] = []
    graphs = real_graphs(root)
    seen: set[frozenset[str]] = set()
    for tree, graph in graphs.items():
        for comp in cycles(graph):
            if tree == "python/ukv" and frozenset(comp) in ALLOWED_CYCLES:
                seen.add(frozenset(comp))
                print(f"allowed cycle in {tree}: {' <-> '.join(comp)}")
                continue
            problems.append(f"import cycle in {tree}: {' <-> '.join(comp)}")
    for gone in sorted(set(ALLOWED_CYCLES) - seen, key=sorted):
        problems.append(f"ALLOWED_CYCLES lists {' <-> '.join(sorted(gone))}, gone now: remove it")
    design = root / "docs" / "DESIGN.md"
    mapped, errors = read_map(design)
    problems += errors
    if errors and not mapped:
        return problems
    for tree, graph in graphs.items():
        allowed = mapped.get(tree)
        if allowed is None:
            problems.append(f"package map: no '### ... `{tree}`' section")
            continue
        for mod in sorted(graph):
            if mod not in allowed:
                deps = ", ".join(f"`{d}`" for d in sorted(graph[mod])) or "nothing"
                problems.append(f"package map ({tree}): no line for `{mod}` (it imports {deps})")
                continue
            for dep in sorted(graph[mod] - allowed[mod]):
                problems.append(f"package map ({tree}): `{mod}` imports `{dep}`, not on its line")
            for dep in sorted(allowed[mod] - graph[mod]):
                problems.append(
                    f"package map ({tree}): `{mod}` lists `{dep}` but does not import it"
                )
        for mod in sorted(set(allowed) - set(graph)):
            problems.append(f"package map ({tree}): `{mod}` is not a module")
    for tree in sorted(set(mapped) - set(graphs)):
        problems.append(f"package map: section for `{tree}`, which is not a tree here")
    return problems


def main() -> int:
    if "--graph" in sys.argv[1:]:  # print the real imports, as map lines without the "owns"
        for tree, graph in real_graphs(ROOT).items():
            print(f"### `{tree}`")
            for mod in sorted(graph):
                deps = ", ".join(f"`{d}`" for d in sorted(graph[mod])) or "nothing"
                print(f"- `{mod}` — ? → {deps}")
        return 0
    problems = check(ROOT)
    for line in problems:
        print(line)
    print(f"check_imports: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
