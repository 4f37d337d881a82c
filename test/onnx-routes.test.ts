// Two routes to one model (issue 39): a torchvision ResNet-18 saved as a state dict and loaded as
// the zoo's resnet18, and the same module exported to ONNX with its batch norms kept
// (test/helpers/two_routes.py), give the same IRIs and the same stitched scores through the
// commands a user runs. And the trap on the way: the exporter's default eval export folds batch
// norm into the convolutions, which every route that reads the graph says.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { planExperiment } from "../experiments/plan.js";
import { parseExperiment } from "../experiments/spec.js";
import { loadIriSet } from "../stitch/iriset.js";
import * as torch from "../torch/index.js";
import { runCli } from "./helpers/cli.js";
import { PYTHON, skipUnlessTorchvision } from "./helpers/pytorch.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

const skip = skipUnlessTorchvision() || skipUnlessFashionMnist();
const dir = mkdtempSync(join(tmpdir(), "stitchlab-onnx-routes-"));
const file = (name: string) => join(dir, name);
after(() => rmSync(dir, { recursive: true, force: true }));
before(() => {
  if (skip) return;
  const r = spawnSync(PYTHON, [join(import.meta.dirname, "helpers", "two_routes.py"), dir], {
    encoding: "utf8",
    timeout: 300_000,
  });
  assert.equal(r.status, 0, r.stderr);
});

/** The flags that say how a model was trained: an ONNX graph needs its normalisation only, weights their architecture too. */
const modelFlags = (role: "front" | "back", route: "pt" | "onnx") => [
  `--${role}-normalization`,
  "fashion-mnist",
  ...(route === "pt" ? [`--${role}-arch`, "resnet18"] : []),
];

/** The environment of a run: the graph's no-gradient passes on the blocked path (the default) or the dense one. */
const envOf = (blocked: boolean) => (blocked ? process.env : { ...process.env, STITCHLAB_ONNX_BLOCKED: "0" });

/** IRI sets made, by folder: each route's made once. */
const irisMade = new Set<string>();

function iris(route: "pt" | "onnx", blocked = true): string {
  const out = file(`iris-${route}${blocked ? "" : "-dense"}`);
  if (irisMade.has(out)) return out;
  irisMade.add(out);
  const r = runCli(
    [
      "iris",
      "--front",
      file(`a.${route}`),
      ...modelFlags("front", route),
      "--point",
      "layer2.1",
      "--dataset",
      "fashion-mnist",
      "--limit",
      "32",
      "--steps",
      "30",
      "--out",
      out,
    ],
    { env: envOf(blocked) },
  );
  assert.equal(r.status, 0, r.stderr);
  return out;
}

/** scores.json's scores and CKA of one stitch a.ROUTE -> b.ROUTE at layer2.1. */
function stitch(route: "pt" | "onnx", mode: "standard" | "iris", blocked = true): Record<string, number> {
  const out = file(`stitch-${mode}-${route}${blocked ? "" : "-dense"}`);
  const env = envOf(blocked);
  const r = runCli(
    [
      "stitch",
      "--front",
      file(`a.${route}`),
      ...modelFlags("front", route),
      "--back",
      file(`b.${route}`),
      ...modelFlags("back", route),
      "--point",
      "layer2.1",
      "--mode",
      mode,
      ...(mode === "iris" ? ["--iris", iris(route, blocked)] : ["--limit", "128"]),
      "--objective",
      "slm",
      "--dataset",
      "fashion-mnist",
      "--test-limit",
      "128",
      "--epochs",
      "2",
      "--batch-size",
      "16",
      "--init-images",
      "64",
      "--cka-images",
      "32",
      "--out",
      out,
    ],
    { env },
  );
  assert.equal(r.status, 0, r.stderr);
  const s = JSON.parse(readFileSync(join(out, "scores.json"), "utf8"));
  return { ...s.scores, cka: s.cka };
}

