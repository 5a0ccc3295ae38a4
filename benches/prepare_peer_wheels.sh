#!/usr/bin/env bash
# Prepare SGLang for a GPU machine without registry access (docs/SGLANG.md, "On the GPU
# machine"). Run HERE, from anywhere in the repository:
#
#   bash benches/prepare_peer_wheels.sh [--sglang 0.5.23|0.5.23-dropin|0.5.16] [--python-version 3.12] [--dest DIR]
#
# It downloads, without dependency resolution, the cp$pyver manylinux x86_64 wheels the
# profile below names (the SGLang version's import path on top of torch + triton: sglang's
# own pins would replace torch), and writes DEST/install.sh, which installs them there:
#
#   bash DEST/install.sh <target-dir> [--all]     # then PYTHONPATH=<target-dir>:...
#
# DEST/core/     always installed: sglang, repacked without what its path never imports, and
#                what the GPU image lacks or holds at a version these wheels refuse.
# DEST/fallback/ packages the image holds; each is installed only where the target's python
#                cannot find its module, or finds a version the core wheels' requirements
#                refuse (fallback.txt keeps those requirements), or all of them with --all or
#                when the import check at the end (DEST/check.sh) fails without them.
# DEST/apart/    wheels install.sh leaves alone (APART): a step that needs one installs it
#                into a folder of its own, so the others run without it.
#
# Profiles:
#   0.5.23 (default, DEST .gpu/peer): SGLang's allocator as benches/bench_cuda_host.py's peer
#          (benches/peer_sglang.py checks the import). Versions: benches/requirements-peer.txt
#          where it names the package, else EXTRA_PINS (pydantic-core: pydantic's own pin).
#   0.5.23-dropin (DEST .gpu/sgl023): SGLang 0.5.23 as the drop-in's SGLang, for
#          benches/gpu_run.sh's `sglang023` part (tests/test_sglang_0523.py, the scheduler
#          driver and tests/test_sglang_scheduler.py, the memory-saver test, the per-step
#          bench). Versions: .ci/sglang-0.5.23.txt, what CI installs (OVERRIDE_PINS where
#          that version has no wheel for this python). Not carried: pillow (on the image).
#          The image's own packages at versions the core wheels accept are fallbacks.
#          Apart: torch-memory-saver (GPU only). CI serves stand-ins for aiohttp,
#          compressed_tensors, einops, gguf, sentencepiece, starlette, torchvision and zmq
#          (tests/sglang_stubs.py); the image's own copies win where it has them.
#   0.5.16 (DEST .gpu/sgl016): the SGLang the drop-in targets, for benches/gpu_run.sh's
#          `sglang` part. Versions: .ci/sglang-0.5.16.txt, what CI installs (OVERRIDE_PINS
#          where that version has no wheel for this python). Not carried: xgrammar (45 MB;
#          tests/sglang_stubs.py serves a stand-in with UKV_SGLANG_STUBS=xgrammar),
#          apache-tvm-ffi (only xgrammar imports it at module level; without it SGLang's JIT
#          store_cache kernel is not built and set_kv_buffer takes its torch path), pillow
#          and hf-xet (11 MB, on the image already). Apart: torch-memory-saver (GPU only).
# Each total must stay under the profile's budget: the 64 MiB a device call carries also
# holds the ukv wheel(s) (~3 MiB each) and, for 0.5.16, SGLang's upstream tests (<1 MiB).
set -euo pipefail

sglang=
pyver=3.12
dest=
while [ $# -gt 0 ]; do
  case $1 in
    --sglang) sglang=$2; shift 2 ;;
    --python-version) pyver=$2; shift 2 ;;
    --dest) dest=$2; shift 2 ;;
    *) echo "usage: $0 [--sglang 0.5.23|0.5.23-dropin|0.5.16] [--python-version X.Y] [--dest DIR]" >&2; exit 2 ;;
  esac
done
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PIP=${PIP:-python3 -m pip}
[ -n "$sglang" ] || sglang=$(sed -n 's/^SGLANG_VERSION = "\(.*\)"/\1/p' "$repo/benches/peer_sglang.py")
version=${sglang%%-*}  # the SGLang release of the profile (0.5.23-dropin: 0.5.23)

