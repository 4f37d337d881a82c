#!/usr/bin/env bash
# The engine and IRI benchmarks on a GPU, against Python PyTorch on the same GPU in the same run.
# For a machine with an NVIDIA GPU and a Python whose PyTorch has CUDA (the pip wheel, which
# bundles a CUDA libtorch): builds the addon against that libtorch, shows `stitchlab doctor`,
# then runs both benchmarks with --device cuda. They write bench/results/engine-cuda.json and
# iris-cuda.json (never the CPU figures); with OUT set, those are copied there too.
#
#   bash bench/gpu.sh [bench options]      (e.g. --quick, or --batch 512; passed to both)
#
# PYTHON picks the interpreter (python3); the benchmarks' Python side uses the same one.
# Note: this rebuilds native/build/ against the CUDA libtorch; rebuild for the CPU one afterwards
# (`npm run build:native -- --force`) on a machine that is to run the CPU path again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export STITCHLAB_PYTHON=${STITCHLAB_PYTHON:-$(command -v "$PY")}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$PY" -c 'import sys, torch
print("PyTorch", torch.__version__, "CUDA", torch.version.cuda, "GPUs", torch.cuda.device_count())
if not torch.cuda.is_available(): sys.exit("this PyTorch cannot use a GPU: a CPU build, or no GPU visible")
print("GPU 0:", torch.cuda.get_device_name(0))'

PYTHON="$PY" npm run build:native -- --force
npm run build:ts
./bin/stitchlab.js doctor

npm run bench -- engine --device cuda "$@"
npm run bench -- iris --device cuda "$@"

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  cp bench/results/*-cuda*.json "$OUT"/
fi
