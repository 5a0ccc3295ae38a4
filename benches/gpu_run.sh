#!/usr/bin/env bash
# One GPU session's work, run on the lent H200 from the repository root:
#   bash benches/gpu_run.sh <wheel> <out-dir>
# Installs the prebuilt abi3 wheel into a temporary directory (no Rust there), runs the
# tests marked `gpu` on CUDA, then the kernel bench and the serving-step bench.
set -uo pipefail
wheel=$1; out=$2
d=$(mktemp -d) && python3 -m pip install -q --no-deps --target "$d" "$wheel" && export PYTHONPATH=$d
export UKV_TEST_DEVICE=cuda PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
python3 -c 'import torch, triton, ukv; print("torch", torch.__version__, "triton", triton.__version__, "ukv from", ukv.__file__)' | tee -a "$out/gpu.txt"
start=$SECONDS
python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$out/gpu-tests.log" | tail -15
echo "gpu tests took $((SECONDS - start)) s" | tee -a "$out/gpu-tests.log"
python3 benches/bench_kernels.py --out "$out/kernels-h200.md" > "$out/kernels.log" 2>&1; tail -5 "$out/kernels.log"
python3 benches/bench_step_launches.py --out "$out/step-h200.md" > "$out/step.log" 2>&1; tail -30 "$out/step.log"
python3 benches/profile_cuda_host.py --out "$out/profile-cuda-host.txt" > /dev/null 2>&1; echo "host profile rc=$?"
