"""README's capacity headline table says what the committed study shows: every cell's ratio
is the study's mean (two decimals), "ties" exactly where the study's interval prints a tie,
and a cell without a number exactly where the tuned split rejected requests."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
STUDY = ROOT / "benches" / "results" / "capacity-measured.json"

# README's column names, in its order, and the presets they stand for.
COLUMNS = {
    "Qwen3-Next": "Qwen3-Next-80B-A3B",
    "Nemotron-H 9B": "Nemotron-Nano-9B-v2",
    "Jamba 1.5 Mini": "Jamba-1.5-Mini",
    "Granite 4.0 H": "Granite-4.0-H-Micro",
    "gpt-oss-120b": "gpt-oss-120b",
    "Gemma 3 27B": "Gemma-3-27B",
}


def _claims():
    return load_script("benches/capacity_claims.py")


def _table() -> tuple[list[str], list[tuple[str, list[str]]]]:
    text = README.read_text()
    sec = text[text.index("### Capacity") :]
    lines = [x for x in sec.splitlines() if x.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")][1:]
    rows = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        m = re.match(r"(\w+) \(tuned on (\w+)\)", cells[0])
        if m is None:
            break
        rows.append((m.group(1).lower(), cells[1:]))
    return header, rows


def test_readme_headline_table_matches_the_committed_study():
    verdict = _claims().verdict
    data = json.loads(STUDY.read_text())
    main = {(r["model"], r["trace"]): r for r in data["rows"] if r["section"] == "main"}
    header, rows = _table()
    assert header == list(COLUMNS), header
    assert rows, "no table rows found under README's capacity section"
    for trace, cells in rows:
        assert len(cells) == len(COLUMNS)
        for col, cell in zip(COLUMNS.values(), cells, strict=True):
            c = main[(col, trace)]["ratios"].get("sglang-tuned")
            m = re.match(r"\**(\d+\.\d\d)\**", cell)
            if c is None:
                assert m is None, f"{col} / {trace}: README {cell!r}, the study has no ratio"
                continue
            assert m is not None, f"{col} / {trace}: README {cell!r}, the study {c['mean']:.2f}"
            assert float(m.group(1)) == pytest.approx(round(c["mean"], 2)), (col, trace, cell)
            v = verdict(c)
            assert ("ties" in cell) == (v == "ties"), (col, trace, cell, v)
            assert ("loses" in cell.lower()) == (v == "LOSES"), (col, trace, cell, v)
