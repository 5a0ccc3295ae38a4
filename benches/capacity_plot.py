"""Draw one cell of a capacity study: the ukv pool's two sides over time against the fixed
boundaries of SGLang's splits, and the requests each layout holds (``ukv.sim.plot``).

    PYTHONPATH=python python3 benches/capacity_plot.py benches/results/capacity-measured.json \
        --model Qwen3-Next-80B-A3B --trace mooncake --seed 0

Re-serves the cell's trace (same window or generator seed, same arrival rate, same clock as
the study recorded) on ukv, SGLang's default split, SGLang's split tuned on another
workload and the oracle's split (at the shares the study found), SGLang's unified pool and
vLLM, and writes ``capacity-<model>-<trace>.png`` beside the JSON (``--out`` to change).
The served rates it prints must equal the study's for that cell (the runs are
deterministic); it says so, or stops.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if importlib.util.find_spec("ukv") is None:
    # A source checkout without ukv installed: its package. (Never in front of an installed
    # ukv: tests import this file, and processes they spawn inherit sys.path.)
    sys.path.insert(0, str(ROOT / "python"))

from ukv import models  # noqa: E402
from ukv.cli import parse_bytes  # noqa: E402
from ukv.sim import baselines, clock, plot  # noqa: E402


def _capacity():
    spec = importlib.util.spec_from_file_location("capacity", ROOT / "benches" / "capacity.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["capacity"] = mod
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("json", help="a capacity-<clock>.json the study wrote")
    p.add_argument("--model", required=True)
    p.add_argument("--trace", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--section", default="main")
    p.add_argument("--clock-json", help="the measured constants (default: the committed file)")
    p.add_argument("--out", help="the PNG (default capacity-<model>-<trace>.png beside the JSON)")
    a = p.parse_args(argv)
    cap = _capacity()
    src = Path(a.json)
    data = json.loads(src.read_text())
    meta = data["meta"]
    cell = next(
        (c for c in data["cells"] if c["section"] == a.section and c["model"] == a.model
         and c["trace"] == a.trace and c["seed"] == a.seed),
        None,
    )  # fmt: skip
    if cell is None:
        print(f"capacity_plot.py: no {a.section} cell {a.model} / {a.trace} / seed {a.seed} "
              f"in {src.name}", file=sys.stderr)  # fmt: skip
        return 2
    specs = meta["traces"]
    shape = models.load(a.model)
    trace = cap._fit_context(cap.make_trace(a.trace, specs[a.trace], a.seed, cell["arrivals"]),
                             shape)  # fmt: skip
    kind = meta["clock"]["name"]
    lays = cell["layouts"]
    want = tuple(x for x in ("ukv", "ukv-vllm", "sglang-default", "sglang-unified", "vllm")
                 if x in lays)  # fmt: skip
    clk = lambda sh: clock.make_clock(kind, sh, a.clock_json)  # noqa: E731
    total = parse_bytes(cell["memory"])
    cmp = baselines.compare(shape, total, trace, clock=clk, layouts=want + ("sglang-tuned",),
                            tuned_share=lays.get("sglang-tuned", {}).get("share"))  # fmt: skip
    share = lays.get("oracle", {}).get("share")
    if isinstance(share, float):  # the oracle's split at the share the study's search found
        o = baselines.compare(shape, total, trace, clock=clk, layouts=("sglang-tuned",),
                              tuned_share=share)  # fmt: skip
        cmp.runs["oracle"] = o.runs["sglang-tuned"]
        cmp.summaries["oracle"] = {**o.summaries["sglang-tuned"], "share": share,
                                   "label": baselines.LABELS["oracle"]}  # fmt: skip
    # The same runs as the study's: the served rates must match (same trace, same clock).
    for k, v in cmp.summaries.items():
        ref = lays.get(k, {}).get("served_tok_s")
        if ref is not None and abs(v["served_tok_s"] - ref) > 1e-6 * ref:
            print(f"capacity_plot.py: {k} served {v['served_tok_s']} here, {ref} in the study",
                  file=sys.stderr)  # fmt: skip
            return 1
    title = (f"{a.model}, {a.trace} (seed {a.seed}), {cell['memory']} per GPU, "
             f"{kind} clock, prefix caching on")  # fmt: skip
    out = Path(a.out) if a.out else src.parent / f"capacity-{a.model}-{a.trace}.png"
    plot.save(cmp, out, title)
    for k, v in cmp.summaries.items():
        print(f"{k:<16} {v['served_tok_s']:>10,.0f} tok/s  hit {v['token_hit_rate']:.1%}  "
              f"peak {v['peak_running']}")  # fmt: skip
    print(f"wrote {out.name} (served rates equal the study's for this cell)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