describe("a torchvision ResNet-18 as a state dict in the zoo's resnet18, and exported to ONNX", { skip }, () => {
  test("gives the same IRIs: every stored pixel and every residual", () => {
    const [a, b] = [loadIriSet(iris("pt")), loadIriSet(iris("onnx", false))];
    try {
      const x = a.dataset.images.toTypedArray() as Uint8Array;
      const y = b.dataset.images.toTypedArray() as Uint8Array;
      let differ = 0;
      for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) differ++;
      // With batch norm kept, the graph runs the zoo's ATen calls in the zoo's order, and 30
      // signed steps give the same bytes here. Signed descent turns a rounding difference in a
      // near-zero gradient into a whole step, so another CPU's kernels may move a few pixels:
      // at most 1%, and the features (the residuals) within 1e-4.
      assert.ok(differ / x.length <= 0.01, `${differ} of ${x.length} pixels differ`);
      assert.equal(a.residuals.length, 32);
      for (let i = 0; i < a.residuals.length; i++)
        assert.ok(Math.abs((a.residuals[i] as number) - (b.residuals[i] as number)) < 1e-4, `residual of IRI ${i}`);
    } finally {
      for (const s of [a, b]) torch.dispose([s.dataset.images, s.dataset.labels, s.indices]);
    }
  });

  test("gives the same stitched scores, standard (batch norm adapted) and invariance-aware", () => {
    for (const mode of ["standard", "iris"] as const) {
      // The graph on the dense path runs the zoo's kernels: the same numbers.
      const [zoo, graph] = [stitch("pt", mode), stitch("onnx", mode, false)];
      // With no gradient the graph's convolutions run in oneDNN's blocked layout (models/onnx/
      // blocked.ts): the same sums in another order, and T's training amplifies the difference
      // in the front's features, and the IRIs' targets are features too (measured: 2e-5 standard,
      // 3e-4 invariance-aware agreement).
      const blocked = stitch("onnx", mode);
      for (const k of ["agreementProbability", "hardAgreement", "accuracy", "softErrorConsistency", "cka"]) {
        assert.equal(typeof zoo[k], "number", k);
        assert.ok(Math.abs((zoo[k] as number) - (graph[k] as number)) < 1e-5, `${mode} ${k}: ${zoo[k]} vs ${graph[k]}`);
        assert.ok(
          Math.abs((zoo[k] as number) - (blocked[k] as number)) < 2e-3,
          `${mode} ${k}, blocked: ${zoo[k]} vs ${blocked[k]}`,
        );
      }
    }
  });

  test("an eval-mode export folds batch norm away: layers and the plan say so, and what to export instead", () => {
    const folded = file("a-folded.onnx");
    const said =
      /a-folded\.onnx has convolutions and no BatchNormalization node, so batch-norm modes 'adapt' \(standard stitching's\) and 'batch' leave it as exported; .*training=torch\.onnx\.TrainingMode\.PRESERVE/;
    const layers = runCli(["layers", folded]);
    assert.equal(layers.status, 0, layers.stderr);
    assert.match(layers.stdout, new RegExp(`^note: ${said.source}`, "m"));
    const kept = runCli(["layers", file("a.onnx")]);
    assert.doesNotMatch(kept.stdout, /note:/, "a graph with its batch norms says nothing");
    const yaml = [
      "name: folded",
      "dataset: { name: fashion-mnist }",
      "models:",
      "  a: { checkpoint: a-folded.onnx, normalization: fashion-mnist }",
      "  b: { checkpoint: b.onnx, normalization: fashion-mnist }",
      "pairs:",
      "  - { front: a, back: b, relation: x }",
      "points: [layer2.1]",
      "objectives: [slm]",
      "",
    ].join("\n");
    writeFileSync(file("folded.yaml"), yaml);
    const plan = planExperiment(parseExperiment(yaml, file("folded.yaml")), file("folded.yaml"));
    assert.equal(plan.notes.length, 1, plan.notes.join("\n"));
    assert.match(plan.notes[0] as string, new RegExp(`^a: ${said.source}`));
  });
});
