#!/usr/bin/env bash
# The engine and IRI benchmarks on a GPU, against Python PyTorch on the same GPU in the same run.
# For a machine with an NVIDIA GPU and a Python whose PyTorch has CUDA (the pip wheel, which
# bundles a CUDA libtorch): builds the addon against that libtorch, shows `stitchlab doctor`,
# then runs both benchmarks with --device cuda. They write bench/results/engine-cuda.json and
# iris-cuda.json (never the CPU figures), then checks CUDA graphs and times 200-step IRI batches
# with and without them (iris-cuda-200.json, iris-graphs-cuda.json); with OUT set, those are
# copied there too.
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
# CUDA graphs (docs/gpu.md): do graphed steps equal eager ones here, and how fast is a realistic
# IRI batch (200 steps) with and without them.
node --expose-gc --import tsx --test test/graphs.test.ts
# ONNX graphs (models/onnx/): the CPU's answers on the GPU.
STITCHLAB_TEST_DEVICE=cuda node --expose-gc --import tsx --test test/onnx.test.ts
npm run bench -- iris --device cuda --steps 200 "$@"
cp bench/results/iris-cuda.json bench/results/iris-cuda-200.json
STITCHLAB_CUDA_GRAPHS=1 npm run bench -- iris --device cuda --steps 200 "$@"

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  cp bench/results/*-cuda*.json "$OUT"/
fi
