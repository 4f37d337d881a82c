// ONNX graphs as models (models/onnx/): every classification model issue 39 names, exported by
// PyTorch (test/helpers/onnx_models.py, random weights, small inputs), run by our interpreter and
// checked against two oracles: onnxruntime at the logits and at every cut, and PyTorch autograd
// for the gradients IRIs and stitching need (input, the features at a stitch point through the
// back's tail, the classifier's weight). Then what a user meets: the zoo's point names, a back
// run from a cut alone at a batch size the load never saw, batch norm as modules, the refusals.
// STITCHLAB_TEST_DEVICE=cuda runs the per-model checks on a GPU (bench/gpu-onnx.sh) against the same
// CPU oracles, with cuDNN's TF32 off so that 1e-4 is a fair bar (torch/runtime.ts cudnn).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import * as ort from "onnxruntime-node";
import { isStitchlabCheckpoint, loadCheckpoint } from "../models/checkpoint.js";
import { importModel } from "../models/import.js";
import { blockedNodes } from "../models/onnx/blocked.js";
import { fuseLinear, storedDims } from "../models/onnx/fuse.js";
import { OnnxModel } from "../models/onnx/model.js";
import { OPS, type OpCall, type OpFn } from "../models/onnx/ops.js";
import { type NodeProto, onnx } from "../models/onnx/proto.js";
import { BatchNorm2d } from "../nn/layers.js";
import * as torch from "../torch/index.js";
import { PYTHON, skipUnlessTorchvision } from "./helpers/pytorch.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

type Tensor = torch.Tensor;

const SCRIPT = join(dirname(fileURLToPath(import.meta.url)), "helpers", "onnx_models.py");
const MODELS = [
  "resnet18",
  "resnet18_bn",
  "resnet50",
  "vgg16_bn",
  "mobilenet_v3_small",
  "efficientnet_b0",
  "convnext_tiny",
  "regnet_y_400mf",
  "densenet121",
  "vit_b_16",
  "swin_t",
  "timm_vit",
];
/** At opset 13 LayerNormalization does not exist yet: the exporter writes it as ReduceMean, Sub, Pow, Sqrt and Div. */
const OPSET_13 = ["resnet18", "convnext_tiny", "vit_b_16", "swin_t", "timm_vit"];
const skip = skipUnlessTorchvision();

interface Reference {
  side: number;
  point: string;
  weight: string;
  x: number[];
  r: number[];
  logits: number[];
  logits_shape: number[];
  dx: number[];
  dh: number[];
  h_shape: number[];
  dw: number[];
  w_shape: number[];
}

/** max |a - b| / max |b|: the error relative to the reference's scale. */
function relError(ours: ArrayLike<number>, ref: ArrayLike<number>): number {
  assert.equal(ours.length, ref.length, "sizes differ");
  let diff = 0;
  let scale = 1e-12;
  for (let i = 0; i < ref.length; i++) {
    diff = Math.max(diff, Math.abs((ours[i] as number) - (ref[i] as number)));
    scale = Math.max(scale, Math.abs(ref[i] as number));
  }
  return diff / scale;
}
const values = (t: Tensor) => t.detach().float().cpu().toTypedArray() as Float32Array;
/** Where the per-model checks run: the CPU, or STITCHLAB_TEST_DEVICE (cuda on a GPU machine). */
const DEVICE = torch.parseDevice(process.env.STITCHLAB_TEST_DEVICE || "cpu");

/** How many times f reads a tensor's values to the host (Tensor.toTypedArray, what ops.ts hostValues calls). */
function hostReads(f: () => void): number {
  const proto = torch.Tensor.prototype as { toTypedArray: (...a: unknown[]) => unknown };
  const toTypedArray = proto.toTypedArray;
  let reads = 0;
  proto.toTypedArray = function (this: Tensor, ...a: unknown[]) {
    reads++;
    return toTypedArray.apply(this, a);
  };
  try {
    f();
  } finally {
    proto.toTypedArray = toTypedArray;
  }
  return reads;
}

/** onnxruntime's values of the named tensors (added as graph outputs) for input x. */
async function ortValues(file: string, x: Tensor, names: string[]): Promise<Record<string, Float32Array>> {
  const proto = onnx.ModelProto.decode(readFileSync(file));
  const graph = proto.graph as NonNullable<typeof proto.graph>;
  for (const n of names)
    if (!(graph.output ?? []).some((o) => o.name === n)) graph.output?.push(onnx.ValueInfoProto.create({ name: n }));
  const session = await ort.InferenceSession.create(onnx.ModelProto.encode(proto).finish());
  const input = session.inputNames[0] as string;
  const out = await session.run({ [input]: new ort.Tensor("float32", values(x), x.shape as number[]) });
  return Object.fromEntries(names.map((n) => [n, out[n]?.data as Float32Array]));
}

