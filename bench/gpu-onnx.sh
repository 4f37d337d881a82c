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
#   3. `npm run bench -- onnx --device cuda`.
# Each step has its own time limit and the next runs whatever it did; everything lands in OUT.
# DEVICE=cpu runs the same steps on the CPU: a dry run of this script where no GPU is lent.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/gpu-onnx}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python3 -c 'import torch, torchvision; print("PyTorch", torch.__version__, "torchvision", torchvision.__version__, "CUDA", torch.version.cuda)' \
  || echo "no torchvision here: step 1 skips its models and step 3 fails"

echo "== 1. test/onnx.test.ts on $DEVICE"
STITCHLAB_TEST_DEVICE=$DEVICE timeout "${T_TEST:-240}" node --expose-gc --import tsx --test test/onnx.test.ts >"$OUT/onnx-test-$DEVICE.txt" 2>&1
echo "exit $?"; grep -E "^# (tests|pass|fail|skipped)|^not ok|^    not ok" "$OUT/onnx-test-$DEVICE.txt"

if [ -n "${XARCH:-}" ] && [ -n "${FMNIST:-}" ]; then
  echo "== 2. compare convnext.onnx resnet18-s0.onnx --device $DEVICE"
  start=$(date +%s)
  rm -rf "${TMPDIR:-/tmp}/stitchlab-gpu-onnx-cache"
  timeout "${T_COMPARE:-200}" ./bin/stitchlab.js compare "$XARCH/convnext.onnx" "$XARCH/resnet18-s0.onnx" \
    --normalization fashion-mnist --dataset fashion-mnist --root "$FMNIST" --device "$DEVICE" \
    --out "$OUT/compare" --cache "${TMPDIR:-/tmp}/stitchlab-gpu-onnx-cache" --json >"$OUT/compare-$DEVICE.json" 2>"$OUT/compare-$DEVICE.log"
  echo "exit $? after $(($(date +%s) - start)) s"; tail -3 "$OUT/compare-$DEVICE.log"
  # The verdicts, one line per pair and point (docs/gpu.md has the CPU's for these files).
  python3 -c 'import json, sys
for v in json.load(open(sys.argv[1]))["verdicts"]:
    for p in v["points"]:
        print(v["relation"], p["point"], "standard %.4f" % p["standard"]["mean"], "IA %.4f" % p["iris"]["mean"], p["state"])' \
    "$OUT/compare-$DEVICE.json"
fi

echo "== 3. npm run bench -- onnx --device $DEVICE"
timeout "${T_BENCH:-200}" npm run bench -- onnx --device "$DEVICE" >"$OUT/bench-onnx-$DEVICE.txt" 2>&1
echo "exit $?"; grep -E "^(ONNX|A stitch|model|resnet18|convnext|vit) " "$OUT/bench-onnx-$DEVICE.txt"
cp bench/results/onnx*.json "$OUT/" 2>/dev/null || true
