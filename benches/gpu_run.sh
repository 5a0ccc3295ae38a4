#!/usr/bin/env bash
# One GPU session's work, run on the lent H200 from the repository root:
#   bash benches/gpu_run.sh <wheel> <out-dir> [commit] [parts...]
# parts (default: tests soak bench): `tests` runs the tests marked `gpu` and the
# execution/hybrid/review/differential/distributed suites with the pool on CUDA; `diff`
# the differential engine for 10^6 steps in parallel processes; `soak` the public-API soak at
# 10^6 operations per mode; `bench` the allocator host-time comparison against SGLang
# (when .gpu/peer/ was carried, see benches/prepare_peer_wheels.sh), a cProfile of the
# small calls, the model demo on CUDA and the serving-step bench. Each part fits one
# device call (< 10 min). Installs the prebuilt abi3 wheel into a temporary directory
# (the GPU machine has no Rust).
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
    tests/test_distributed.py \
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
