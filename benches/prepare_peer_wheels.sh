#!/usr/bin/env bash
# Prepare the SGLang peer for a GPU machine without registry access (BENCHMARKS.md, "Running
# the SGLang peer on the GPU machine"). Run HERE, from anywhere in the repository:
#
#   bash benches/prepare_peer_wheels.sh [--python-version 3.12] [--dest .gpu/peer]
#
# It downloads, without dependency resolution, the manylinux x86_64 wheels the allocator's
# import path needs on top of torch + triton (sglang's own pins would replace torch), and
# writes DEST/install.sh, which installs them there:
#
#   bash .gpu/peer/install.sh <target-dir> [--all]     # then PYTHONPATH=<target-dir>:...
#
# DEST/core/     always installed: sglang 0.5.23 (repacked without its Rust extensions and
#                its diffusion server, neither on the allocator's import path) and what the
#                earlier GPU run found missing there.
# DEST/fallback/ the rest of the import path, each installed only where the target's python
#                cannot find its module (or all of them with --all, or when the import check
#                at the end fails without them). pillow and torchvision are not carried
#                (14 MB; the earlier GPU run found both installed).
# Versions: those of benches/requirements-peer.txt where it names the package, else the pins
# below (pydantic-core: the one pydantic's own metadata pins). The total must stay well under
# the 64 MiB carry limit, which the ukv wheel shares.
set -euo pipefail

pyver=3.12
dest=.gpu/peer
budget_mib=55
while [ $# -gt 0 ]; do
  case $1 in
    --python-version) pyver=$2; shift 2 ;;
    --dest) dest=$2; shift 2 ;;
    *) echo "usage: $0 [--python-version X.Y] [--dest DIR]" >&2; exit 2 ;;
  esac
done
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
reqs=$repo/benches/requirements-peer.txt
PIP=${PIP:-python3 -m pip}

# Packages requirements-peer.txt does not name (the CPU machine has them already).
declare -A EXTRA_PINS=(
  [orjson]=3.13.0 [pydantic]=2.13.4 [typing_inspection]=0.4.2 [annotated_types]=0.7.0
  [ipython]=9.18.1 [traitlets]=5.16.1 [pygments]=2.20.0 [requests]=2.34.2 [urllib3]=2.7.0
  [idna]=3.13 [charset_normalizer]=3.4.7 [certifi]=2026.5.20 [packaging]=26.4
  [sniffio]=1.3.1 [regex]=2026.5.9 [pyyaml]=6.0.3 [attrs]=26.1.0
)
CORE=(
  sglang pybase64 starlette msgspec pyzmq dill apache-tvm-ffi compressed-tensors gguf loguru
  transformers orjson pydantic typing_inspection annotated_types ipython traitlets
)
# distribution:import name
FALLBACK=(
  psutil:psutil requests:requests urllib3:urllib3 idna:idna
  charset_normalizer:charset_normalizer certifi:certifi packaging:packaging anyio:anyio
  sniffio:sniffio tqdm:tqdm pygments:pygments aiohttp:aiohttp multidict:multidict yarl:yarl
  propcache:propcache frozenlist:frozenlist aiohappyeyeballs:aiohappyeyeballs
  aiosignal:aiosignal attrs:attr regex:regex huggingface_hub:huggingface_hub httpx:httpx
  httpcore:httpcore h11:h11 tokenizers:tokenizers safetensors:safetensors pyyaml:yaml
  sentencepiece:sentencepiece
)

pin() {  # the "name==version" to download for distribution $1
  local line
  line=$(grep -i -E "^$1==[^ #]+" "$reqs" | head -1 | awk '{print $1}' || true)
  if [ -z "$line" ] && [ "$1" = sglang ]; then
    line="sglang==$(sed -n 's/^SGLANG_VERSION = "\(.*\)"/\1/p' "$repo/benches/peer_sglang.py")"
  fi
  if [ -z "$line" ] && [ -n "${EXTRA_PINS[$1]:-}" ]; then line="$1==${EXTRA_PINS[$1]}"; fi
  [ -n "$line" ] || { echo "no pinned version for $1" >&2; exit 1; }
  echo "$line"
}

download() {  # download DIR PIN...: cp$pyver manylinux x86_64 wheels, no dependencies
  local dir=$1; shift
  $PIP download -q --no-deps --only-binary=:all: --python-version "$pyver" \
    --implementation cp --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dir" "$@"
}

if [ -e "$dest" ] && [ ! -f "$dest/MANIFEST.txt" ] && [ -n "$(ls -A "$dest")" ]; then
  echo "$dest exists and is not an earlier output of this script: not replacing it" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest/core" "$dest/fallback"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

core_pins=()
for d in "${CORE[@]}"; do core_pins+=("$(pin "$d")"); done
download "$tmp" "${core_pins[@]}"
# pydantic pins its core exactly: take that pin from the wheel just downloaded.
pyd_core=$(python3 - "$tmp"/pydantic-*.whl <<'EOF'
import re, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
m = re.search(r"^Requires-Dist: pydantic-core==([^\s;]+)", z.read(meta).decode(), re.M)
print(f"pydantic-core=={m.group(1)}")
EOF
)
download "$tmp" "$pyd_core"

