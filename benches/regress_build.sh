#!/usr/bin/env bash
# Build the two wheels of a regression comparison, HERE (the machine with Rust):
#
#   bash benches/regress_build.sh OLD_COMMIT [NEW_COMMIT] [--dest .gpu/regress]
#
# OLD_COMMIT (and NEW_COMMIT when given) are built from `git archive` of that commit; without
# NEW_COMMIT the new wheel is the current working tree, uncommitted changes included (the
# manifest says so and records `git diff HEAD`'s hash). Each wheel is the abi3 wheel
# `maturin build --release` makes, Python package and native module together, so the
# comparison covers the pool, allocator, runtime and executors as well as the core.
#
# Writes DEST/old/<wheel>, DEST/new/<wheel> and DEST/manifest.json (both commits, their
# subjects, the wheels' names and sha256, rustc and maturin versions, the date).
# benches/regress_run.py reads that folder, HERE (--device cpu, a smoke run) or on the GPU
# machine (carry DEST; no Rust and no network needed there). Build caches live in
# target/regress-old and target/ (ignored); DEST holds only the wheels (a few MiB).
set -euo pipefail

usage() { echo "usage: $0 OLD_COMMIT [NEW_COMMIT] [--dest DIR]" >&2; exit 2; }
dest=.gpu/regress
commits=()
while [ $# -gt 0 ]; do
  case $1 in
    --dest) dest=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    *) commits+=("$1"); shift ;;
  esac
done
[ ${#commits[@]} -ge 1 ] && [ ${#commits[@]} -le 2 ] || usage

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
work=$(mktemp -d /tmp/ukv-regress.XXXXXX)
trap 'rm -rf "$work"' EXIT

# build SIDE REV: the wheel of commit REV (or of the working tree when REV is empty) into
# DEST/SIDE/, replacing what was there.
build() {
  local side=$1 rev=$2 src target
  if [ -n "$rev" ]; then
    src=$work/$side
    mkdir -p "$src"
    git archive "$rev" | tar -x -C "$src"
    target=$repo/target/regress-$side  # its own cache: the tree differs from the working one
  else
    src=$repo
    target=$repo/target  # the working tree's own cache: an incremental build
  fi
  rm -rf "${dest:?}/$side"
  mkdir -p "$dest/$side"
  echo "== building the $side wheel from ${rev:-the working tree} (cargo target $target)"
  (cd "$src" && CARGO_TARGET_DIR=$target maturin build --release --out "$dest/$side" 2>&1 | tail -3)
  local n
  n=$(find "$dest/$side" -name '*.whl' | wc -l)
  [ "$n" -eq 1 ] || { echo "expected one wheel in $dest/$side, found $n" >&2; exit 1; }
}

describe() {  # a commit as "sha subject" for the manifest
  git log -1 --format='%h %s' "$1"
}

old=$(git rev-parse --verify "${commits[0]}^{commit}")
new=""
if [ ${#commits[@]} -eq 2 ]; then
  new=$(git rev-parse --verify "${commits[1]}^{commit}")
fi
build old "$old"
build new "$new"

if [ -n "$new" ]; then
  new_desc=$(describe "$new")
  dirty=false
  diff_hash=""
else
  new_desc="$(describe HEAD) + working tree"
  if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
    dirty=true
    diff_hash=$(git diff HEAD | sha256sum | cut -c1-16)
  else
    dirty=false
    diff_hash=""
  fi
fi

python3 - "$dest" "$old" "$(describe "$old")" "${new:-$(git rev-parse HEAD)}" "$new_desc" \
  "$dirty" "$diff_hash" "$(rustc --version)" "$(maturin --version)" <<'EOF'
import datetime, hashlib, json, pathlib, sys
dest, old, old_desc, new, new_desc, dirty, diff_hash, rustc, maturin = sys.argv[1:]
def wheel(side):
    w = next(pathlib.Path(dest, side).glob("*.whl"))
    return {"wheel": f"{side}/{w.name}", "sha256": hashlib.sha256(w.read_bytes()).hexdigest(),
            "bytes": w.stat().st_size}
manifest = {
    "old": {"commit": old, "describe": old_desc, **wheel("old")},
    "new": {"commit": new, "describe": new_desc, "working_tree": new_desc.endswith("working tree"),
            "uncommitted_changes": dirty == "true", "diff_sha256_16": diff_hash or None,
            **wheel("new")},
    "built": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    "rustc": rustc,
    "maturin": maturin,
}
pathlib.Path(dest, "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
print(json.dumps(manifest, indent=1))
EOF
echo "wheels and manifest in $dest ($(du -sh "$dest" | cut -f1)); compare them with:"
echo "  python3 benches/regress_run.py --wheels $dest --device cpu --quick   # here, a smoke run"
echo "  python3 benches/regress_run.py --wheels ${dest#"$repo"/} --out benches/results  # on the GPU"