# Distribution names are compared normalized (PEP 503: lower case, runs of -_. as one -);
# the maps' keys are written that way.
declare -A OVERRIDE_PINS=() EXTRA_PINS=()
NOT_CARRIED=() APART=()
core_from_reqs() {  # CORE: sglang and every package $reqs pins but NOT_CARRIED and FALLBACK
  local skip name n
  CORE=(sglang)
  skip=" $(printf '%s\n' "${NOT_CARRIED[@]}" "${FALLBACK[@]%%:*}" | tr 'A-Z_.' 'a-z--' | tr '\n' ' ')"
  while read -r name; do
    n=$(echo "$name" | tr 'A-Z_.' 'a-z--')
    [[ "$skip" == *" $n "* ]] || CORE+=("$name")
  done < <(sed -n 's/^\([A-Za-z0-9][A-Za-z0-9_.-]*\)==.*/\1/p' "$reqs")
}
write_stub_check() {  # write_stub_check FILE RELEASE PART MODULE...: check.sh of a drop-in profile
  local file=$1 release=$2 part=$3; shift 3
  cat > "$file" <<'EOF'
#!/usr/bin/env bash
# The import check install.sh ends with: SGLang @RELEASE@'s memory-pool, radix-cache and
# scheduling modules as benches/gpu_run.sh's @PART@ part imports them (CHECKED below):
# tests/sglang_stubs.py's stand-ins, with sgl_kernel and xgrammar added.
# Usage: bash check.sh <target>; PYTHON: the python to check.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ ! -f "$repo/tests/sglang_stubs.py" ]; then echo "no tests/sglang_stubs.py: import not checked"; exit 0; fi
CHECKED="@MODULES@"
UKV_CHECK_MODULES=$CHECKED UKV_SGLANG_PATH=$1 UKV_SGLANG_STUBS=sgl_kernel,xgrammar${UKV_SGLANG_STUBS:+,$UKV_SGLANG_STUBS} \
PYTHONPATH=$repo/tests${PYTHONPATH:+:$PYTHONPATH} ${PYTHON:-python3} - "$1" <<'PYEOF'
import importlib, importlib.metadata as md, os, sys
import sglang_stubs
sglang_stubs.install_finder()
MODULES = tuple(os.environ["UKV_CHECK_MODULES"].split())
failed = []
for name in MODULES:
    try:
        importlib.import_module(name)
    except Exception as exc:  # report every module that fails, not only the first
        failed.append(f"  {name}: {type(exc).__name__}: {exc}")
target = os.path.realpath(sys.argv[1])
top2dist = md.packages_distributions()
carried, image = set(), set()
for name, mod in list(sys.modules.items()):
    f = getattr(mod, "__file__", None)
    if "." in name or not f or name in ("sglang", "sglang_stubs") or name in sys.stdlib_module_names:
        continue
    for dist in top2dist.get(name, []):
        try:
            v = md.version(dist)
        except md.PackageNotFoundError:
            continue
        (carried if os.path.realpath(f).startswith(target + os.sep) else image).add(f"{dist} {v}")
stand_ins = sorted(n for n, m in sys.modules.items() if "." not in n and "StandIn" in type(m).__name__)
torch = sys.modules.get("torch")
print(f"python {sys.version.split()[0]}, torch", *(
    (torch.__version__, "cuda available", torch.cuda.is_available()) if torch else ("not imported",)))
print("from the carried wheels:", ", ".join(sorted(carried, key=str.lower)))
print("from the python's own packages:", ", ".join(sorted(image, key=str.lower)))
print("stand-ins:", ", ".join(stand_ins))
if failed:
    print("import check FAILED:", *failed, sep="\n")
    sys.exit(1)
print(f"import check ok: {len(MODULES)} SGLang modules")
PYEOF
EOF
  sed -i -e "s#@RELEASE@#$release#" -e "s#@PART@#$part#" -e "s#@MODULES@#$*#" "$file"
}