# sglang: drop what the allocator never imports (41 MB of Rust extensions; the diffusion
# server) and the RECORD lines naming it, so pip installs the rest as an ordinary wheel.
sg=$(ls "$tmp"/sglang-*.whl)
python3 - "$sg" "$dest/core/$(basename "$sg")" <<'EOF'
import re, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
drop = re.compile(r"^sglang/(srt/rust_extensions/_[^/]*\.so|multimodal_gen/.*)$")
dropped = 0
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
    for info in zin.infolist():
        if drop.match(info.filename):
            dropped += info.file_size
            continue
        data = zin.read(info)
        if info.filename.endswith(".dist-info/RECORD"):
            kept = [l for l in data.decode().splitlines() if not drop.match(l.split(",", 1)[0])]
            data = ("\n".join(kept) + "\n").encode()
        zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
print(f"sglang repacked: {dropped / 2**20:.1f} MiB of unused files dropped")
EOF
rm "$sg"
mv "$tmp"/*.whl "$dest/core/"

fb_pins=()
for e in "${FALLBACK[@]}"; do fb_pins+=("$(pin "${e%%:*}")"); done
download "$dest/fallback" "${fb_pins[@]}"
: > "$dest/fallback.txt"
for e in "${FALLBACK[@]}"; do
  d=${e%%:*}; mod=${e##*:}
  norm=$(echo "$d" | tr '-' '_')
  whl=$(cd "$dest/fallback" && ls | grep -i -E "^${norm}-[0-9]" | head -1)
  [ -n "$whl" ] || { echo "no wheel downloaded for $d" >&2; exit 1; }
  echo "$whl $mod" >> "$dest/fallback.txt"
done

cat > "$dest/install.sh" <<'EOF'
#!/usr/bin/env bash
# Install the SGLang peer for benches/ from the wheels beside this script, without
# dependency resolution and without touching the python's own site-packages:
#   bash .gpu/peer/install.sh <target-dir> [--all]
# then run with PYTHONPATH=<target-dir>:$PYTHONPATH. core/ is always installed; a wheel of
# fallback/ only where its module is missing (all of them with --all, or after a failed
# import check). Environment: PYTHON (default python3), PIP (default "$PYTHON -m pip").
set -euo pipefail
target=${1:?usage: install.sh <target-dir> [--all]}
all=${2:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${PYTHON:-python3}
PIP=${PIP:-$PY -m pip}
mkdir -p "$target"
target=$(cd "$target" && pwd)
export PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}"
inst() {  # pip install into the target; its two expected warnings are not shown
  local log rc=0
  log=$($PIP install -q --no-deps --no-compile --disable-pip-version-check --target "$target" "$@" 2>&1) || rc=$?
  echo "$log" | grep -v -E "^(WARNING: (Running pip as|Target directory)|$)" || true
  return $rc
}
fallbacks() {  # the fallback wheels whose module is missing (all with --all)
  $PY - "$here/fallback.txt" "$1" <<'PYEOF'
import importlib.util, sys
for line in open(sys.argv[1]):
    wheel, module = line.split()
    if sys.argv[2] == "--all" or importlib.util.find_spec(module) is None:
        print(wheel)
PYEOF
}
check() {  # import SGLang's allocator path as the bench will (sgl_kernel stand-in on CUDA)
  local peer=$here/../../benches/peer_sglang.py
  if [ -f "$peer" ]; then $PY "$peer" --device cuda; else echo "no $peer: import not checked"; fi
}
start=$SECONDS
inst "$here"/core/*.whl
missing=$(fallbacks "$all")
if [ -n "$missing" ]; then
  echo "fallbacks installed: $(echo "$missing" | sed 's/-[0-9].*//' | tr '\n' ' ')"
  (cd "$here/fallback" && inst $missing)
else
  echo "fallbacks: none needed"
fi
if ! check && [ "$all" != --all ]; then
  echo "import check failed: installing every fallback and checking again"
  (cd "$here/fallback" && inst $(fallbacks --all))
  check
fi
echo "peer installed into $target in $((SECONDS - start)) s"
EOF
chmod +x "$dest/install.sh"

( cd "$dest" && find core fallback -name '*.whl' -printf '%s %p\n' | sort -k2 ) > "$dest/MANIFEST.txt"
{
  echo "# made by benches/prepare_peer_wheels.sh --python-version $pyver on $(date -u +%FT%TZ)"
  echo "# bytes path"
} | cat - "$dest/MANIFEST.txt" > "$tmp/m" && mv "$tmp/m" "$dest/MANIFEST.txt"
total=$(du -sb "$dest" | cut -f1)
printf 'core %.1f MiB, fallback %.1f MiB, total %.1f MiB in %s (budget %d MiB)\n' \
  "$(du -sb "$dest/core" | awk '{print $1 / 1048576}')" \
  "$(du -sb "$dest/fallback" | awk '{print $1 / 1048576}')" \
  "$(echo "$total" | awk '{print $1 / 1048576}')" "$dest" "$budget_mib"
if [ "$total" -gt $((budget_mib * 1048576)) ]; then
  echo "over budget: the ukv wheel must fit in the same 64 MiB carry" >&2
  exit 1
fi
