#!/usr/bin/env bash
# The core's criterion benches (rust/ukv-core/benches/arena.rs) at an earlier commit and in
# the working tree, run alternately in one session on this machine:
#
#   bash benches/regress_core.sh OLD_COMMIT [--rounds 6] [--filter REGEX] [--time 2]
#
# Both bench binaries are built from the working tree's bench source (the old commit's
# core under the new bench, so both time the same code paths), then run in turn, old/new
# then new/old, ROUNDS times, each run timing every bench matching REGEX (criterion ids,
# e.g. 'alloc2_relocating_free|batch_4096_pages/eager_ps1$') for TIME seconds after a 1 s
# warm-up. The default, '^cpu_', is every bench on the thread's CPU time: on a shared box
# time slices lost to other jobs swing wall-clock medians 2-4x, CPU time far less. Prints a markdown table: per
# bench the median over rounds of criterion's median for old and new, and the per-round
# ratio new/old as median (min-max). Raw lines go to target/regress-core/runs.txt.
set -euo pipefail

usage() { echo "usage: $0 OLD_COMMIT [--rounds N] [--filter REGEX] [--time SECONDS]" >&2; exit 2; }
rounds=6
filter='^cpu_'
secs=2
old=""
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=${2:?}; shift 2 ;;
    --filter) filter=${2:?}; shift 2 ;;
    --time) secs=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    *) [ -z "$old" ] || usage; old=$1; shift ;;
  esac
done
[ -n "$old" ] || usage

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
out=$repo/target/regress-core
src=$out/old-src
rm -rf "$src"
mkdir -p "$src"
git archive "$old" Cargo.toml Cargo.lock rust | tar -x -C "$src"
cp rust/ukv-core/benches/arena.rs "$src/rust/ukv-core/benches/arena.rs"

bench_bin() {  # bench_bin DIR TARGET: build the arena bench there, print its path
  (cd "$1" && CARGO_TARGET_DIR=$2 cargo bench -p ukv-core --no-run --message-format=json 2>/dev/null) |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "arena" and m.get("executable"):
        print(m["executable"])'
}
echo "building the benches: old = $(git log -1 --format='%h %s' "$old"), new = the working tree" >&2
old_bin=$(bench_bin "$src" "$out/old-target")
new_bin=$(bench_bin "$repo" "$repo/target")
[ -n "$old_bin" ] && [ -n "$new_bin" ] || { echo "a bench build failed" >&2; exit 1; }

runs=$out/runs.txt
: > "$runs"
for r in $(seq "$rounds"); do
  if (( r % 2 )); then order="old new"; else order="new old"; fi
  for side in $order; do
    bin=$old_bin; [ "$side" = new ] && bin=$new_bin
    echo "round $r/$rounds: $side" >&2
    "$bin" --bench "$filter" --warm-up-time 1 --measurement-time "$secs" --noplot 2>/dev/null |
      awk -v side="$side" -v r="$r" '
        $1 == "time:" || $2 == "time:" {
          match($0, /\[[^]]*\]/); split(substr($0, RSTART + 1, RLENGTH - 2), f, " ")
          id = ($1 == "time:") ? last : $1
          if (id != "change:") print side, r, id, f[3], f[4]  # skip the change block
          next }
        NF == 1 { last = $1 }' >> "$runs"
  done
done

python3 - "$runs" "$old" "$(git log -1 --format=%h "$old")" "$(git rev-parse --short HEAD)" <<'EOF'
import statistics as st, sys
unit = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}
runs, old, old_h, head = sys.argv[1:]
data = {}
for line in open(runs):
    side, r, bench, value, u = line.split()
    data.setdefault(bench, {}).setdefault(side, {})[int(r)] = float(value) * unit[u]
def fmt(ns):
    return f"{ns / 1e3:.2f} µs" if ns >= 1e3 else f"{ns:.1f} ns"
print(f"\n| bench | old ({old_h}) | new ({head} + working tree) | new/old per round: median (min-max) |")
print("|---|---|---|---|")
for bench, d in data.items():
    rounds = sorted(set(d.get("old", {})) & set(d.get("new", {})))
    if not rounds:
        continue
    o = [d["old"][r] for r in rounds]
    n = [d["new"][r] for r in rounds]
    q = [b / a for a, b in zip(o, n)]
    print(f"| `{bench}` | {fmt(st.median(o))} | {fmt(st.median(n))} | "
          f"{st.median(q):.3f} ({min(q):.3f}-{max(q):.3f}) |")
EOF