case $sglang in
  0.5.23)
    reqs=$repo/benches/requirements-peer.txt
    dest=${dest:-$repo/.gpu/peer}
    budget_mib=55
    # Packages requirements-peer.txt does not name (the CPU machine has them already).
    EXTRA_PINS=(
      [orjson]=3.13.0 [pydantic]=2.13.4 [typing-inspection]=0.4.2 [annotated-types]=0.7.0
      [ipython]=9.18.1 [traitlets]=5.16.1 [pygments]=2.20.0 [requests]=2.34.2 [urllib3]=2.7.0
      [idna]=3.13 [charset-normalizer]=3.4.7 [certifi]=2026.5.20 [packaging]=26.4
      [sniffio]=1.3.1 [regex]=2026.5.9 [pyyaml]=6.0.3 [attrs]=26.1.0
    )
    # What the allocator's import path needs and the earlier GPU run found missing there.
    CORE=(
      sglang pybase64 starlette msgspec pyzmq dill apache-tvm-ffi compressed-tensors gguf loguru
      transformers orjson pydantic typing_inspection annotated_types ipython traitlets
    )
    # distribution:import name. pillow and torchvision are not carried (14 MB; the earlier
    # GPU run found both installed).
    FALLBACK=(
      psutil:psutil requests:requests urllib3:urllib3 idna:idna
      charset_normalizer:charset_normalizer certifi:certifi packaging:packaging anyio:anyio
      sniffio:sniffio tqdm:tqdm pygments:pygments aiohttp:aiohttp multidict:multidict yarl:yarl
      propcache:propcache frozenlist:frozenlist aiohappyeyeballs:aiohappyeyeballs
      aiosignal:aiosignal attrs:attr regex:regex huggingface_hub:huggingface_hub httpx:httpx
      httpcore:httpcore h11:h11 tokenizers:tokenizers safetensors:safetensors pyyaml:yaml
      sentencepiece:sentencepiece
    )
    # 41 MB of Rust extensions and the diffusion server
    DROP='^sglang/(srt/rust_extensions/_[^/]*\.so|multimodal_gen/.*)$'
    write_check() {
      cat > "$1" <<'EOF'
#!/usr/bin/env bash
# The import check install.sh ends with: SGLang's allocator path as benches/ imports it
# (sgl_kernel stand-in on CUDA). PYTHON: the python to check with.
peer=$(dirname "${BASH_SOURCE[0]}")/../../benches/peer_sglang.py
if [ -f "$peer" ]; then ${PYTHON:-python3} "$peer" --device cuda; else echo "no $peer: import not checked"; fi
EOF
    }
    ;;
  0.5.23-dropin)
    reqs=$repo/.ci/sglang-0.5.23.txt
    dest=${dest:-$repo/.gpu/sgl023}
    budget_mib=56
    OVERRIDE_PINS=([orjson]=3.13.0)  # 3.8.3 predates cp312 wheels
    # typing-extensions: pydantic 2.13 wants >= 4.14.1. torch-memory-saver: as 0.5.16's
    # (0.5.23 asks >= 0.0.9.post1).
    EXTRA_PINS=([typing-extensions]=4.15.0 [torch-memory-saver]=0.0.10)
    APART=(torch-memory-saver)
    NOT_CARRIED=(pillow)
    # On the image (KINDS.md's package list) at the versions .ci/sglang-0.5.23.txt pins or
    # ones its core wheels accept: carried as fallbacks (distribution:import name).
    # transformers is not here: the image's 5.17.0 is not the 5.19.0 SGLang 0.5.23 pins.
    FALLBACK=(
      anyio:anyio attrs:attr certifi:certifi charset-normalizer:charset_normalizer click:click
      colorama:colorama h11:h11 httpcore:httpcore httpx:httpx huggingface_hub:huggingface_hub
      idna:idna packaging:packaging psutil:psutil Pygments:pygments PyYAML:yaml regex:regex
      requests:requests safetensors:safetensors sortedcontainers:sortedcontainers tqdm:tqdm
      urllib3:urllib3 tokenizers:tokenizers typing_extensions:typing_extensions
    )
    core_from_reqs
    # the Rust extensions (41 MB: the server, gRPC, multimodal and bench cores; the tests
    # run SGLang's Python tree core, SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python) and
    # the diffusion server
    DROP='^sglang/(srt/rust_extensions/_[^/]*\.so|multimodal_gen/.*)$'
    write_check() {
      write_stub_check "$1" 0.5.23 sglang023 \
        sglang.srt.mem_cache.unified_memory_pool sglang.srt.mem_cache.allocator.unified_sub_pool \
        sglang.srt.mem_cache.allocator.unified_hybrid_swa sglang.srt.mem_cache.allocator.unified_mamba \
        sglang.srt.mem_cache.memory_pool sglang.srt.mem_cache.common \
        sglang.srt.mem_cache.unified_radix_cache sglang.srt.mem_cache.kv_index_translator \
        sglang.srt.mem_cache.unified_cache.components.swa \
        sglang.srt.managers.schedule_policy sglang.srt.managers.schedule_batch \
        sglang.srt.beam_search.coordinator sglang.srt.observability.scheduler_stage_metrics \
        sglang.test.unified_allocator_fixtures
    }
    ;;
  0.5.16)
    reqs=$repo/.ci/sglang-0.5.16.txt
    dest=${dest:-$repo/.gpu/sgl016}
    budget_mib=50
    OVERRIDE_PINS=([orjson]=3.13.0)  # 3.8.3 predates cp312 wheels
    # typing-extensions: pydantic 2.13 wants >= 4.14.1.
    EXTRA_PINS=([typing-extensions]=4.15.0 [torch-memory-saver]=0.0.10)
    # SGLang's memory saver (cu12 and cu13 builds), for tests/test_sglang_memory_saver.py
    # (GPU only, so not in CI's list). Apart: where SGLang's TorchMemorySaverAdapter can
    # import it, the drop-in's enable_memory_saver=True builds instead of raising, which
    # test_sglang_dropin.py (run on SGLang's bases by test_sglang_dropin_real.py) checks.
    APART=(torch-memory-saver)
    NOT_CARRIED=(xgrammar apache-tvm-ffi pillow hf-xet)
    # On the image (KINDS.md's package list) at versions the core wheels accept, as far as
    # their pins tell: carried as fallbacks (distribution:import name). tokenizers and
    # transformers are not here: the image's 0.23.2 / 5.17.0 break 0.5.16 (transformers
    # 5.12.1 wants tokenizers <= 0.23.0; under 5.17.0 SGLang's config registration fails,
    # "'qwen3_asr' is already used by a Transformers config").
    FALLBACK=(
      anyio:anyio attrs:attr certifi:certifi charset-normalizer:charset_normalizer click:click
      h11:h11 httpcore:httpcore httpx:httpx huggingface_hub:huggingface_hub idna:idna
      packaging:packaging psutil:psutil Pygments:pygments PyYAML:yaml regex:regex
      requests:requests safetensors:safetensors sortedcontainers:sortedcontainers tqdm:tqdm
      urllib3:urllib3 typing_extensions:typing_extensions
    )
    # Core: sglang and every other package of the requirements file.
    core_from_reqs
    # the gRPC and multimodal Rust extensions (3.2 MB; SGLang reports their absence only
    # when a server asks for them) and the diffusion server
    DROP='^sglang/(srt/grpc/_core[^/]*\.so|srt/multimodal/_core[^/]*\.so|multimodal_gen/.*)$'
    write_check() {
      # its pydantic request models name xgrammar's types (a typed stand-in)
      write_stub_check "$1" 0.5.16 sglang \
        sglang.srt.mem_cache.unified_memory_pool sglang.srt.mem_cache.multi_ended_allocator \
        sglang.srt.mem_cache.memory_pool sglang.srt.mem_cache.swa_memory_pool \
        sglang.srt.mem_cache.allocator.swa sglang.srt.mem_cache.common \
        sglang.srt.mem_cache.radix_cache sglang.srt.mem_cache.swa_radix_cache \
        sglang.srt.mem_cache.mamba_radix_cache sglang.srt.mem_cache.layout.page_major \
        sglang.srt.managers.schedule_policy sglang.srt.managers.schedule_batch \
        sglang.kernels.ops.kvcache.cache_move sglang.srt.entrypoints.openai.protocol \
        sglang.test.ci.ci_register
    }
    ;;
  *) echo "no profile for SGLang $sglang (0.5.23, 0.5.23-dropin, 0.5.16)" >&2; exit 2 ;;
