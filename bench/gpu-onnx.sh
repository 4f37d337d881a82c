#!/usr/bin/env bash
# ONNX graphs on a GPU (issue 39), as one short run on a machine with an NVIDIA GPU and a CUDA
# PyTorch (with torchvision), after `source .device/remote.sh` (../shared/device; .device packed by
# bench/gpu-onnx-pack.sh, whose header has the whole command) has built the
# addon there; run from the project's folder ($W):
#   1. test/onnx.test.ts with STITCHLAB_TEST_DEVICE=cuda: every exported torchvision family on the
#      GPU against the CPU's oracles (onnxruntime at the logits and every cut, PyTorch autograd's
#      gradients), cuDNN's TF32 off;
#   2. `compare` of two graphs trained in PyTorch (presets/cross-architecture/train_models.py) with
#      --device cuda, when XARCH (their folder) and FMNIST (Fashion-MNIST's files) are given;
#   3. the ONNX benchmark (`npm run bench -- onnx --device cuda`).
# Each step has its own time limit (T_TEST 180 s, T_COMPARE 120 s, T_BENCH 150 s: with the build,
# inside the device tool's 600 s per command) and the next runs whatever it did; everything lands
# in OUT (default .scratch/gpu-onnx, ignored by git).
# DEVICE=cpu runs the same steps on the CPU: a dry run of this script where no GPU is lent.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.scratch/gpu-onnx}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python3 -c 'import torch, torchvision; print("PyTorch", torch.__version__, "torchvision", torchvision.__version__, "CUDA", torch.version.cuda)' \
  || echo "no torchvision here: step 1 skips its models and step 3 fails"

echo "== 1. test/onnx.test.ts on $DEVICE"
STITCHLAB_TEST_DEVICE=$DEVICE timeout "${T_TEST:-180}" node --expose-gc --import tsx --test test/onnx.test.ts >"$OUT/onnx-test-$DEVICE.txt" 2>&1
echo "exit $?"; grep -E "^# (tests|pass|fail|skipped)|^not ok|^    not ok" "$OUT/onnx-test-$DEVICE.txt"

if [ -n "${XARCH:-}" ] && [ -n "${FMNIST:-}" ]; then
  echo "== 2. compare convnext.onnx resnet18-s0.onnx --device $DEVICE"
  start=$(date +%s)
  rm -rf "${TMPDIR:-/tmp}/stitchlab-gpu-onnx-cache"
  timeout "${T_COMPARE:-120}" ./bin/stitchlab.js compare "$XARCH/convnext.onnx" "$XARCH/resnet18-s0.onnx" \
    --normalization fashion-mnist --dataset fashion-mnist --root "$FMNIST" --device "$DEVICE" \
    --out "$OUT/compare" --cache "${TMPDIR:-/tmp}/stitchlab-gpu-onnx-cache" --json >"$OUT/compare-$DEVICE.json" 2>"$OUT/compare-$DEVICE.log"
  echo "exit $? after $(($(date +%s) - start)) s"; tail -3 "$OUT/compare-$DEVICE.log"
  # The verdicts, one line per pair and point (docs/gpu.md has the CPU's for these files).
  python3 -c 'import json, sys
try:
    verdicts = json.load(open(sys.argv[1]))["verdicts"]
except (OSError, ValueError, KeyError) as e:
    sys.exit(f"no verdicts in {sys.argv[1]}: {e}")
mean = lambda s: "%.4f" % s["mean"] if s else "none"
for v in verdicts:
    for p in v["points"]:
        print(v["relation"], p["point"], "standard", mean(p.get("standard")), "IA", mean(p.get("iris")), p.get("state"))' \
    "$OUT/compare-$DEVICE.json"
fi

echo "== 3. bench onnx --device $DEVICE"
# node directly: the device's packed Node has no npm. On the CPU (a dry run) --quick, so that the
# committed bench/results/onnx.json keeps the real run's figures.
quick=(); [ "$DEVICE" = cpu ] && quick=(--quick)
timeout "${T_BENCH:-150}" node --import tsx bench/run.ts onnx --device "$DEVICE" "${quick[@]}" >"$OUT/bench-onnx-$DEVICE.txt" 2>&1
echo "exit $?"; grep -E "^(ONNX|A stitch|model|resnet18|convnext|vit) " "$OUT/bench-onnx-$DEVICE.txt"
cp bench/results/onnx*.json "$OUT/" 2>/dev/null || true
