"""Real serving traces in the simulator: Mooncake JSONL and Azure 2023 CSV, read from
excerpts of the public files (tests/fixtures/traces), replayed at their timestamps and
rescaled; bad files refused with the line that is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ukv import models
from ukv.cli import main
from ukv.errors import ArgumentError
from ukv.sim import engine, traces
from ukv.sim.backends import UnifiedBackend

HERE = Path(__file__).parent / "fixtures" / "traces"
MOONCAKE = HERE / "mooncake_conversation_head.jsonl"  # 10 requests at 0 ms, 6 at 3000 ms
AZURE = HERE / "azure_conv_head.csv"  # 40 requests, 18:15:46.68059 to 18:16:10.826886


def test_mooncake_timestamps_are_milliseconds_from_the_first():
    t = traces.load(MOONCAKE)
    assert len(t) == 16 and t.name == "mooncake_conversation_head"
    assert t.arrival.tolist() == [0.0] * 10 + [3.0] * 6
    assert t.prompt_len[:3].tolist() == [6758, 7322, 7236]
    assert t.output_len[:3].tolist() == [500, 490, 794] and t.prompt_len.max() == 87169
    assert t.origin.startswith("mooncake jsonl") and "16 requests over 3.0 s" in t.origin


def test_azure_wall_clock_becomes_seconds_from_the_first():
    t = traces.load(AZURE)
    assert len(t) == 40 and t.arrival[0] == 0.0 and np.all(np.diff(t.arrival) >= 0)
    # 18:15:50.9951690 - 18:15:46.6805900, and the span to 18:16:10.8268860.
    assert t.arrival[1] == pytest.approx(4.314579, abs=1e-6)
    assert t.arrival[-1] == pytest.approx(24.146296, abs=1e-6)
    assert t.prompt_len[:3].tolist() == [374, 396, 879] and t.output_len[:3].tolist() == [
        44,
        109,
        55,
    ]
    assert t.origin.startswith("azure csv")


def test_load_tells_the_ukv_format_apart(tmp_path):
    p = tmp_path / "mine.jsonl"
    traces.load(MOONCAKE).to_jsonl(p)
    t = traces.load(p)
    assert t.arrival.tolist() == [0.0] * 10 + [3.0] * 6 and t.origin.startswith("ukv jsonl")


def test_rescale_by_factor_or_to_a_rate():
    t = traces.load(MOONCAKE)  # 15 gaps over 3 s: 5 requests/s
    assert traces.rescale(t, rate_scale=2.0).arrival[-1] == 1.5
    fast = traces.rescale(t, rate=10.0)
    assert fast.arrival[-1] == pytest.approx(1.5) and "to 10 req/s" in fast.origin
    assert traces.rescale(t) is t
    with pytest.raises(ArgumentError, match="not both"):
        traces.rescale(t, rate_scale=2.0, rate=10.0)
    for bad in (0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(ArgumentError, match="rate_scale"):
            traces.rescale(t, rate_scale=bad)
    at_once = traces.Trace("x", np.zeros(3), np.ones(3, np.int64), np.ones(3, np.int64))
    with pytest.raises(ArgumentError, match="no duration"):
        traces.rescale(at_once, rate=5.0)


def test_make_keeps_the_first_requests_of_a_file():
    t = traces.make(str(AZURE), 5)
    assert len(t) == 5 and "first 5 requests" in t.origin
    assert len(traces.make(str(AZURE))) == 40 and len(traces.make(str(AZURE), 400)) == 40
    with pytest.raises(ArgumentError, match="positive int"):
        traces.make(str(AZURE), 0)


def test_bad_files_name_the_line(tmp_path):
    m = tmp_path / "m.jsonl"
    m.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n'
                 '{"timestamp": 10, "input_length": 5}\n')  # fmt: skip
    with pytest.raises(ArgumentError, match="line 2 .*no key 'output_length'"):
        traces.load(m)
    m.write_text('{"timestamp": 0, "input_length": 0, "output_length": 2}\n')
    with pytest.raises(ArgumentError, match="line 1"):
        traces.load(m)
    m.write_text('{"time": 0}\n')
    with pytest.raises(ArgumentError, match="expected ukv"):
        traces.load(m)
    a = tmp_path / "a.csv"
    a.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,3,4\nyesterday,3,4\n"
    )
    with pytest.raises(ArgumentError, match="line 3"):
        traces.load(a)
    a.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,3,0\n")
    with pytest.raises(ArgumentError, match="line 2 .*positive"):
        traces.load(a)
    a.write_text("TIMESTAMP,Tokens\n2023-11-16 18:15:46.1,3\n")
    with pytest.raises(ArgumentError, match="no column ContextTokens, GeneratedTokens"):
        traces.load(a)


def test_replay_admits_nothing_before_it_arrives():
    t = traces.load(MOONCAKE)
    run = engine.simulate(t, UnifiedBackend(models.load("Jamba-1.5-Mini"), 8 << 30, 16, 100_000))
    assert run.rejected == 0 and np.isfinite(run.finished_at).all()
    assert np.all(run.admitted_at >= t.arrival) and run.admitted_at[10:].min() >= 3.0


def test_cli_replays_a_file_at_a_scaled_rate(tmp_path, capsys):
    js = tmp_path / "s.json"
    argv = ["simulate", "--clock", "fixed", "--grid", "coarse", "--layouts", "ukv,sglang-default",
            "--model", "Jamba-1.5-Mini", "--memory", "4GiB", "--trace", str(AZURE),
            "--rate-scale", "4", "--json", str(js), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    s = json.loads(js.read_text())
    assert s["requests"] == 40 and s["trace"] == "azure_conv_head"
    assert "azure csv" in s["trace_origin"] and "x4" in s["trace_origin"]
    assert s["layouts"]["ukv"]["completed"] == 40
    capsys.readouterr()
    assert main(argv[:-5] + ["--rate-scale", "0"]) == 2
    assert "bad --rate-scale '0'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(argv + ["--rate", "5"])  # --rate-scale and --rate together: a usage error
