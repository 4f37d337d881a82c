#!/usr/bin/env bash
# Packs .device/ for bench/gpu-onnx.sh on a lent GPU machine, within the device tool's 64 MiB
# (the carried .device plus the working tree). ../shared/device/pack.sh packs Node, the project
# and its node_modules (103 MB with onnxruntime-node's every platform); this keeps the linux-x64
# onnxruntime only, drops protobufjs's CLI, esbuild's copy of its binary (tsx resolves
# @esbuild/linux-x64's) and the browser driver's bare-* modules, and recompresses (xz -9e). Its
# data: two graphs trained by presets/cross-architecture/train_models.py (ConvNeXt and a
# ResNet-18; 2 epochs on 6000 images, about 1 minute here) and the first 1500 training and 1000
# test images of Fashion-MNIST in their own IDX format. Then, on the device:
#   set -u; source .device/remote.sh >"$OUT/build.txt" 2>&1 || { tail -40 "$OUT/build.txt"; exit 1; }
#   cd "$W" && XARCH=$DEVICE_DATA/xarch FMNIST=$DEVICE_DATA/fmnist OUT=$OUT/r bash bench/gpu-onnx.sh
# (carry: [".device"]). Run from the project's root after `bash scripts/setup.sh --tests`, with
# the commit to run checked in (pack.sh archives HEAD).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-/usr/bin/python3}
S=.scratch/gpu-onnx-pack
# pack.sh keeps .device/node.tar.xz (Node, fetched once); the rest is made anew.
rm -rf "$S" .device/project.tar.xz .device/data && mkdir -p "$S/data/fmnist"
"$PY" presets/cross-architecture/train_models.py --out "$S/xarch" --epochs 2 --limit 6000 --test-limit 1000 \
  2>"$S/train.log" || { tail -20 "$S/train.log"; exit 1; }
mkdir "$S/data/xarch" && cp "$S/xarch/convnext.onnx" "$S/xarch/resnet18-s0.onnx" "$S/data/xarch/"
"$PY" - "$S/data/fmnist" <<'PY'
import gzip, struct, sys
src, dst = "/usr/share/datasets/fashion-mnist", sys.argv[1]
for name, n in [("train-images-idx3-ubyte.gz", 1500), ("train-labels-idx1-ubyte.gz", 1500),
                ("t10k-images-idx3-ubyte.gz", 1000), ("t10k-labels-idx1-ubyte.gz", 1000)]:
    b = gzip.open(f"{src}/{name}").read()
    head, item = (16, 784) if "images" in name else (8, 1)  # IDX: magic, count, (rows, cols)
    with gzip.open(f"{dst}/{name}", "wb", compresslevel=9) as f:
        f.write(b[:4] + struct.pack(">I", n) + b[8:head] + b[head:head + n * item])
PY
DATA="$S/data" bash ../shared/device/pack.sh
mkdir "$S/p" && tar xJf .device/project.tar.xz -C "$S/p"
m="$S/p/p/node_modules"
rm -rf "$m/onnxruntime-node/bin/napi-v6/darwin" "$m/onnxruntime-node/bin/napi-v6/win32" \
  "$m/onnxruntime-node/bin/napi-v6/linux/arm64" "$m/protobufjs/cli" "$m/esbuild/bin/esbuild" "$m"/bare-*
tar cf - -C "$S/p" p | xz -9e -T0 >.device/project.tar.xz
rm -rf "$S/p"
total=$(($(du -sb .device | cut -f1) + $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)))
echo "carried .device plus the working tree: $((total / 1024 / 1024)) MiB of 64"
