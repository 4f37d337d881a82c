// The grey stem (nn/init.ts greyStem, train/config.ts greyStem; docs/method.md "Grey data"): on
// grey images replicated to 3 channels, a model's colour response is its untrained initial noise;
// the grey stem removes it at initialisation. The oracle is the closed form: the sum of the
// stem's kernels over channels, all a grey image sees, is unchanged, so the response to grey
// images is the same and training on grey data follows the same path; a zero-sum colour image
// gets no response at all.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { trainConfigFromFlags } from "../cli/train.js";
import { taskKey } from "../experiments/cache.js";
import { loadCheckpoint } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import { greyStem } from "../nn/init.js";
import { Linear, Sequential } from "../nn/layers.js";
import { SGD } from "../nn/optim.js";
import * as torch from "../torch/index.js";
import { trainConfig } from "../train/config.js";
import { type TrainConfig, trainModel } from "../train/trainer.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

type Tensor = torch.Tensor;

const skip = skipUnlessFashionMnist();
const dir = mkdtempSync(join(tmpdir(), "stitchlab-grey-stem-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** A model's parameter by name (the stem's weight, here). */
function param(model: { namedParameters(): [string, Tensor][] }, name = "conv1.weight"): Tensor {
  const found = model.namedParameters().find(([n]) => n === name);
  assert.ok(found, `no parameter ${name}`);
  return found[1];
}

/** Largest difference between the stem's kernels of two colour channels, relative to their size. */
function channelSpread(w: Tensor): number {
  return torch.tidy(() => {
    const spread = w.sub(w.mean(1, true)).abs().max().item();
    return spread / w.abs().max().item();
  });
}

test("greyStem: equal kernels across channels, the same response to grey images, none to a zero-sum colour image", () => {
  torch.manualSeed(3);
  const model = createModel("resnet18", { numClasses: 10, width: 0.125, imageSize: 32 });
  model.eval();
  const grey = torch.rand([4, 1, 32, 32]).expand(4, 3, 32, 32).contiguous();
  // A colour image whose channels sum to zero at every pixel: only colour, no grey level.
  const d = torch.rand([4, 1, 32, 32]);
  const colour = torch.cat([d, d.neg(), torch.zerosLike(d)], 1);
  const conv1 = () => param(model);
  const before = torch.noGrad(() => model.forward(grey));
  const colourBefore = torch.noGrad(() => torch.conv2d(colour, conv1(), null, { padding: 1 }).abs().max().item());
  assert.ok(channelSpread(conv1()) > 0.1, "PyTorch's initialisation tells colours apart");

  assert.equal(greyStem(model), "conv1.weight");
  assert.ok(channelSpread(conv1()) < 1e-6, `kernels equal across channels (spread ${channelSpread(conv1())})`);
  const after_ = torch.noGrad(() => model.forward(grey));
  const diff = before.sub(after_).abs().max().item();
  assert.ok(diff < 1e-4 * before.abs().max().item(), `the response to grey images is kept (max difference ${diff})`);
  const colourAfter = torch.noGrad(() => torch.conv2d(colour, conv1(), null, { padding: 1 }).abs().max().item());
  assert.ok(colourBefore > 0.1, `the initial colour response ${colourBefore}`);
  assert.ok(colourAfter < 1e-6, `no response to a zero-sum colour image (${colourAfter})`);
  for (const t of [grey, d, colour, before, after_]) t.dispose();
  model.dispose();
});

test("greyStem finds the stem of every zoo family, and refuses a model without one", () => {
  const cases: [string, Record<string, unknown>, string][] = [
    ["vgg16_bn", { numClasses: 10, width: 0.0625, imageSize: 32 }, "features.0.weight"],
    ["vit_tiny_patch4_32", { numClasses: 10, imageSize: 32 }, "patch_embed.proj.weight"],
  ];
  for (const [arch, options, name] of cases) {
    const model = createModel(arch, options);
    assert.equal(greyStem(model), name, arch);
    const w = param(model, name);
    assert.ok(channelSpread(w) < 1e-6, arch);
    model.dispose();
  }
  const linear = new Sequential(new Linear(3, 2));
  assert.throws(() => greyStem(linear), /no layer taking 3-channel images/);
  linear.dispose();
});

test("greyStem's default: on for grey datasets, off for colour ones, in every config (so every key) either way; the flag and the file agree", () => {
  assert.equal(trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" }).greyStem, true);
  assert.equal(trainConfig({ arch: "resnet18" }, { dataset: "mnist" }).greyStem, true);
  const cifar = trainConfig({ arch: "resnet18" }, { dataset: "cifar10" });
  assert.equal(cifar.greyStem, false, "a colour dataset's config says false (issue 36: not left out)");
  assert.equal(trainConfig({ arch: "resnet18", greyStem: true }, { dataset: "cifar10" }).greyStem, true);
  const off = trainConfig({ arch: "resnet18", greyStem: false }, { dataset: "fashion-mnist" });
  assert.equal(off.greyStem, false);
  const flags = { model: "resnet18", dataset: "fashion-mnist", seed: 0, epochs: 200, batchSize: 128 };
  const key = (c: TrainConfig) => taskKey("train", { ...c, device: "cpu" });
  assert.equal(key(trainConfigFromFlags({ ...flags, greyStem: false })), key(off));
  assert.equal(
    key(trainConfigFromFlags(flags)),
    key(trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" })),
    "the default is the same from flags and from a file",
  );
  assert.notEqual(key(trainConfigFromFlags(flags)), key(off), "the grey stem is in the key");
});

test("one SGD step on grey images moves the grey-stem and the PyTorch-initialised kernels' channel sums alike", () => {
  // The closed form: the gradient of each channel's kernel is the same on grey inputs, and SGD
  // with momentum and weight decay is linear, so the sum over channels (all a grey image sees)
  // moves the same way from the same start. Random grey images, so no ReLU sits at exactly zero on
  // a flat background, where float rounding alone decides the sign (see the next test).
  const make = (grey: boolean) => {
    torch.manualSeed(4);
    const m = createModel("resnet18", { numClasses: 10, width: 0.125, imageSize: 32 });
    if (grey) greyStem(m);
    m.train();
    return m;
  };
  const models = [make(true), make(false)];
  torch.manualSeed(5);
  const x = torch.rand([16, 1, 32, 32]).expand(16, 3, 32, 32).contiguous();
  const y = torch.arange(16).remainder(10).long();
  const sums = models.map((m) => {
    const w = param(m);
    const before = torch.noGrad(() => w.sum(1));
    const opt = new SGD(m.parameters(), { lr: 0.05, momentum: 0.9, nesterov: true, weightDecay: 1e-4 });
    torch.crossEntropy(m.forward(x), y).backward();
    opt.step();
    const after_ = torch.noGrad(() => w.sum(1));
    return { before, after: after_, moved: after_.sub(before).abs().max().item() };
  });
  const start = sums[0].before.sub(sums[1].before).abs().max().item();
  const end = sums[0].after.sub(sums[1].after).abs().max().item();
  assert.ok(start < 1e-6, `the same channel sums at the start (${start})`);
  assert.ok(sums[0].moved > 1e-3, `the step moves them (${sums[0].moved})`);
  // Exact in real arithmetic. In float32 the two models' activations agree only to rounding, and
  // where a pre-activation sits within rounding of ReLU's kink, the CPU's summation order decides
  // which side it falls, and so whether its gradient counts: measured 5e-6 of the move on 2
  // threads (contiguous), 1e-4 on an AVX2 Zen 3, 1.5e-3 on one AVX-512 thread (channels-last;
  // each convolution there is within 1e-6 of float64 alone). A stem whose channel sums moved
  // differently would differ by the order of the move itself, so 1% of it separates the two.
  assert.ok(end < 1e-2 * sums[0].moved, `and moves both alike (difference ${end}, move ${sums[0].moved})`);
  for (const m of models) m.dispose();
  for (const t of [x, y, ...sums.flatMap((s) => [s.before, s.after])]) t.dispose();
});

test("trained on grey data a grey-stem model stays colour-blind; a Pixel model learns colour from its markers", {
  skip,
}, async (t) => {
  const base: TrainConfig = {
    ...trainConfig(
      { arch: "resnet18", width: 0.125, epochs: 1, batchSize: 64, lr: 0.05 },
      { dataset: "fashion-mnist" },
    ),
    limit: 512,
    testLimit: 256,
    robustEval: null,
  };
  const plain: TrainConfig = { ...base, greyStem: false };
  const grey = await trainModel(base, join(dir, "grey"));
  const pytorchInit = await trainModel(plain, join(dir, "plain"));
  const marked = await trainModel({ ...base, shortcut: "pixel", markerScale: 2 }, join(dir, "pixel"));
  const stem = (file: string) => {
    const { model } = loadCheckpoint(file);
    const w = param(model);
    const spread = channelSpread(w);
    model.dispose();
    return spread;
  };
  const [g, p, m] = [stem(grey.checkpoint), stem(pytorchInit.checkpoint), stem(marked.checkpoint)];
  t.diagnostic(`stems' colour spread: grey ${g}, PyTorch's init ${p}, Pixel ${m}`);
  assert.ok(g < 1e-5, `still colour-blind after training (${g})`);
  assert.ok(p > 0.1, "PyTorch's initialisation keeps its colour response");
  assert.ok(m > 1e-3, `a Pixel model learns colour (${m})`);
  // The trained grey-stem model is not the PyTorch-initialised one's bits: on Fashion-MNIST's flat
  // backgrounds rounding decides ReLUs at exactly zero, so any change of summation order (this
  // one, or a thread count) gives another draw of the same recipe; the step above is the oracle.
});
