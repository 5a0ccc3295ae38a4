"""ukv plan / simulate as a script sees them (issue 21): JSON output, dtypes named in every
output, memory spellings, the models every family brings (single-kind ones included), and
bad input ending in one line on stderr with exit status 2, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ukv
from ukv.cli import main, parse_bytes

FIXTURES = Path(__file__).parent / "fixtures" / "configs"
# A child process imports the same ukv this process does: the installed wheel in CI (the source
# tree there has no built _core), or python/ with a copied-in _core during development.
CHILD_ENV = {**os.environ, "PYTHONPATH": str(Path(ukv.__file__).resolve().parents[1])}


def run_json(argv: list[str], capsys: Any) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("40GiB", 40 << 30),
        ("40Gi", 40 << 30),
        ("40 gib", 40 << 30),
        ("40GB", 40 * 10**9),
        ("40G", 40 * 10**9),
        ("4e10", 4 * 10**10),
        ("4E+10", 4 * 10**10),
        ("512Mi", 512 << 20),
        ("1.5TiB", 3 << 39),
        ("1024", 1024),
    ],
)
def test_memory_spellings(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


def test_plan_json_names_dtypes_and_follows_chunking(capsys: Any) -> None:
    # Issue 21: Gemma-3-27B at 128K held "0 requests" with unchunked prefill; simulate's
    # 8K chunks hold 3 (the SWA side only ever holds a window plus one chunk).
    data = run_json(["plan", "--model", "Gemma-3-27B", "--memory", "40GiB"], capsys)
    assert data["max_context"] == 131072 == data["max_position_embeddings"]
    from ukv.sim.engine import CHUNK

    assert data["chunk"] == CHUNK == 8192  # plan's default chunk is the simulator's
    assert data["rows"][-1]["length"] == 131072 and data["rows"][-1]["unified"] == 3
    assert data["dtypes"] == {
        "engine": "sglang",
        "kv": "bfloat16",
        "conv": "-",
        "state": "-",
        "state_source": "no state layers",
    }
    # Unchunked (one chunk as long as the request) needs the whole request on the SWA side:
    # the factory's boot check refuses a pool that cannot take one such request.
    argv = ["plan", "--model", "Gemma-3-27B", "--memory", "40GiB", "--chunk", "131072"]
    assert main([*argv, "--json"]) == 2
    assert "with its window and one extend" in capsys.readouterr().err


def test_plan_engine_dtypes(capsys: Any) -> None:
    base = ["plan", "--model", "Qwen3-Next-80B-A3B", "--memory", "8GiB", "--max-context", "8192"]
    sglang = run_json(base, capsys)
    vllm = run_json([*base, "--engine", "vllm"], capsys)
    assert sglang["dtypes"]["state"] == "float32" and vllm["dtypes"]["state"] == "bfloat16"
    assert (
        sglang["state_bytes_by_engine"]
        == vllm["state_bytes_by_engine"]
        == {
            "sglang": sglang["state_bytes_per_request"],
            "vllm": vllm["state_bytes_per_request"],
        }
    )
    # 36 GDN layers: conv 8192 x 3 bf16, temporal 32 x 128 x 128 in fp32 or bf16
    assert sglang["state_bytes_per_request"] == 36 * (8192 * 3 * 2 + 32 * 128 * 128 * 4)
    assert vllm["state_bytes_per_request"] == 36 * (8192 * 3 * 2 + 32 * 128 * 128 * 2)
    told = run_json(
        [*base, "--engine", "vllm", "--state-dtype", "fp32", "--kv-dtype", "fp8"], capsys
    )
    assert told["state_bytes_per_request"] == sglang["state_bytes_per_request"]
    assert told["kv_bytes_per_token"] == 12 * 2 * 2 * 256
    assert told["dtypes"]["kv"] == "float8_e4m3fn"


def test_fp32_checkpoint_served_bf16_unless_told(capsys: Any) -> None:
    base = ["plan", "--model", str(FIXTURES / "Gemma-2-9B"), "--memory", "8GiB"]
    served = run_json(base, capsys)
    told = run_json([*base, "--dtype", "fp32"], capsys)
    assert served["dtypes"]["kv"] == "bfloat16" and told["dtypes"]["kv"] == "float32"
    assert told["kv_bytes_per_token"] == 2 * served["kv_bytes_per_token"] == 2 * 172032


def test_plan_text_names_dtypes_for_a_single_kind_model(capsys: Any) -> None:
    argv = ["plan", "--model", str(FIXTURES / "Llama-3.1-8B"), "--memory", "8GiB",
            "--max-context", "32768"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "dtypes: engine sglang: kv bfloat16" in out
    assert "one kind of cache (full)" in out and "single-pool" in out
    # 8 GiB / (131,072 B/token) = 65,536 tokens: 64 requests of 1K, 2 of 32K
    data = run_json(argv, capsys)
    rows = {r["length"]: r["single-pool"] for r in data["rows"]}
    assert rows == {1024: 64, 8192: 8, 32768: 2}


@pytest.mark.parametrize(
    "model,kv,state",
    [
        # Issue 30: two published configs `ukv plan` refused. The bytes are worked out by
        # hand in tests/test_models_families.py, with where each value comes from.
        ("Zamba2-1.2B", 98_304, {"sglang": 80_684_032, "vllm": 40_838_144}),
        ("tiny-NemotronHForCausalLM", 1_024, {"sglang": 2_432, "vllm": 2_432}),
    ],
)
def test_plan_published_configs_once_refused(
    model: str, kv: int, state: dict[str, int], capsys: Any
) -> None:
    data = run_json(["plan", "--model", str(FIXTURES / model), "--memory", "4GiB"], capsys)
    assert data["kind"] == "mamba" and data["max_context"] == 4096
    assert data["kv_bytes_per_token"] == kv
    assert data["state_bytes_per_request"] == state["sglang"]
    assert data["state_bytes_by_engine"] == state
    assert all(row["unified"] > 0 for row in data["rows"])


@pytest.mark.parametrize("model", ["Kimi-Linear-48B-A3B", "MiniMax-Text-01", "Mamba-Codestral-7B"])
def test_simulate_json_on_new_families(model: str, capsys: Any) -> None:
    # --clock fixed: the measured clock has compute profiles for the presets only.
    argv = ["simulate", "--model", str(FIXTURES / model), "--memory", "8GiB", "--trace", "chat",
            "--requests", "8", "--no-progress", "--engine", "vllm",
            "--clock", "fixed"]  # fmt: skip
    data = run_json(argv, capsys)
    assert data["dtypes"]["engine"] == "vllm"
    assert data["layouts"]["ukv"]["completed"] == 8
    assert capsys.readouterr().err == ""  # no progress bar when stderr is not a terminal


def test_simulate_drops_requests_beyond_max_position_embeddings(capsys: Any) -> None:
    argv = ["simulate", "--model", str(FIXTURES / "Zamba2-2.7B"), "--memory", "8GiB",
            "--trace", "chat", "--requests", "11", "--no-progress", "--clock", "fixed"]  # fmt: skip
    data = run_json(argv, capsys)
    assert data["dropped_over_max_context"] > 0  # Zamba2 serves 4096 tokens at most
    assert data["requests"] == 11 - data["dropped_over_max_context"]


def test_plan_plot(tmp_path: Path, capsys: Any) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "plan.png"
    argv = ["plan", "--model", "Jamba-1.5-Mini", "--memory", "4GiB", "--max-context", "32768",
            "--plot", str(png)]  # fmt: skip
    assert main(argv) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_import_ukv_stays_light() -> None:
    code = "import sys, ukv, ukv.cli; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=CHILD_ENV, check=True)  # fmt: skip
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["plan", "--model", "Jamba-1.5-Mini", "--memory", "8GiB", "--page-size", "0"],
         "bad --page-size '0'"),
        (["plan", "--model", "Jamba-1.5-Mini", "--memory", "8GiB", "--tp", "two"], "bad --tp 'two'"),
        (["plan", "--model", "Jamba-1.5-Mini", "--memory", "8GiB", "--chunk", "-1"], "bad --chunk"),
        (["plan", "--model", "Gemma-3-27B", "--memory", "40GiB", "--max-context", "262144"],
         "max_position_embeddings is 131072"),
        (["plan", "--model", "Gemma-3-27B", "--memory", "40GiB", "--tp", "6"],
         "does not divide num_attention_heads"),
        (["plan", "--model", "Gemma-3-27B", "--memory", "40GiB", "--engine", "trt"],
         "bad engine 'trt'"),
        (["plan", "--model", "Gemma-3-27B", "--memory", "40GiB", "--kv-dtype", "int4"],
         "bad --kv-dtype 'int4'"),
        (["plan", "--model", "Gemma-3-27B", "--memory", "40GiB", "--state-dtype", "fp32"],
         "has no state"),
        (["plan", "--model", "Gemma-3-27B", "--memory", "1GiB"], "shorter --max-context"),
        (["plan", "--model", str(FIXTURES / "Llama-3.1-8B"), "--memory", "8GiB"],
         "one request of 131072 tokens does not fit"),
        (["plan", "--model", "someorg/not-cached", "--memory", "1GiB"], "Hugging Face cache"),
        (["simulate", "--model", "Jamba-1.5-Mini", "--memory", "8GiB", "--trace", "chat",
          "--requests", "0"], "bad --requests '0'"),
        (["simulate", "--model", str(FIXTURES / "Llama-3.1-8B"), "--memory", "8GiB", "--trace",
          "chat", "--plot", "x.png"], "one kind of cache"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_exit_2(argv: list[str], needle: str, capsys: Any) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err, err
    assert err.count("\n") == 1, err


@pytest.mark.parametrize(
    "argv",
    [["plan", "--memory", "8GiB"], ["simulate", "--model", "x", "--memory", "1", "--seed", "a"]],
)
def test_usage_errors_are_one_line(argv: list[str], capsys: Any) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err and "usage" not in err, err


def test_closed_pipe_is_one_line_exit_2() -> None:
    # ``ukv plan ... | head``: the reader is gone when ukv writes. Closing the read end
    # before the child starts makes that certain (no race with the pipe's buffer).
    cmd = [sys.executable, "-m", "ukv", "plan", "--model", "Jamba-1.5-Mini", "--memory", "2GiB",
           "--max-context", "8192"]  # fmt: skip
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            cmd, stdout=write_end, stderr=subprocess.PIPE, env=CHILD_ENV, timeout=120
        )
    finally:
        os.close(write_end)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    assert err.strip() == "ukv plan: error: output closed early (broken pipe)"
