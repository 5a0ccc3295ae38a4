#!/usr/bin/env bash
# One GPU session's work, run on the lent H200 from the repository root:
#   bash benches/gpu_run.sh <wheel> <out-dir> [commit] [parts...]
# parts (default: tests soak bench): `tests` runs the tests marked `gpu` and the
# execution/hybrid/review/differential/distributed suites with the pool on CUDA; `diff`
# the differential engine for 10^6 steps in parallel processes; `soak` the public-API soak at
# 10^6 operations per mode; `bench` the allocator host-time comparison against SGLang
# (when .gpu/peer/ was carried, see benches/prepare_peer_wheels.sh), a cProfile of the
# small calls, the model demo on CUDA and the serving-step bench; `sglang` the SGLang 0.5.16
# drop-in suites and SGLang's own unit tests with the pool on CUDA, `sglang-bench` the
# per-step bench under SGLang 0.5.16, `sglang023` SGLang 0.5.23's scenarios, scheduler
# driver, memory-saver test and per-step bench with the pool on CUDA (see those parts
# below; none is in the default list); `regress` the host-path regression gate with its
# A/A control and the host-time bench of the rows still short of their goals (see that
# part below; not in the default list). Each part fits one device call (< 10 min).
# Installs the prebuilt abi3 wheel into a temporary directory (the GPU machine has no Rust).
set -uo pipefail
wheel=$1; out=$2; commit=${3:-unknown}
shift $(( $# < 3 ? $# : 3 ))
parts=${*:-tests soak bench}
d=$(mktemp -d) && python3 -m pip install -q --no-deps --target "$d" "$wheel" && export PYTHONPATH=$d
# Logs name ukv's files as the repository does (python/ukv/...), not by this temporary folder.
relpaths() { sed -u "s#$d/ukv/#python/ukv/#g"; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
python3 -c 'import torch, triton, numpy, ukv; print("torch", torch.__version__, "triton", triton.__version__, "numpy", numpy.__version__, "ukv from", ukv.__file__)' | tee -a "$out/gpu.txt"

if [[ " $parts " == *" tests "* ]]; then
  start=$SECONDS
  UKV_TEST_DEVICE=cuda python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | relpaths | tee "$out/gpu-tests.log" | tail -4
  UKV_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider tests/test_execution.py \
    tests/test_hybrid.py tests/test_middle_band.py tests/test_reliability_round2.py \
    tests/test_bad_inputs_hybrid.py tests/test_device_last_loc.py tests/test_killed_process.py \
    tests/test_review_round3.py tests/differential tests/test_distributed_local.py \
    tests/test_distributed.py tests/test_window_free.py \
    2>&1 | relpaths | tee -a "$out/gpu-tests.log" | tail -4
  echo "gpu tests took $((SECONDS - start)) s" | tee -a "$out/gpu-tests.log"
fi

if [[ " $parts " == *" diff "* ]]; then
  timeout 480 python3 benches/diff_cuda.py --device cuda --procs ${DIFF_PROCS:-16} --steps 1000000 \
    --time-limit ${DIFF_SECONDS:-420} --out "$out/diff" > "$out/diff.log" 2>&1; echo "diff exit $?"; tail -12 "$out/diff.log"
fi

if [[ " $parts " == *" soak "* ]]; then
  for mode in eager lazy; do
    timeout 200 python3 benches/soak_cuda.py --device cuda --ops 1000000 --modes "$mode" \
      --out "$out/soak-$mode" > "$out/soak-$mode.log" 2>&1; tail -2 "$out/soak-$mode.log"
  done
fi

if [[ " $parts " == *" bench "* ]]; then
  if [ -x .gpu/peer/install.sh ]; then
    bash .gpu/peer/install.sh /tmp/peer > "$out/peer-install.log" 2>&1; tail -2 "$out/peer-install.log"
    export PYTHONPATH=/tmp/peer:$PYTHONPATH
  fi
  UKV_COMMIT=$commit timeout 300 python3 benches/bench_cuda_host.py --out "$out" --commit "$commit" > "$out/cuda-host.log" 2>&1
  grep -E "^\| " "$out/cuda-host.md" | head -40
  timeout 120 python3 benches/profile_cuda_host.py --out "$out/profile-cuda-host.txt" > /dev/null 2>&1
  (cd "$out" && timeout 200 python3 -m ukv demo --requests 600 --pool-mib 6 --png demo-arena-cuda.png) \
    > "$out/demo-cuda.log" 2>&1; tail -3 "$out/demo-cuda.log"
  python3 benches/bench_step_launches.py --out "$out/step-h200.md" > "$out/step.log" 2>&1; grep -A6 "Host time" "$out/step-h200.md"
fi

if [[ " $parts " == *" regress "* ]]; then
  # The host-path regression gate (benches/README.md), about 6 min in all. Needs the two
  # wheels and manifest of `bash benches/regress_build.sh OLD` carried (REGRESS_WHEELS,
  # default .gpu/regress); the <wheel> argument is what the last step times. In order:
  #   1. the A/A control: the old wheel on both sides (--aa), one process pair: the noise
  #      floor of this machine today (regress-<card>-aa.md/.json);
  #   2. the gate, old against new (regress-<card>.md/.json);
  #   3. bench_cuda_host.py on <wheel>, against SGLang's allocator when .gpu/peer/ was
  #      carried: the absolute host µs of the rows still short of issue 29's goals, the
  #      device-id alloc+free pair (<= 25 µs, >= 8x SGLang), the lazy 4096-page batch
  #      (>= 5x SGLang) and the host-id pair (<= 12 µs) (cuda-host.md/.json).
  # REGRESS_DEVICE=cpu REGRESS_ARGS=--quick runs the same steps on a machine without a GPU
  # (a check that they work, not a result).
  rw=${REGRESS_WHEELS:-.gpu/regress}; rdev=${REGRESS_DEVICE:-cuda}; rstart=$SECONDS
  read -r -a rargs <<< "${REGRESS_ARGS:-}"
  timeout "${REGRESS_AA_SECONDS:-120}" python3 benches/regress_run.py --wheels "$rw" \
    --device "$rdev" --out "$out" --aa --processes 1 "${rargs[@]}" > "$out/regress-aa.log" 2>&1
  echo "regress --aa exit $?"; grep -h -E '^\| `(pair|reloc|batch)' "$out"/regress-*-aa.md | head -20
  timeout "${REGRESS_SECONDS:-240}" python3 benches/regress_run.py --wheels "$rw" \
    --device "$rdev" --out "$out" "${rargs[@]}" > "$out/regress.log" 2>&1
  echo "regress exit $?"; grep -h -E '^\| `(pair|reloc|batch)' $(ls "$out"/regress-*.md | grep -v -- -aa.md) | head -20
  if [ -x .gpu/peer/install.sh ] && [ ! -d /tmp/peer ]; then
    bash .gpu/peer/install.sh /tmp/peer > "$out/peer-install.log" 2>&1; tail -2 "$out/peer-install.log"
  fi
  [ -d /tmp/peer ] && export PYTHONPATH=/tmp/peer:$PYTHONPATH
  hargs=(); [ "$rdev" = cpu ] && hargs=(--quick --no-peer)
  UKV_COMMIT=$commit timeout "${HOST_SECONDS:-180}" python3 benches/bench_cuda_host.py \
    --device "$rdev" --out "$out" --commit "$commit" "${hargs[@]}" > "$out/cuda-host.log" 2>&1
  echo "bench_cuda_host exit $?"; grep -h -E '^\| alloc' "$out"/*-host.md | head -16
  echo "regress part took $((SECONDS - rstart)) s"
fi

if [[ " $parts " == *" sglang "* || " $parts " == *" sglang-bench "* ]]; then
  # SGLang 0.5.16 with the pool on CUDA (docs/SGLANG.md, "On the GPU machine"). Needs
  # .gpu/sgl016 (benches/prepare_peer_wheels.sh --sglang 0.5.16) carried, and for
  # `upstream` SGLang's six upstream test files in $UKV_UPSTREAM (default .gpu/upstream016).
  # Steps, in order (SGLANG_STEPS picks some; the install always runs first):
  #   part sglang:
  #   tests        the drop-in suites on the stand-in bases
  #   real         tests/test_sglang_dropin_real.py (children inherit UKV_TEST_DEVICE=cuda)
  #   device       where the real suite's child puts the pools (its exact configuration)
  #   memsaver     tests/test_sglang_memory_saver.py (SGLang's memory saver, a CUDA graph)
  #   upstream     SGLang's own unit tests, on SGLang's code and on the drop-in
  #   scheduler    tests/test_sglang_scheduler.py, once it exists
  #   part sglang-bench:
  #   bench        benches/bench_sglang_dropin.py, every row it can start until BENCH_TAIL
  #                (default 120) s before the part's end (it rewrites its files after each row)
  # Each step has a time limit, cut to what is left of SGLANG_SECONDS (default 540) so the
  # part ends inside one 600-s call; a step left under 20 s is skipped and says so (run it
  # again in a second call with SGLANG_STEPS). Files: sglang.log (every step's whole output),
  # sglang-upstream-cuda.md/.json, sglang-step-cuda.md/.json.
  sg_start=$SECONDS; sg_budget=${SGLANG_SECONDS:-540}
  sg=/tmp/sgl016; up=${UKV_UPSTREAM:-.gpu/upstream016}; log=$out/sglang.log
  steps=
  [[ " $parts " == *" sglang "* ]] && steps+=" tests real device memsaver upstream scheduler"
  [[ " $parts " == *" sglang-bench "* ]] && steps+=" bench"
  steps=" ${SGLANG_STEPS:-$steps} "
  export UKV_SGLANG_PATH=$sg UKV_TEST_DEVICE=cuda UKV_COMMIT=$commit UKV_REQUIRE_SGLANG=1
  export UKV_SGLANG_STUBS=sgl_kernel,xgrammar${UKV_SGLANG_STUBS:+,$UKV_SGLANG_STUBS}
  unset TRITON_INTERPRET
  stub_args=(); for n in ${UKV_SGLANG_STUBS//,/ }; do stub_args+=(--stub "$n"); done
  sg_paths() { relpaths | sed -u "s#$sg/#<sglang>/#g"; }
  step() {  # step NAME LIMIT COMMAND...: its output to sglang.log, its last lines here
    local name=$1 limit=$2 left rc t=$SECONDS f; shift 2
    left=$(( sg_budget - (SECONDS - sg_start) ))
    (( limit > left )) && limit=$left
    if (( limit < 20 )); then echo ">> $name: skipped, $left s of the part left" | tee -a "$log"; return 0; fi
    echo ">> $name (limit $limit s): $*" >> "$log"
    f=$(mktemp); timeout -k 10 "$limit" "$@" > "$f" 2>&1; rc=$?
    sg_paths < "$f" >> "$log"; sg_paths < "$f" | grep -v -E "^\s*$|[Ww]arn" | tail -3; rm -f "$f"
    echo ">> $name: exit $rc$( ((rc == 124)) && echo ", timed out") in $((SECONDS - t)) s" | tee -a "$log"
    return $rc
  }
  if [ -f "$sg/.installed" ] || step install 180 bash .gpu/sgl016/install.sh "$sg"; then
    touch "$sg/.installed"
  else  # the steps still run: each fails fast, and its log says where
    echo "SGLang's install or import check failed (see sglang.log): the steps run anyway"
  fi
  [[ "$steps" == *" tests "* ]] && step tests 200 env -u UKV_SGLANG_PATH python3 -m pytest -q \
    -p no:cacheprovider tests/test_sglang_dropin.py tests/test_sglang_review4.py
  [[ "$steps" == *" real "* ]] && step real 240 python3 -m pytest -q -p no:cacheprovider -rA \
    tests/test_sglang_dropin_real.py
  [[ "$steps" == *" device "* ]] && step device 60 python3 - <<'EOF'
# The child of test_dropin_suite_runs_on_sglangs_bases: `pytest -p sglang_stubs` on the
# drop-in suites, with this environment; its pools come from tests/dropin_builders.py.
import os, sys
sys.path[:0] = ["tests"]
import sglang_stubs
sglang_stubs.pytest_configure(None)
import dropin_builders as b
from ukv.integrations.sglang import bases
pool, full, _ = b.pair(lazy=True)
loc = full.translate_kv_loc(full.alloc(4))
key = b.swa_bundle().token_to_kv_pool.get_key_buffer(1)
print(f"UKV_TEST_DEVICE={b.DEV}, TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')}, "
      f"SGLang's bases: {bases.FROM_SGLANG}; drop-in pool on {pool.device}, physical locs on "
      f"{loc.device}, SWA bundle's full-layer key buffer on {key.device}")
assert loc.device.type == key.device.type == "cuda", "the pools are not on CUDA"
EOF
  # torch_memory_saver in a folder of its own (.gpu/sgl016/apart): on the path of this step
  # only (the parent skips unless it imports it; the child inherits the path)
  [[ "$steps" == *" memsaver "* ]] && step memsaver 150 bash -c "python3 -m pip install -q \
    --no-deps --no-compile --target /tmp/tms .gpu/sgl016/apart/torch_memory_saver-*.whl 2>&1 |
    grep -v -E '^WARNING: (Running pip as|Target directory)'; PYTHONPATH=\$PYTHONPATH:/tmp/tms \
    python3 -m pytest -q -p no:cacheprovider -rA tests/test_sglang_memory_saver.py"
  [[ "$steps" == *" upstream "* ]] && step upstream 300 python3 benches/sglang_upstream.py \
    --device cuda --tests "$up" --sglang-path "$sg" "${stub_args[@]}" --timeout 140 --out "$out"
  if [[ "$steps" == *" scheduler "* ]]; then  # hook: SGLang's scheduler driven over the drop-in
    if [ -f tests/test_sglang_scheduler.py ]; then
      step scheduler 180 python3 -m pytest -q -p no:cacheprovider -rA tests/test_sglang_scheduler.py
    else
      echo ">> scheduler: no tests/test_sglang_scheduler.py in this tree" | tee -a "$log"
    fi
  fi
  if [[ "$steps" == *" bench "* ]]; then
    left=$(( sg_budget - (SECONDS - sg_start) ))
    step bench "$left" python3 benches/bench_sglang_dropin.py --device cuda --sglang-path "$sg" \
      --max-seconds $(( left - ${BENCH_TAIL:-120} )) --out "$out/sglang-step-cuda.md"
  fi
  echo "sglang part took $((SECONDS - sg_start)) s" | tee -a "$log"
fi

if [[ " $parts " == *" sglang023 "* ]]; then
  # SGLang 0.5.23 with the pool on CUDA (issue 27; docs/SGLANG.md, "On the GPU machine").
  # Needs .gpu/sgl023 (benches/prepare_peer_wheels.sh --sglang 0.5.23-dropin) carried; the
  # 0.5.16 bundle is not needed. Steps, in order (SGL023_STEPS picks some; the install
  # always runs first):
  #   scenarios  tests/test_sglang_0523.py: SGLang 0.5.23's own pool builders' scenarios on
  #              both sides (CPU pools, as its builders make them: Triton interpreted, the
  #              GPU hidden), and the speculative ones (the Mamba pair's and the tri-pool's
  #              verify scratch) again with their pools on CUDA
  #   scheduler  tests/test_sglang_scheduler.py: SGLang's scheduler on both pools on CUDA
  #              over the driver's matrix (benches/sglang_scheduler_driver.py children, one
  #              per pool), its *-spec runs every decode a Mamba verify step; its table and
  #              results as files (sglang023-scheduler-<dev>.md/.json)
  #   memsaver   tests/test_sglang_memory_saver.py under 0.5.23 (SGLang's memory saver, a
  #              CUDA graph captured before the release), torch_memory_saver installed apart
  #   driver     (not by default: the scheduler step ran the same) benches/
  #              sglang_scheduler_driver.py --side-by-side, the matrix once more
  #              (sglang023-driver-<dev>.md/.json)
  #   bench      benches/bench_sglang_dropin.py: host µs per step and per call, 0.5.23's own
  #              pool vs the drop-in in one process, every row it can start until
  #              BENCH_TAIL (default 60) s before the part's end (sglang-step-<dev>.md/.json)
  #   upstream   SGLang's own unit tests of its unified pool, where a folder of them was
  #              carried (UKV_UPSTREAM023, default .gpu/upstream023): 0.5.23's wheel does not
  #              ship them (they live in its source repository's test/registered/unit/)
  # Each step has a time limit, cut to what is left of SGL023_SECONDS (default 540) so the
  # part ends inside one 600-s call; a step left under 20 s is skipped and says so.
  # Everything goes to $out/sglang023/ (sglang023.log: every step's whole output), packed
  # at the end into $out/sglang023.tar.gz (the call returns few files); the step lines are
  # also in $out/sglang023-steps.txt. SGL023_DEVICE=cpu runs the same steps on a machine
  # without a GPU (Triton interpreted, the bench --quick; the memory-saver test skips): a
  # check that they work, not a result (with SGL023_SECONDS and SGL023_LIMIT_SCALE raised
  # to fit that machine: benches/README.md gives the line).
  g_start=$SECONDS; g_budget=${SGL023_SECONDS:-540}; gdev=${SGL023_DEVICE:-cuda}
  g_scale=${SGL023_LIMIT_SCALE:-1}  # multiplies each step's own limit (a slow CPU check: 4)
  g_sg=/tmp/sgl023; g_up=${UKV_UPSTREAM023:-.gpu/upstream023}
  o=$out/sglang023; mkdir -p "$o"; glog=$o/sglang023.log; gsteps=$out/sglang023-steps.txt
  g_steps=" ${SGL023_STEPS:-scenarios scheduler memsaver bench upstream} "
  export UKV_SGLANG_PATH=$g_sg UKV_TEST_DEVICE=$gdev UKV_COMMIT=$commit UKV_REQUIRE_SGLANG=1
  export UKV_SGLANG_STUBS=sgl_kernel,xgrammar${UKV_SGLANG_STUBS:+,$UKV_SGLANG_STUBS}
  if [ "$gdev" = cpu ]; then export TRITON_INTERPRET=1; else unset TRITON_INTERPRET; fi
  g_paths() { relpaths | sed -u "s#$g_sg/#<sglang>/#g"; }
  gstep() {  # gstep NAME LIMIT COMMAND...: its output to sglang023.log, its last lines here
    local name=$1 limit=$(( $2 * g_scale )) left rc t=$SECONDS f; shift 2
    left=$(( g_budget - (SECONDS - g_start) ))
    (( limit > left )) && limit=$left
    if (( limit < 20 )); then echo ">> $name: skipped, $left s of the part left" | tee -a "$glog" "$gsteps"; return 0; fi
    echo ">> $name (limit $limit s): $*" >> "$glog"
    f=$(mktemp); timeout -k 10 "$limit" "$@" > "$f" 2>&1; rc=$?
    g_paths < "$f" >> "$glog"; g_paths < "$f" | grep -v -E "^\s*$|[Ww]arn" | tail -4 | tee -a "$gsteps"; rm -f "$f"
    echo ">> $name: exit $rc$( ((rc == 124)) && echo ", timed out") in $((SECONDS - t)) s" | tee -a "$glog" "$gsteps"
    return $rc
  }
  if [ -f "$g_sg/.installed" ] || gstep install 120 bash .gpu/sgl023/install.sh "$g_sg"; then
    touch "$g_sg/.installed"
  else  # the steps still run: each fails fast, and its log says where
    echo "SGLang 0.5.23's install or import check failed (see sglang023.log): the steps run anyway" | tee -a "$gsteps"
  fi
  [[ "$g_steps" == *" scenarios "* ]] && gstep scenarios 150 python3 -m pytest -q \
    -p no:cacheprovider -rA tests/test_sglang_0523.py
  [[ "$g_steps" == *" scheduler "* ]] && UKV_SCHEDULER_OUT=$o/sglang023-scheduler-$gdev \
    gstep scheduler 200 python3 -m pytest -q -p no:cacheprovider -rA tests/test_sglang_scheduler.py
  # torch_memory_saver in a folder of its own: on the path of this step only
  [[ "$g_steps" == *" memsaver "* ]] && gstep memsaver 90 bash -c "python3 -m pip install -q \
    --no-deps --no-compile --target /tmp/tms023 .gpu/sgl023/apart/torch_memory_saver-*.whl 2>&1 |
    grep -v -E '^WARNING: (Running pip as|Target directory)'; PYTHONPATH=\$PYTHONPATH:/tmp/tms023 \
    python3 -m pytest -q -p no:cacheprovider -rA tests/test_sglang_memory_saver.py"
  [[ "$g_steps" == *" driver "* ]] && gstep driver 150 python3 benches/sglang_scheduler_driver.py \
    --side-by-side --device "$gdev" --sglang-path "$g_sg" \
    --out "$o/sglang023-driver-$gdev.md" --json "$o/sglang023-driver-$gdev.json"
  if [[ "$g_steps" == *" bench "* ]]; then
    left=$(( g_budget - (SECONDS - g_start) - ${BENCH_TAIL:-60} ))
    bargs=(); [ "$gdev" = cpu ] && bargs=(--quick --batch 4 --page-size 1)
    read -r -a extra <<< "${SGL023_BENCH_ARGS:-}"
    # --max-seconds: no row starts after it; the step's limit leaves the last row its tail
    gstep bench $(( left + ${BENCH_TAIL:-60} )) python3 benches/bench_sglang_dropin.py \
      --device "$gdev" --sglang-path "$g_sg" --max-seconds $(( left > 1 ? left : 1 )) \
      --out "$o/sglang-step-$gdev.md" "${bargs[@]}" "${extra[@]}"
  fi
  if [[ "$g_steps" == *" upstream "* ]]; then
    if [ -d "$g_up" ]; then
      stub_args=(); for n in ${UKV_SGLANG_STUBS//,/ }; do stub_args+=(--stub "$n"); done
      gstep upstream 150 python3 benches/sglang_upstream.py --device "$gdev" --tests "$g_up" \
        --sglang-path "$g_sg" "${stub_args[@]}" --timeout 100 --out "$o"
    else
      echo ">> upstream: no $g_up carried (SGLang 0.5.23's wheel does not ship its unified-pool unit tests)" | tee -a "$glog" "$gsteps"
    fi
  fi
  echo "sglang023 part took $((SECONDS - g_start)) s" | tee -a "$glog" "$gsteps"
  cp "$out/gpu.txt" "$o/" 2>/dev/null
  tar -czf "$out/sglang023.tar.gz" -C "$out" sglang023 && rm -rf "$o"  # last: one file back
fi