esac

norm() { echo "$1" | tr 'A-Z_.' 'a-z--'; }
req_version() {  # the version $reqs pins for distribution $1, if any
  awk -F'==' -v want="$(norm "$1")" '/^[A-Za-z0-9]/ {
    n = tolower($1); gsub(/[-_.]+/, "-", n); split($2, v, /[ #;]/)
    if (n == want) { print v[1]; exit } }' "$reqs"
}
pin() {  # the "name==version" to download for distribution $1
  local key v
  key=$(norm "$1")
  if [ "$key" = sglang ]; then echo "sglang==$version"; return; fi
  v=${OVERRIDE_PINS[$key]:-}
  [ -n "$v" ] || v=$(req_version "$1")
  [ -n "$v" ] || v=${EXTRA_PINS[$key]:-}
  [ -n "$v" ] || { echo "no pinned version for $1" >&2; exit 1; }
  echo "$1==$v"
}
wheel_of() {  # the wheel of distribution $1 in directory $2
  local w
  w=$(cd "$2" && ls | grep -i -E "^$(norm "$1" | tr - _)-[0-9]" | head -1)
  [ -n "$w" ] || { echo "no wheel downloaded for $1" >&2; exit 1; }
  echo "$w"
}
download() {  # download DIR PIN...: cp$pyver manylinux x86_64 wheels, no dependencies
  local dir=$1; shift
  $PIP download -q --no-deps --only-binary=:all: --python-version "$pyver" \
    --implementation cp --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d "$dir" "$@"
}

if [ -e "$dest" ] && [ ! -f "$dest/MANIFEST.txt" ] && [ -n "$(ls -A "$dest")" ]; then
  echo "$dest exists and is not an earlier output of this script: not replacing it" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest/core" "$dest/fallback"
[ ${#APART[@]} -eq 0 ] || mkdir -p "$dest/apart"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

core_pins=()
for d in "${CORE[@]}"; do core_pins+=("$(pin "$d")"); done
download "$tmp" "${core_pins[@]}"
# pydantic pins its core exactly: where no list names pydantic-core, take that pin from the
# wheel just downloaded.
if ! ls "$tmp" | grep -q -i '^pydantic_core-'; then
  download "$tmp" "$(python3 - "$tmp"/pydantic-*.whl <<'EOF'
import re, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
m = re.search(r"^Requires-Dist: pydantic-core==([^\s;]+)", z.read(meta).decode(), re.M)
print(f"pydantic-core=={m.group(1)}")
EOF
)"
fi

# sglang: drop what its path never imports (DROP) and the RECORD lines naming it, so pip
# installs the rest as an ordinary wheel.
sg=$(ls "$tmp"/sglang-*.whl)
python3 - "$sg" "$dest/core/$(basename "$sg")" "$DROP" <<'EOF'
import re, sys, zipfile
src, dst, drop = sys.argv[1], sys.argv[2], re.compile(sys.argv[3])
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
# fallback.txt: wheel, module, distribution and what the core wheels require of it (their
# Requires-Dist for this platform, "-" for nothing), which install.sh checks the target's
# own version against.
for e in "${FALLBACK[@]}"; do
  echo "$(wheel_of "${e%%:*}" "$dest/fallback") ${e##*:} ${e%%:*}"
done > "$tmp/fallback.in"
python3 - "$pyver" "$dest" "$tmp/fallback.in" > "$dest/fallback.txt" <<'EOF'
import glob, re, sys, zipfile
try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name
pyver, dest, listed = sys.argv[1], sys.argv[2], sys.argv[3]
env = {"python_version": pyver, "python_full_version": pyver + ".0", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
wants: dict[str, list[str]] = {}
for whl in sorted(glob.glob(f"{dest}/core/*.whl")):
    z = zipfile.ZipFile(whl)
    meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    for line in re.findall(r"^Requires-Dist: (.+)$", meta, re.M):
        try:
            r = Requirement(line.strip())
        except ValueError as exc:  # an old wheel's malformed line: say so, go on
            print(f"{whl}: not read: {line.strip()!r} ({exc})", file=sys.stderr)
            continue
        if r.specifier and (r.marker is None or r.marker.evaluate(env)):
            wants.setdefault(canonicalize_name(r.name), []).append(str(r.specifier))
for line in open(listed):
    wheel, module, dist = line.split()
    spec = ",".join(sorted(set(wants.get(canonicalize_name(dist), [])))) or "-"
    print(wheel, module, dist, spec)
EOF
if [ ${#APART[@]} -gt 0 ]; then
  apart_pins=()
  for d in "${APART[@]}"; do apart_pins+=("$(pin "$d")"); done
  download "$dest/apart" "${apart_pins[@]}"
fi
write_check "$dest/check.sh"

cat > "$dest/install.sh" <<'EOF'
#!/usr/bin/env bash
# Install the SGLang wheels beside this script, without dependency resolution and without
# touching the python's own site-packages:
#   bash install.sh <target-dir> [--all]
# then run with PYTHONPATH=<target-dir>:$PYTHONPATH. core/ is always installed; a wheel of
# fallback/ only where its module is missing or its version is refused by what fallback.txt
# says the core wheels require (all of them with --all, or after a failed import check).
# Environment: PYTHON (default python3), PIP (default "$PYTHON -m pip").
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
fallbacks() {  # the fallback wheels needed, each with the reason on stderr (all with --all)
  $PY - "$here/fallback.txt" "$1" <<'PYEOF'
import importlib.metadata as md, importlib.util, sys
try:
    from packaging.specifiers import SpecifierSet
except ImportError:
    from pip._vendor.packaging.specifiers import SpecifierSet
for line in open(sys.argv[1]):
    wheel, module, dist, spec = line.split()
    why = "--all" if sys.argv[2] == "--all" else None
    if why is None and importlib.util.find_spec(module) is None:
        why = "missing"
    if why is None and spec != "-":
        try:
            have = md.version(dist)
        except md.PackageNotFoundError:
            have = None  # importable without metadata: keep what is there
        if have is not None and not SpecifierSet(spec).contains(have, prereleases=True):
            why = f"{dist} {have} not {spec}"
    if why:
        print(wheel)
        print(f"  {wheel}: {why}", file=sys.stderr)
PYEOF
}
check() { PYTHON=$PY bash "$here/check.sh" "$target"; }
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
  (cd "$here/fallback" && inst --upgrade $(fallbacks --all 2>/dev/null))
  check
fi
echo "SGLang installed into $target in $((SECONDS - start)) s"
EOF
chmod +x "$dest/install.sh" "$dest/check.sh"

{
  echo "# made by benches/prepare_peer_wheels.sh --sglang $sglang --python-version $pyver on $(date -u +%FT%TZ)"
  echo "# versions from ${reqs#"$repo"/}${NOT_CARRIED[*]:+; not carried: ${NOT_CARRIED[*]}}"
  echo "# bytes path"
  (cd "$dest" && find core fallback apart -name '*.whl' -printf '%s %p\n' 2>/dev/null | sort -k2)
} > "$dest/MANIFEST.txt"
total=$(du -sb "$dest" | cut -f1)
mib() { du -sb "$@" 2>/dev/null | awk '{s += $1} END {printf "%.1f", s / 1048576}'; }
echo "core $(mib "$dest/core") MiB, fallback $(mib "$dest/fallback") MiB, apart" \
  "$(mib "$dest/apart") MiB, total $(mib "$dest") MiB in $dest (budget $budget_mib MiB)"
if [ "$total" -gt $((budget_mib * 1048576)) ]; then
  echo "over budget: the ukv wheel(s) must fit in the same 64 MiB carry" >&2
  exit 1
fi