let root = "";
const dirs: Record<number, string> = {};
before(() => {
  if (skip) return;
  if (torch.isCuda(DEVICE)) {
    torch.requireDevice(DEVICE);
    torch.cudnn.allowTF32(false);
  }
  root = mkdtempSync(join(tmpdir(), "stitchlab-onnx-"));
  // onnxruntime's telemetry leaves an empty mat-debug-<pid>.log in the temporary folder of the
  // first session a process makes: here, in this test's own folder, removed after.
  process.env.TMPDIR = root;
  for (const [opset, names] of [
    [17, MODELS],
    [13, OPSET_13],
  ] as const) {
    dirs[opset] = join(root, String(opset));
    mkdirSync(dirs[opset] as string);
    const r = spawnSync(PYTHON, [SCRIPT, dirs[opset] as string, String(opset), ...names], {
      encoding: "utf8",
      timeout: 300_000,
    });
    if (r.status !== 0)
      throw new Error(`${SCRIPT} failed (status ${r.status}): ${r.error?.message ?? ""}\n${r.stderr}`);
  }
});
after(() => {
  if (root) rmSync(root, { recursive: true, force: true });
});
const dir = () => dirs[17] as string;

describe("torchvision's classification models (and a timm-style ViT) exported by PyTorch", { skip }, () => {
  for (const [opset, name] of [...MODELS.map((m) => [17, m] as const), ...OPSET_13.map((m) => [13, m] as const)]) {
    test(`${name} at opset ${opset}: logits and every cut match onnxruntime; gradients match PyTorch autograd`, async () => {
      const file = join(dirs[opset] as string, `${name}.onnx`);
      const ref = JSON.parse(readFileSync(join(dirs[opset] as string, `${name}.json`), "utf8")) as Reference;
      const model = new OnnxModel(file);
      try {
        model.eval().to(DEVICE);
        // Moved again to where it is (on a GPU, "cuda" names the tensors' cuda:0): the same
        // tensors stay, so handles held to them (an optimiser's) stay valid.
        const held = model.parameters();
        model.to(DEVICE);
        assert.ok(
          model.parameters().every((p, i) => p === held[i]),
          `moving to ${DEVICE} again keeps the parameters`,
        );
        assert.equal(model.config.imageSize, ref.side);
        assert.equal(model.config.numClasses, 10);
        // A ViT's and a ConvNeXt's linear layers (MatMul and Add as exported) run as one linear
        // each, every one (a bias shared through Identity: the storedDims test below).
        if (/vit|convnext/.test(name)) {
          const byOutput = new Map(model.facts.nodes.flatMap((n) => n.outputs.map((o) => [o, n] as const)));
          const unfused = model.facts.nodes.filter(
            (n) =>
              n.opType === "Add" &&
              n.inputs.some((i) => byOutput.get(i)?.opType === "MatMul" && byOutput.get(i)?.inputs.length === 2),
          );
          assert.ok(
            model.facts.nodes.some((n) => n.opType === "MatMul" && n.inputs.length === 3),
            "MatMul and Add fused",
          );
          assert.deepEqual(
            unfused.map((n) => n.name),
            [],
            "no Add reads an unfused MatMul's product",
          );
        }
        // Three images: the load probed one and two, so a shape read from the batch is tested here.
        const x = torch.tidy(() => torch.rand([3, 3, ref.side, ref.side]).to(DEVICE));
        const cuts = model.cutList();
        const oracle = await ortValues(file, x, [...cuts.map((c) => c.tensor), model.facts.output]);
        const points = cuts.filter((c) => c.point).map((c) => c.name);
        const ours = torch.noGrad(() => model.forwardIntermediates(x, points));
        // A channels-last cut (a Swin's stages) is a point as [N, C, H, W]; the graph holds [N, H, W, C].
        const asGraph = (t: Tensor, channelsLast: boolean) => (channelsLast ? t.permute(0, 2, 3, 1).contiguous() : t);
        for (const c of cuts.filter((c) => c.point)) {
          const err = relError(
            values(asGraph(ours.features[c.name] as Tensor, c.channelsLast)),
            oracle[c.tensor] as Float32Array,
          );
          assert.ok(err < 1e-4, `${c.name} (${c.tensor}): relative error ${err}`);
        }
        assert.ok(relError(values(ours.logits), oracle[model.facts.output] as Float32Array) < 1e-4, "logits");
        torch.dispose([ours.features, ours.logits]);

        // The back from a cut alone (no front nodes run again) gives the whole graph's logits.
        const middle = model.stitchPoints[Math.floor(model.stitchPoints.length / 2)]?.name as string;
        const back = torch.noGrad(() => torch.tidy(() => model.forwardFrom(model.forwardTo(x, middle), middle)));
        assert.ok(relError(values(back), oracle[model.facts.output] as Float32Array) < 1e-4, `back from ${middle}`);

        // A pass at a batch size run before reads nothing back to the host (ops.ts hostValues): on
        // a GPU each read would wait for the device, and none may happen in a CUDA graph's capture.
        const reads = hostReads(() => {
          torch.tidy(() => void torch.noGrad(() => model.forward(x)));
          torch.tidy(() => void torch.noGrad(() => model.forwardFrom(model.forwardTo(x, middle), middle)));
        });
        assert.equal(reads, 0, "values read to the host in a second pass");

        // PyTorch autograd on the same weights and input.
        const xr = torch.tensor(ref.x, { shape: [2, 3, ref.side, ref.side] }).to(DEVICE);
        const r = torch.tensor(ref.r, { shape: ref.logits_shape }).to(DEVICE);
        const point = cuts.find((c) => c.name === ref.point || c.aliases.includes(ref.point));
        assert.ok(point?.point, `${ref.point} is a stitch point (cuts: ${cuts.map((c) => c.name).join(", ")})`);
        const weight = model.namedParameters().find(([k]) => k.endsWith(`.${ref.weight}`))?.[1];
        assert.ok(weight, `the classifier's weight ${ref.weight} is a parameter`);
        const xg = xr.detach().requiresGrad_(true);
        const logits = model.forward(xg);
        assert.ok(relError(values(logits), ref.logits) < 1e-4, "logits against PyTorch");
        const [dx, dw] = torch.grad(logits.mul(r).sum(), [xg, weight]) as Tensor[];
        assert.ok(relError(values(dx as Tensor), ref.dx) < 1e-4, `d/dx: ${relError(values(dx as Tensor), ref.dx)}`);
        assert.ok(relError(values(dw as Tensor), ref.dw) < 1e-4, `d/d${ref.weight}`);
        const h = torch.noGrad(() => model.forwardTo(xr, point.name)).requiresGrad_(true);
        assert.deepEqual(asGraph(h, point.channelsLast).shape, ref.h_shape);
        const [dh] = torch.grad(model.forwardFrom(h, point.name).mul(r).sum(), [h]) as Tensor[];
        const err = relError(values(asGraph(dh as Tensor, point.channelsLast)), ref.dh);
        assert.ok(err < 1e-4, `d/dh at ${point.name}, through the back's tail: ${err}`);
        torch.dispose([x, back, xr, r, xg, logits, dx, dw, h, dh]);
      } finally {
        model.dispose();
      }
    });
  }

  test("a forward pass with no gradient runs convolutions blocked (oneDNN's layout): the dense path's values, packed weights renewed when written", () => {
    // Batch norms kept as nodes, their statistics away from the identity (onnx_models.py), so that
    // one folded into its convolution (blocked.ts), or applied twice, shows.
    const model = new OnnxModel(join(dir(), "resnet18_bn.onnx"));
    const dense = <T>(f: () => T): T => {
      process.env.STITCHLAB_ONNX_BLOCKED = "0";
      try {
        return f();
      } finally {
        delete process.env.STITCHLAB_ONNX_BLOCKED;
      }
    };
    try {
      model.eval();
      const x = torch.rand([4, 3, 32, 32]);
      // A point at a convolution's output is the convolution's, never its batch norm's.
      const conv1 = torch.noGrad(() => model.forwardTo(x, "conv1"));
      const conv1Dense = dense(() => torch.noGrad(() => model.forwardTo(x, "conv1")));
      assert.ok(relError(values(conv1), values(conv1Dense)) < 1e-5, "conv1");
      torch.dispose([conv1, conv1Dense]);
      const run = () => torch.noGrad(() => model.forwardIntermediates(x, ["layer2.1"]));
      const before = blockedNodes.count;
      const fast = run();
      // Under AVX2 too (DNNL_MAX_CPU_ISA=AVX2, as `npm test` stands in for an AVX2 CPU): oneDNN's
      // blocked kernels ran clean there under malloc checks (blocked.ts blockedUsable).
      assert.ok(blockedNodes.count - before >= 20, `${blockedNodes.count - before} nodes ran blocked`);
      const slow = dense(run);
      assert.ok(relError(values(fast.logits), values(slow.logits)) < 1e-5, "logits");
      const f = fast.features["layer2.1"] as Tensor;
      assert.equal(f.isMkldnn(), false, "a point leaves the graph dense");
      assert.ok(relError(values(f), values(slow.features["layer2.1"] as Tensor)) < 1e-5, "layer2.1");
      // A weight written in place (an optimiser's step, a loaded state dict) is packed again.
      const conv = model.namedParameters().find(([, w]) => w.shape.length === 4)?.[1];
      assert.ok(conv, "a convolution's weight");
      torch.noGrad(() => conv.mul_(0.5));
      const written = torch.noGrad(() => model.forward(x));
      const writtenDense = dense(() => torch.noGrad(() => model.forward(x)));
      assert.ok(relError(values(written), values(writtenDense)) < 1e-5, "after an in-place write");
      assert.ok(relError(values(written), values(slow.logits)) > 1e-3, "the write changed the logits");
      // A batch norm's statistics written in place: the convolution it was folded into is folded again.
      const variance = model.namedBuffers().find(([k]) => k.endsWith("running_var"))?.[1];
      assert.ok(variance, "a running variance");
      torch.noGrad(() => variance.mul_(2));
      const rescaled = torch.noGrad(() => model.forward(x));
      const rescaledDense = dense(() => torch.noGrad(() => model.forward(x)));
      assert.ok(relError(values(rescaled), values(rescaledDense)) < 1e-5, "after a batch norm's statistics change");
      assert.ok(relError(values(rescaled), values(written)) > 1e-4, "the statistics changed the logits");
      // With a gradient, or batch norm on batch statistics (standard stitching's adapt), the dense path.
      const counted = blockedNodes.count;
      const xg = x.detach().requiresGrad_(true);
      const withGrad = model.forward(xg);
      assert.equal(blockedNodes.count, counted, "nothing blocked where autograd records");
      assert.ok(relError(values(withGrad), values(rescaledDense)) < 1e-5, "with a gradient");
      model.train();
      const adapt = torch.noGrad(() => model.forward(x));
      const adaptDense = dense(() => torch.noGrad(() => model.forward(x)));
      assert.ok(relError(values(adapt), values(adaptDense)) < 1e-5, "batch statistics");
      // Those passes moved the running statistics (standard stitching's adapt) through batch
      // norm's kernel, which bumps no version: back in eval mode the folds follow them.
      model.eval();
      const adapted = torch.noGrad(() => model.forward(x));
      const adaptedDense = dense(() => torch.noGrad(() => model.forward(x)));
      assert.ok(relError(values(adapted), values(adaptedDense)) < 1e-5, "after the running statistics moved");
      assert.ok(relError(values(adapted), values(rescaledDense)) > 1e-4, "the statistics moved");
      torch.dispose([adapted, adaptedDense]);
      // A move frees the packed weights (to CUDA they would be for tensors left behind; to the CPU,
      // the one device here, they are packed again on the next pass). Only where anything was packed.
      if (torch.onednnAvx512()) {
        assert.ok(model.packed.size > 0, "weights packed");
        model.to("cpu");
        assert.equal(model.packed.size, 0, "nothing packed for tensors left behind");
      }
      const moved = torch.noGrad(() => model.forward(x));
      const movedDense = dense(() => torch.noGrad(() => model.forward(x)));
      assert.ok(relError(values(moved), values(movedDense)) < 1e-5, "after a move");
      torch.dispose([moved, movedDense]);
      torch.dispose([
        rescaled,
        rescaledDense,
        x,
        fast.logits,
        fast.features,
        slow.logits,
        slow.features,
        written,
        writtenDense,
        xg,
        withGrad,
        adapt,
        adaptDense,
      ]);
    } finally {
      model.dispose();
    }
  });

  test("an exported torchvision ResNet-18 has the zoo's stitch points", () => {
    const model = new OnnxModel(join(dir(), "resnet18.onnx"));
    try {
      const names = model.stitchPoints.map((p) => p.name);
      for (const p of ["layer1.0", "layer1.1", "layer2.0", "layer2.1", "layer3.0", "layer3.1", "layer4.0", "layer4.1"])
        assert.ok(names.includes(p), `${p} in ${names.join(", ")}`);
      assert.deepEqual(model.stitchPoint("layer2.1"), {
        kind: "cnn",
        name: "layer2.1",
        channels: 128,
        height: 4,
        width: 4,
      });
      assert.equal(model.stitchPoint("head").channels, 512);
      // The pooled map before Flatten is the head's input in another shape: layer4.1 stays the last map point.
      assert.equal(names.at(-1), "layer4.1");
      assert.throws(() => model.stitchPoint("avgpool"), /'avgpool' is the head's input in another shape: give 'head'/);
      // timm's feature name of the stage, listed by `layers` as another name of its last block.
      assert.throws(() => model.stitchPoint("layer2"), /'layer2' ends at the stitch point 'layer2\.1': give that name/);
    } finally {
      model.dispose();
    }
  });

  test("on the GPU where this libtorch sees one (bench/gpu.sh), else the CPU: a moved graph gives the CPU's logits and input gradient", (t) => {
    const device: torch.Device = torch.cuda.isAvailable() ? "cuda" : "cpu";
    // Full float32 convolutions on the GPU for a 1e-4 bar (TF32 rounds to a 10-bit mantissa).
    const tf32 = torch.cudnn.allowTF32();
    torch.cudnn.allowTF32(false);
    t.after(() => void torch.cudnn.allowTF32(tf32));
    for (const name of ["vit_b_16", "swin_t", "densenet121"]) {
      const model = new OnnxModel(join(dir(), `${name}.onnx`)).eval();
      try {
        const side = model.config.imageSize as number;
        const x = torch.rand([2, 3, side, side]);
        const run = () => {
          const xg = x.to(device).detach().requiresGrad_(true);
          const logits = model.forward(xg);
          const [g] = torch.grad(logits.sum(), [xg]) as Tensor[];
          return { logits: values(logits.cpu()), g: values((g as Tensor).cpu()) };
        };
        const cpu = run();
        model.to(device);
        const moved = run();
        assert.ok(relError(moved.logits, cpu.logits) < 1e-4, `${name} logits on ${device}`);
        assert.ok(relError(moved.g, cpu.g) < 1e-4, `${name} input gradient on ${device}`);
        x.dispose();
      } finally {
        model.dispose();
      }
    }
  });

  test("batch norm nodes are BatchNorm2d modules: train mode uses the batch's statistics", () => {
    const model = new OnnxModel(join(dir(), "densenet121.onnx"));
    try {
      const bns = model.namedModules().filter(([, m]) => m instanceof BatchNorm2d);
      assert.ok(bns.length > 50, `${bns.length} batch norms`);
      const x = torch.rand([4, 3, 32, 32]);
      const evalOut = torch.noGrad(() => model.eval().forward(x));
      const bn = bns[0]?.[1] as BatchNorm2d;
      const mean = () => values(bn.stateDict().running_mean as Tensor);
      const before = mean();
      const trainOut = torch.noGrad(() => model.train().forward(x));
      const afterStats = mean();
      assert.ok(relError(values(trainOut), values(evalOut)) > 1e-3, "train mode changes the output");
      assert.ok(relError(afterStats, before) > 0, "and updates the running statistics");
      torch.dispose([x, evalOut, trainOut]);
    } finally {
      model.dispose();
    }
  });

  test("loadCheckpoint reads an .onnx file as a model source; zoo options are refused by name", () => {
    const file = join(dir(), "resnet18.onnx");
    // resnet18.json beside it is the test's own reference, not a sidecar of `stitchlab import`.
    assert.equal(isStitchlabCheckpoint(file), false);
    const loaded = loadCheckpoint({ checkpoint: file, normalization: "cifar10" });
    try {
      assert.equal(loaded.record.arch, "onnx");
      assert.equal(loaded.record.imageSize, 32);
      assert.equal(loaded.record.numClasses, 10);
      assert.deepEqual(loaded.record.normalization?.mean, [0.4914, 0.4822, 0.4465]);
    } finally {
      loaded.model.dispose();
    }
    assert.throws(
      () => loadCheckpoint({ checkpoint: file, arch: "resnet18" }),
      /ONNX model.*leave arch \(resnet18\) out/,
    );
    assert.throws(
      () => loadCheckpoint({ checkpoint: file, options: { width: 0.5 } }),
      /options \(width\) mean nothing/,
    );
    assert.throws(() => loadCheckpoint({ checkpoint: file, imageSize: 64 }), /takes 32 px images, and imageSize 64/);
  });
});

/** A small graph built here: image [N, 3, 4, 4] -> Conv (weight w) -> each op in `ops` -> Flatten -> Gemm. */
function tinyModel(ops: string[], weightData?: { external: string }, constant?: { external: string }): Uint8Array {
  const T = onnx.TensorProto.DataType;
  const w = new Float32Array(2 * 3 * 1 * 1).map((_, i) => (i + 1) / 10);
  const weight = onnx.TensorProto.create({ name: "conv.weight", dataType: T.FLOAT, dims: [2, 3, 1, 1] });
  if (weightData) {
    weight.dataLocation = onnx.TensorProto.DataLocation.EXTERNAL;
    weight.externalData = [onnx.StringStringEntryProto.create({ key: "location", value: weightData.external })];
  } else weight.rawData = new Uint8Array(w.buffer);
  const fc = onnx.TensorProto.create({
    name: "fc.weight",
    dataType: T.FLOAT,
    dims: [5, 32],
    rawData: new Uint8Array(new Float32Array(160).fill(0.01).buffer),
  });
  const nodes = [
    onnx.NodeProto.create({ name: "/conv/Conv", opType: "Conv", input: ["image", "conv.weight"], output: ["c"] }),
  ];
  let last = "c";
  if (constant) {
    // A Constant whose value is kept as external data (onnx's convert_attribute=True), times the map.
    const value = onnx.TensorProto.create({ name: "scale", dataType: T.FLOAT, dims: [] });
    value.dataLocation = onnx.TensorProto.DataLocation.EXTERNAL;
    value.externalData = [onnx.StringStringEntryProto.create({ key: "location", value: constant.external })];
    nodes.push(
      onnx.NodeProto.create({
        name: "/scale/Constant",
        opType: "Constant",
        output: ["scale"],
        attribute: [
          onnx.AttributeProto.create({ name: "value", type: onnx.AttributeProto.AttributeType.TENSOR, t: value }),
        ],
      }),
      onnx.NodeProto.create({ name: "/scale/Mul", opType: "Mul", input: [last, "scale"], output: ["scaled"] }),
    );
    last = "scaled";
  }
  for (const [i, op] of ops.entries()) {
    nodes.push(onnx.NodeProto.create({ name: `/block.${i}/${op}`, opType: op, input: [last], output: [`t${i}`] }));
    last = `t${i}`;
  }
  nodes.push(onnx.NodeProto.create({ name: "/Flatten", opType: "Flatten", input: [last], output: ["flat"] }));
  nodes.push(
    onnx.NodeProto.create({
      name: "/fc/Gemm",
      opType: "Gemm",
      input: ["flat", "fc.weight"],
      output: ["logits"],
      attribute: [onnx.AttributeProto.create({ name: "transB", type: onnx.AttributeProto.AttributeType.INT, i: 1 })],
    }),
  );
  const dims = (d: (number | string)[]) =>
    onnx.TensorShapeProto.create({
      dim: d.map((v) => (typeof v === "number" ? { dimValue: v } : { dimParam: v })),
    });
  const value = (name: string, shape: (number | string)[]) =>
    onnx.ValueInfoProto.create({ name, type: { tensorType: { elemType: T.FLOAT, shape: dims(shape) } } });
  const model = onnx.ModelProto.create({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    producerName: "stitchlab-test",
    graph: {
      name: "tiny",
      node: nodes,
      initializer: [weight, fc],
      input: [value("image", ["N", 3, 4, 4])],
      output: [value("logits", ["N", 5])],
    },
  });
  return onnx.ModelProto.encode(model).finish();
}

describe("stitchlab import: an ONNX model becomes a checkpoint, its graph beside its sidecar", {
  skip: skip || skipUnlessFashionMnist(),
}, () => {
  test("imported once, it needs no flags after: its statistics and dataset are recorded", async () => {
    const out = join(root, "imported");
    const r = await importModel({ checkpoint: join(dir(), "resnet18.onnx"), normalization: "fashion-mnist" }, out, {
      dataset: "fashion-mnist",
      checkImages: 32,
    });
    assert.equal(r.checkpoint, join(out, "model.onnx"));
    assert.equal(r.check.readBackMaxDiff, 0);
    assert.equal(isStitchlabCheckpoint(join(out, "model.onnx")), true);
    assert.deepEqual(
      readFileSync(join(out, "model.onnx")),
      readFileSync(join(dir(), "resnet18.onnx")),
      "the graph as it was",
    );
    const loaded = loadCheckpoint(join(out, "model.onnx"));
    try {
      assert.equal(loaded.record.dataset, "fashion-mnist");
      assert.deepEqual(loaded.record.normalization?.mean, [0.286, 0.286, 0.286]);
    } finally {
      loaded.model.dispose();
    }
  });
});

describe("operators at the edges of the ONNX spec, by hand", () => {
  const run = (op: string, inputs: (Tensor | null)[], attrs: Record<string, unknown> = {}) =>
    (OPS[op] as OpFn)({ inputs, attrs: attrs as OpCall["attrs"], where: op }) as Tensor;
  const i64 = (xs: number[]) => torch.tensor(xs, { dtype: "int64" });

  test("Slice backwards clamps a start below the axis to its first element (Slice-13), and its end to before it", () => {
    const x = torch.tensor([0, 1, 2, 3, 4]);
    assert.deepEqual(run("Slice", [x, i64([-10]), i64([-(2 ** 62)]), i64([0]), i64([-1])]).tolist(), [0]);
    assert.deepEqual(run("Slice", [x, i64([10]), i64([-(2 ** 62)]), i64([0]), i64([-2])]).tolist(), [4, 2, 0]);
    assert.deepEqual(run("Slice", [x, i64([3]), i64([0]), i64([0]), i64([-1])]).tolist(), [3, 2, 1]);
  });

  test("Clip with neither bound is the identity; with one, clamps on that side", () => {
    const x = torch.tensor([-2, 0.5, 3]);
    assert.deepEqual(run("Clip", [x, null, null]).tolist(), [-2, 0.5, 3]);
    assert.deepEqual(run("Clip", [x, null, torch.tensor(1)]).tolist(), [-2, 0.5, 1]);
  });

  test("ScatterND sets the indexed rows, in data's dtype where the updates come in another (autocast's bf16)", () => {
    const data = torch.zeros([3, 2]);
    const updates = torch.tensor([1.5, 2.5]).reshape(1, 2).to("bfloat16");
    const y = run("ScatterND", [data, i64([1]).reshape(1, 1), updates]);
    assert.equal(y.dtype, "float32");
    assert.deepEqual(y.tolist(), [
      [0, 0],
      [1.5, 2.5],
      [0, 0],
    ]);
  });

  test("a shape read twice is read from the device once, and again once it is written (hostValues)", () => {
    const shape = i64([2, 3]);
    const x = torch.rand([6]);
    const twice = hostReads(() => {
      assert.deepEqual(run("Reshape", [x, shape]).shape, [2, 3]);
      assert.deepEqual(run("Reshape", [x, shape]).shape, [2, 3]);
    });
    assert.equal(twice, 1);
    torch.noGrad(() => shape.copy_(i64([3, 2])));
    const written = hostReads(() =>
      assert.deepEqual(run("Reshape", [x, shape]).shape, [3, 2], "the written values, not the remembered ones"),
    );
    assert.equal(written, 1);
  });

  test("Pad in reflect and edge mode pads a 4-d map's last axis as the spec's example does, and refuses the batch axis", () => {
    const x = torch.tensor([1, 2, 3]).reshape(1, 1, 1, 3);
    const pads = i64([0, 0, 0, 2, 0, 0, 0, 1]);
    assert.deepEqual(run("Pad", [x, pads], { mode: "reflect" }).flatten().tolist(), [3, 2, 1, 2, 3, 2]);
    assert.deepEqual(run("Pad", [x, pads], { mode: "edge" }).flatten().tolist(), [1, 1, 1, 2, 3, 3]);
    assert.throws(
      () => run("Pad", [x, i64([1, 0, 0, 0, 0, 0, 0, 0])], { mode: "reflect" }),
      /pads only the spatial axes/,
    );
  });
});

describe("what a user meets with a graph stitchlab cannot take", () => {
  const scratch = mkdtempSync(join(tmpdir(), "stitchlab-onnx-tiny-"));
  after(() => rmSync(scratch, { recursive: true, force: true }));

  test("a tiny graph runs and names its cuts by scope", () => {
    const file = join(scratch, "ok.onnx");
    writeFileSync(file, tinyModel(["Relu", "Sigmoid"]));
    const model = new OnnxModel(file);
    try {
      assert.deepEqual(
        model.stitchPoints.map((p) => p.name),
        ["conv", "block.0", "block.1"],
      );
    } finally {
      model.dispose();
    }
  });

  test("every operator stitchlab lacks is named with its nodes, in one error, before any weight is read", () => {
    const file = join(scratch, "unsupported.onnx");
    writeFileSync(file, tinyModel(["Relu", "Det", "Hardmax", "Det"]));
    assert.throws(
      () => new OnnxModel(file),
      (e: Error) =>
        /cannot run these ONNX operators: Det \(2 nodes: \/block\.1\/Det, \/block\.3\/Det\); Hardmax \(1 node: \/block\.2\/Hardmax\)/.test(
          e.message,
        ),
    );
  });

  test("external data is read from the model's folder, and refused outside it", async () => {
    const folder = join(scratch, "ext");
    mkdirSync(folder);
    const w = new Float32Array(6).map((_, i) => (i + 1) / 10);
    writeFileSync(join(folder, "weights.bin"), new Uint8Array(w.buffer));
    writeFileSync(join(folder, "inside.onnx"), tinyModel(["Relu"], { external: "weights.bin" }));
    const inside = new OnnxModel(join(folder, "inside.onnx"));
    const plain = (() => {
      writeFileSync(join(folder, "plain.onnx"), tinyModel(["Relu"]));
      return new OnnxModel(join(folder, "plain.onnx"));
    })();
    try {
      const x = torch.rand([2, 3, 4, 4]);
      assert.deepEqual(values(torch.noGrad(() => inside.forward(x))), values(torch.noGrad(() => plain.forward(x))));
    } finally {
      inside.dispose();
      plain.dispose();
    }
    writeFileSync(join(scratch, "secret.bin"), new Uint8Array(24));
    writeFileSync(join(folder, "up.onnx"), tinyModel(["Relu"], { external: "../secret.bin" }));
    assert.throws(() => new OnnxModel(join(folder, "up.onnx")), /lies outside the model's folder.*refused/);
    writeFileSync(join(folder, "abs.onnx"), tinyModel(["Relu"], { external: join(scratch, "secret.bin") }));
    assert.throws(() => new OnnxModel(join(folder, "abs.onnx")), /lies outside the model's folder.*refused/);
    await assert.rejects(
      importModel({ checkpoint: join(folder, "inside.onnx"), normalization: "none" }, join(scratch, "imported"), {
        dataset: "fashion-mnist",
      }),
      /keeps its weights in external data files: import copies one file, so give the model where it is/,
    );
    // A Constant's value kept outside the graph is confined to the folder as weights are.
    writeFileSync(join(folder, "scale.bin"), new Uint8Array(new Float32Array([2]).buffer));
    writeFileSync(join(folder, "const.onnx"), tinyModel(["Relu"], undefined, { external: "scale.bin" }));
    const scaled = new OnnxModel(join(folder, "const.onnx"));
    assert.ok(scaled.externalData, "a Constant's external value counts as external data");
    scaled.dispose();
    writeFileSync(join(folder, "const-up.onnx"), tinyModel(["Relu"], undefined, { external: "../secret.bin" }));
    assert.throws(() => new OnnxModel(join(folder, "const-up.onnx")), /lies outside the model's folder.*refused/);
    symlinkSync(join(scratch, "secret.bin"), join(folder, "link.bin"));
    writeFileSync(join(folder, "link.onnx"), tinyModel(["Relu"], { external: "link.bin" }));
    assert.throws(() => new OnnxModel(join(folder, "link.onnx")), /links outside the model's folder.*refused/);
  });

  test("bad graphs each give one clear error before anything is allocated: a cycle, a missing initializer, an absurd side, a float16 input, an opset not read", () => {
    const bad = (name: string, edit: (m: ReturnType<typeof onnx.ModelProto.decode>) => void) => {
      const m = onnx.ModelProto.decode(tinyModel(["Relu"]));
      edit(m);
      const file = join(scratch, `${name}.onnx`);
      writeFileSync(file, onnx.ModelProto.encode(m).finish());
      return file;
    };
    const graph = (m: ReturnType<typeof onnx.ModelProto.decode>) => m.graph as NonNullable<typeof m.graph>;
    // A cycle: the Relu reads its own output.
    const cycle = bad("cycle", (m) => {
      const relu = graph(m).node?.find((n) => n.opType === "Relu");
      if (relu) relu.input = ["t0"];
    });
    assert.throws(() => new OnnxModel(cycle), /node '\/block\.0\/Relu' \(Relu\) reads 't0' before any node makes it/);
    const missing = bad("missing", (m) => {
      graph(m).initializer = (graph(m).initializer ?? []).filter((t) => t.name !== "conv.weight");
    });
    assert.throws(() => new OnnxModel(missing), /reads 'conv\.weight' before any node makes it/);
    const huge = bad("huge", (m) => {
      const dims = graph(m).input?.[0]?.type?.tensorType?.shape?.dim ?? [];
      for (const d of dims.slice(2)) d.dimValue = 100_000;
    });
    assert.throws(() => new OnnxModel(huge), /an input side of 100000 px; stitchlab takes 1 to 4096 px/);
    // A graph exported in half precision takes float16 images, which stitchlab does not feed.
    const half = bad("half", (m) => {
      const t = graph(m).input?.[0]?.type?.tensorType;
      if (t) t.elemType = onnx.TensorProto.DataType.FLOAT16;
    });
    assert.throws(
      () => new OnnxModel(half),
      /half\.onnx: the input 'image' is float16; stitchlab feeds float32 images: export the model in float32/,
    );
    // The default domain written out as "ai.onnx" is the default domain.
    const named = bad("ai-onnx", (m) => {
      m.opsetImport = [{ domain: "ai.onnx", version: 17 }];
    });
    new OnnxModel(named).dispose();
    // An opset whose operators read otherwise (Softmax-11 flattened to 2-d), or that is not read yet.
    for (const version of [11, 19]) {
      const old = bad(`opset${version}`, (m) => {
        m.opsetImport = [{ domain: "", version }];
      });
      assert.throws(
        () => new OnnxModel(old),
        new RegExp(
          `opset${version}\\.onnx: ONNX opset ${version}: stitchlab reads opsets 13-18 \\(13-17 tested against onnxruntime\\); export with opset_version=17`,
        ),
      );
    }
  });

  test("a file that is not ONNX says so; a PyTorch checkpoint under .onnx says what it is", () => {
    const file = join(scratch, "junk.onnx");
    writeFileSync(file, "not a protobuf at all \u0000\u0001");
    assert.throws(() => new OnnxModel(file), /is not an ONNX model/);
    const pt = join(scratch, "model.onnx");
    writeFileSync(pt, Buffer.concat([Buffer.from([0x50, 0x4b, 0x03, 0x04]), Buffer.alloc(60)]));
    assert.throws(
      () => new OnnxModel(pt),
      /model\.onnx is a zip archive, as torch\.save writes, not an ONNX model: .*--arch/,
    );
  });
});

test("MatMul by a 2-D initializer then Add of its 1-D bias becomes one MatMul with the bias, only where nothing else reads the product", () => {
  const node = (opType: string, input: string[], output: string[], name = `${opType}_${output[0]}`) =>
    onnx.NodeProto.create({ name, opType, domain: "", input, output });
  const dims = (name: string) => ({ W: [4, 3], b: [3], b2: [1, 3], b4: [4] })[name];
  const show = (nodes: NodeProto[]) =>
    nodes.map((n) => `${n.opType}(${(n.input ?? []).join(",")})->${(n.output ?? []).join(",")}`);
  const fused = fuseLinear(
    [node("MatMul", ["x", "W"], ["p"]), node("Add", ["p", "b"], ["y"]), node("Relu", ["y"], ["z"])],
    dims,
    new Set(["z"]),
  );
  assert.deepEqual(show(fused), ["MatMul(x,W,b)->y", "Relu(y)->z"]);
  assert.equal(fused[0]?.name, "MatMul_p", "the MatMul's name (its module scope) is kept");
  assert.deepEqual(
    show(fuseLinear([node("MatMul", ["x", "W"], ["p"]), node("Add", ["b", "p"], ["y"])], dims, new Set(["y"]))),
    ["MatMul(x,W,b)->y"],
    "either operand order",
  );
  const kept = [
    // the product read twice; a bias that is not 1-D, or not the output's width; a weight that is an input; the product an output
    [node("MatMul", ["x", "W"], ["p"]), node("Add", ["p", "b"], ["y"]), node("Relu", ["p"], ["z"])],
    [node("MatMul", ["x", "W"], ["p"]), node("Add", ["p", "b2"], ["y"])],
    [node("MatMul", ["x", "W"], ["p"]), node("Add", ["p", "b4"], ["y"])],
    [node("MatMul", ["x", "v"], ["p"]), node("Add", ["p", "b"], ["y"])],
  ];
  for (const nodes of kept) assert.deepEqual(show(fuseLinear(nodes, dims, new Set(["y"]))), show(nodes));
  const asOutput = [node("MatMul", ["x", "W"], ["p"]), node("Add", ["p", "b"], ["y"])];
  assert.deepEqual(show(fuseLinear(asOutput, dims, new Set(["p", "y"]))), show(asOutput));
  // A bias shared through Identity (torch.onnx.export stores equal weights once) is a stored weight too.
  const shared = [
    node("Identity", ["b"], ["b_copy"]),
    node("Identity", ["b_copy"], ["b_copy2"]),
    node("MatMul", ["x", "W"], ["p"]),
    node("Add", ["p", "b_copy2"], ["y"]),
  ];
  const stored = storedDims(shared, [
    onnx.TensorProto.create({ name: "W", dims: [4, 3] }),
    onnx.TensorProto.create({ name: "b", dims: [3] }),
  ]);
  assert.deepEqual(stored("b_copy2"), [3]);
  assert.equal(stored("p"), undefined, "an activation is not a stored weight");
  assert.deepEqual(show(fuseLinear(shared, stored, new Set(["y"]))).slice(2), ["MatMul(x,W,b_copy2)->y"]);
  // And the fused op is ATen's linear: x W + b.
  torch.tidy(() => {
    const x = torch.rand([2, 5, 4]);
    const w = torch.rand([4, 3]);
    const b = torch.rand([3]);
    const call = { inputs: [x, w, b], attrs: {}, where: "MatMul_p" } as unknown as OpCall;
    const y = (OPS.MatMul as OpFn)(call) as Tensor;
    assert.ok(relError(values(y), values(x.matmul(w).add(b))) < 1e-6);
  });
});
