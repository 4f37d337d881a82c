#!/usr/bin/env bash
# The Fashion-MNIST study of the method issue: narrow ResNet-18s (clean seed 0 as back; clean
# seed 1 and a Pixel-shortcut model as fronts), standard and invariance-aware SLM and FuLA at an
# early, a middle and the last stitch point. Each step is skipped when its output exists, so a
# rerun finishes what an interrupted one left. Prints the agreement-probability table at the end.
#
#   bash bench/fmnist_study.sh [OUT]      (default runs/fmnist-study; about 25 minutes on 2 cores)
#
# Scale (chosen for a 2-core CPU, recorded in OUT/scale.txt): width 0.125, 10k training images and
# 4 epochs per base model; 1,000 IRIs per (front, point) by Adam (PROTOCOL's option: lr 0.1,
# cosine, 200 steps), since the default signed steps leave residuals of 0.6-0.7; stitching on
# 1,000 images (real or IRIs) for PROTOCOL's 30 epochs; scores on 2,000 test images.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/fmnist-study}
S=./bin/stitchlab.js
WIDTH=0.125 LIMIT=10000 EPOCHS=4 IRIS=1000 TEST=2000
POINTS=(layer1.0 layer2.1 layer4.1)
mkdir -p "$OUT"
echo "width $WIDTH, base models: $LIMIT images x $EPOCHS epochs; $IRIS IRIs (adam) and $IRIS stitching images, 30 epochs; $TEST test images" >"$OUT/scale.txt"

train() { # name seed [extra...]
  local name=$1 seed=$2; shift 2
  [ -f "$OUT/$name/model.json" ] || $S train --model resnet18 --width $WIDTH --dataset fashion-mnist --limit $LIMIT \
    --test-limit $TEST --epochs $EPOCHS --seed "$seed" --out "$OUT/$name" "$@" | tail -1
}
train clean-s0 0
train clean-s1 1
train pixel-s0 0 --shortcut pixel

for front in clean-s1 pixel-s0; do
  for p in "${POINTS[@]}"; do
    iris="$OUT/iris/$front/$p"
    [ -f "$iris/iris.json" ] || $S iris --front "$OUT/$front/model.safetensors" --point "$p" --limit $IRIS \
      --optimizer adam --out "$iris" | tail -1
    for obj in slm fula; do
      for mode in standard iris; do
        run="$OUT/stitch/$front/$p/$obj-$mode"
        extra=()
        [ "$mode" = iris ] && extra=(--iris "$iris")
        [ -f "$run/scores.json" ] || $S stitch --front "$OUT/$front/model.safetensors" --back "$OUT/clean-s0/model.safetensors" \
          --point "$p" --objective $obj --mode $mode "${extra[@]}" --limit $IRIS --test-limit $TEST --out "$run" | tail -1
      done
    done
  done
done

node -e '
const fs = require("fs"), path = require("path");
const out = process.argv[1], points = process.argv.slice(2);
const acc = (n) => JSON.parse(fs.readFileSync(path.join(out, n, "model.json"), "utf8")).accuracies.clean;
console.log(`base accuracies (clean test): clean-s0 ${acc("clean-s0")}, clean-s1 ${acc("clean-s1")}, pixel-s0 ${acc("pixel-s0")}`);
console.log(`| front | objective | mode | ${points.join(" | ")} |`);
console.log(`|---|---|---|${points.map(() => "---").join("|")}|`);
for (const front of ["clean-s1", "pixel-s0"]) for (const obj of ["slm", "fula"]) for (const mode of ["standard", "iris"]) {
  const cells = points.map((p) => JSON.parse(fs.readFileSync(path.join(out, "stitch", front, p, `${obj}-${mode}`, "scores.json"), "utf8")).scores.agreementProbability.toFixed(3));
  console.log(`| ${front} | ${obj} | ${mode} | ${cells.join(" | ")} |`);
}
console.log("IRI residuals (mean / median / p90):");
for (const front of ["clean-s1", "pixel-s0"]) console.log(`  ${front}: ` + points.map((p) => {
  const r = JSON.parse(fs.readFileSync(path.join(out, "iris", front, p, "iris.json"), "utf8")).residuals;
  return `${p} ${r.mean.toFixed(3)} / ${r.median.toFixed(3)} / ${r.p90.toFixed(3)}`;
}).join(", "));
' "$OUT" "${POINTS[@]}" | tee "$OUT/table.md"
