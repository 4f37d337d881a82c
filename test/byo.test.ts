// Bring your own model: weights made elsewhere (torchvision's ResNet-18 made by Python in the
// test run) in every form training scripts save them, loaded by architecture name, with the
// options read from the weights and PyTorch's logits; mismatches that say what the weights look
// like; `stitchlab import`; the command line's and an experiment file's model sources end to
// end; and a model of another image size refused before any work.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { modelSourceFrom } from "../cli/source.js";
import { parseExperiment } from "../experiments/spec.js";
import { saveSafetensors } from "../io/safetensors.js";
import { torchLoad, torchSave } from "../io/torchsave.js";
import { loadCheckpoint, modelSourceSchema, saveCheckpoint } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import * as torch from "../torch/index.js";
import { runCli } from "./helpers/cli.js";
import { PYTHON, skipUnlessTorchvision } from "./helpers/pytorch.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

const noTorchvision = skipUnlessTorchvision();
const tmp = mkdtempSync(join(tmpdir(), "stitchlab-byo-"));
const file = (name: string) => join(tmp, name);

before(() => {
  if (noTorchvision) return;
  const r = spawnSync(PYTHON, [join(import.meta.dirname, "helpers", "foreign_reference.py"), tmp], {
    encoding: "utf8",
    cwd: tmp,
  });
  assert.equal(r.status, 0, r.stderr);
});
after(() => rmSync(tmp, { recursive: true, force: true }));

/** `stitchlab import` of the DataParallel file into file("imported") (an end-to-end test reuses it). */
const importDataParallel = () =>
  runCli([
    "import",
    file("dataparallel.pt"),
    "--arch",
    "resnet18",
    "--dataset",
    "fashion-mnist",
    "--out",
    file("imported"),
  ]);

const FORMS: [string, RegExp | null][] = [
  ["plain.pt", null],
  ["model_state_dict.pt", /'model_state_dict' \(left: epoch\)/],
  ["state_dict.pt", /'state_dict'/],
  ["model.pt", /'model' \(left: args\)/],
  ["dataparallel.pt", /'module\.' prefix \(DataParallel\)/],
  ["whole.pt", /a whole pickled torchvision\.models\.resnet\.ResNet/],
];

test("torchvision weights in every saved form load by architecture name and give PyTorch's logits", {
  skip: noTorchvision,
}, () => {
  const io = torchLoad(file("io.pt")) as { x: torch.Tensor; logits: torch.Tensor };
  // A safetensors file made elsewhere too (no stitchlab metadata, no sidecar).
  const plain = torchLoad(file("plain.pt")) as Record<string, torch.Tensor>;
  saveSafetensors(file("plain.safetensors"), plain);
  torch.dispose(Object.values(plain));
  for (const [name, unwrapped] of [...FORMS, ["plain.safetensors", null] as [string, null]]) {
    const { model, meta, notes } = loadCheckpoint({
      checkpoint: file(name),
      arch: "resnet18",
      normalization: "cifar10",
    });
    try {
      if (unwrapped) assert.match(notes.unwrapped.join("; "), unwrapped, name);
      else assert.deepEqual(notes.unwrapped, [], name);
      // Options read from the shapes: a 3x3 conv1 is the CIFAR stem, 64 channels width 1, 10 classes.
      assert.deepEqual(notes.inferred, { width: 1, stem: "cifar", numClasses: 10 }, name);
      assert.deepEqual(meta.normalization, { mean: [0.4914, 0.4822, 0.4465], std: [0.247, 0.2435, 0.2616] });
      const rel = torch.tidy(() => {
        model.eval();
        const got = torch.noGrad(() => model.forward(io.x));
        return got.sub(io.logits).norm().item() / io.logits.norm().item();
      });
      assert.ok(rel < 1e-5, `${name}: logits differ from PyTorch's by ${rel}`);
    } finally {
      model.dispose();
    }
  }
  torch.dispose([io.x, io.logits]);
});

test("a mismatch says what the weights look like, in a few lines", { skip: noTorchvision }, () => {
  const fails = (source: Parameters<typeof loadCheckpoint>[0]) => {
    try {
      loadCheckpoint(source).model.dispose();
    } catch (e) {
      return (e as Error).message;
    }
    assert.fail("expected an error");
  };
  const noArch = fails(file("plain.pt"));
  assert.match(noArch, /not a stitchlab checkpoint: name the architecture/);
  assert.match(noArch, /look like torchvision's resnet18 \(BasicBlock blocks 2-2-2-2, 10 classes\)/);
  const vgg = fails({ checkpoint: file("dataparallel.pt"), arch: "vgg16_bn" });
  assert.match(vgg, /do not fit the zoo's vgg16_bn/);
  assert.match(vgg, /look like torchvision's resnet18/);
  assert.match(vgg, /the zoo has resnet18, resnet50, vgg16_bn/);
  assert.ok(vgg.length < 800 && vgg.split("\n").length <= 6, `short: ${vgg.length} characters\n${vgg}`);
  const classes = fails({ checkpoint: file("plain.pt"), arch: "resnet18", options: { numClasses: 100 } });
  assert.match(classes, /fc\.weight: file \[10, 512\], model \[100, 512\]/);
  assert.match(classes, /the shapes say numClasses: 10/);
  // timm's names (stitchlab's ViTs use them): saved by torch.save's format, loaded as the wrong architecture.
  const vit = createModel("vit_tiny_patch4_32", { depth: 2 });
  torchSave(file("vit.pt"), vit.stateDict());
  vit.dispose();
  assert.match(
    fails({ checkpoint: file("vit.pt"), arch: "resnet18" }),
    /timm's vit_tiny_patch4_32 \(embed dim 192, 2 blocks/,
  );
  torchSave(file("list.pt"), [1, 2, 3]);
  assert.match(fails({ checkpoint: file("list.pt"), arch: "resnet18" }), /holds a list, not a state dict/);
  assert.match(fails({ checkpoint: file("nothing.pt"), arch: "resnet18" }), /checkpoint not found/);
});

test("stitchlab import writes a checkpoint after a forward check, reports the unwrapping, and refuses a used folder", {
  skip: noTorchvision,
}, () => {
  const out = file("imported");
  const r = importDataParallel();
  assert.equal(r.status, 0, r.stderr);
  // Into a pipe: one JSON line (a terminal gets the same in words; test/output.test.ts).
  const done = JSON.parse(r.stdout);
  assert.equal(done.event, "done");
  assert.match(done.notes.unwrapped.join("; "), /the 'module\.' prefix \(DataParallel\)/);
  assert.deepEqual(done.notes.inferred, { width: 1, stem: "cifar", numClasses: 10 });
  assert.deepEqual(done.check.logits, [256, 10]);
  assert.equal(done.check.data, "fashion-mnist test");
  assert.equal(done.check.readBackMaxDiff, 0);
  const meta = JSON.parse(readFileSync(join(out, "model.json"), "utf8"));
  assert.equal(meta.arch, "resnet18");
  assert.equal(meta.dataset, "fashion-mnist");
  assert.equal(meta.importedFrom.sha256.length, 64);
  // The imported checkpoint is an ordinary one: it loads by path alone, to the same weights.
  const a = loadCheckpoint(join(out, "model.safetensors")).model;
  const b = loadCheckpoint({ checkpoint: file("plain.pt"), arch: "resnet18" }).model;
  const same = Object.entries(a.stateDict()).every(([k, t]) =>
    torch.tidy(
      () =>
        t
          .sub((b.stateDict()[k] as torch.Tensor).to(t.dtype))
          .abs()
          .max()
          .item() === 0,
    ),
  );
  a.dispose();
  b.dispose();
  assert.ok(same, "the imported weights are the file's");
  const again = runCli(["import", file("plain.pt"), "--arch", "resnet18", "--dataset", "cifar10", "--out", out]);
  assert.equal(again.status, 1);
  assert.match(again.stderr, /is not empty/);
  const noStats = runCli(["import", file("plain.pt"), "--arch", "resnet18", "--out", file("x")]);
  assert.equal(noStats.status, 1);
  assert.match(noStats.stderr, /give --dataset/);
  const badOptions = runCli([
    "import",
    file("plain.pt"),
    "--arch",
    "resnet18",
    "--options",
    "[1, 2",
    "--out",
    file("y"),
  ]);
  assert.equal(badOptions.status, 1);
  assert.match(badOptions.stderr, /--options: not YAML or JSON/);
});

test("import's forward check runs the model on real test images: logits of a sane scale, accuracy recorded; data it cannot read refused first", {
  skip: skipUnlessFashionMnist(),
}, () => {
  // Weights made elsewhere (a plain state dict in a torch.save file), and the same with a head
  // scaled by 1e4: finite, so the old check (finite logits on two noise images) let them through.
  torch.manualSeed(0);
  const m = createModel("resnet18", { width: 0.0625, numClasses: 10 });
  const ok = file("tiny.pt");
  torchSave(ok, m.stateDict());
  torch.noGrad(() => m.stateDict()["fc.weight"].mul_(1e4));
  const scaled = file("tiny-scaled.pt");
  torchSave(scaled, m.stateDict());
  m.dispose();
  const args = (from: string, out: string, ...more: string[]) => [
    "import",
    from,
    "--arch",
    "resnet18",
    "--out",
    file(out),
    "--check-images",
    "64",
    ...more,
  ];

  const good = runCli(args(ok, "tiny-imported", "--dataset", "fashion-mnist"));
  assert.equal(good.status, 0, good.stderr);
  const check = JSON.parse(good.stdout).check;
  assert.equal(check.images, 64);
  assert.equal(check.data, "fashion-mnist test");
  assert.ok(check.accuracy >= 0 && check.accuracy <= 1, `accuracy ${check.accuracy}`);
  assert.ok(check.logitSpread > 0 && check.logitSpread <= 100, `spread ${check.logitSpread}`);
  assert.equal(check.readBackMaxDiff, 0);
  const meta = JSON.parse(readFileSync(join(file("tiny-imported"), "model.json"), "utf8"));
  const { readBackMaxDiff: _, ...recorded } = check;
  assert.deepEqual(meta.importedFrom.check, recorded, "the sidecar records the check");

  const bad = runCli(args(scaled, "tiny-scaled-imported", "--dataset", "fashion-mnist"));
  assert.equal(bad.status, 1, bad.stdout);
  assert.match(
    bad.stderr,
    /tiny-scaled\.pt: forward check: on 64 fashion-mnist test images the logits of one image spread over [\d.e+]+ \(the limit is 100\)/,
  );
  assert.ok(!existsSync(file("tiny-scaled-imported")), "nothing written");

  // Real images need a dataset, and a dataset that needs a root needs --root: said before any work.
  const none = runCli(args(ok, "none", "--normalization", "cifar10"));
  assert.equal(none.status, 1);
  assert.match(none.stderr, /--dataset/);
  const noRoot = runCli(args(ok, "no-root", "--dataset", "cifar10"));
  assert.equal(noRoot.status, 1);
  assert.match(noRoot.stderr, /dataset 'cifar10' needs a root \(--root\)/);
  assert.ok(!existsSync(file("no-root")));
});

test("a normalization that is empty, unknown or lacks std names the flag or key and what is expected", () => {
  const norm =
    (value: string, role: "front" | null = null) =>
    () =>
      modelSourceFrom(
        role ? { frontArch: "resnet18", frontNormalization: value } : { arch: "resnet18", normalization: value },
        role,
        "x.pt",
      );
  const expected =
    /expected a dataset's statistics \(cifar10, .*imagenet.*\), none, or \{mean: \[\.\.\.\], std: \[\.\.\.\]\} in \[0, 1\] pixel units/;
  const cases: [() => unknown, RegExp[]][] = [
    [norm(""), [/^--normalization: it is empty: /, expected]],
    [norm("weird", "front"), [/^--front-normalization: no normalisation preset for 'weird'/, expected]],
    [norm("{mean: [0.5, 0.5, 0.5]}"), [/^--normalization: std is missing: /, expected]],
    [norm("{std: [0.5, 0.5, 0.5]}", "front"), [/^--front-normalization: mean is missing: /]],
    [
      norm("{mean: [0.5, 0.5, 0.5], std: [0.5, 0.5]}"),
      [/^--normalization: mean has 3 values and std 2: one of each per channel/],
    ],
    [norm("[0.5, 0.5]"), [/^--normalization: /, expected]],
  ];
  // An experiment file names the key.
  const exp = (n: string) => () =>
    parseExperiment(
      `name: t\ndataset: { name: fashion-mnist }\nmodels:\n  a: { checkpoint: x.pt, arch: resnet18, normalization: ${n} }\npairs:\n  - { front: a, back: a, relation: identical }\n`,
      "t.yaml",
    );
  cases.push(
    [exp("{ mean: [0.5, 0.5, 0.5] }"), [/^t\.yaml: 1 problem:\n {2}models\.a\.normalization\.std: std is missing: /]],
    [exp("weird"), [/^t\.yaml: 1 problem:\n {2}models\.a\.normalization: no normalisation preset for 'weird'/]],
  );
  for (const [run, wants] of cases)
    assert.throws(run, (e: Error) => {
      for (const want of wants) assert.match(e.message, want);
      return true;
    });
  // What is right still parses.
  assert.deepEqual(
    (norm("{mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}")() as { normalization: unknown }).normalization,
    {
      mean: [0.5, 0.5, 0.5],
      std: [0.25, 0.25, 0.25],
    },
  );
  assert.equal((norm("none")() as { normalization: unknown }).normalization, "none");
});

test("a .pt that holds a bare tensor says so, and what is expected instead", () => {
  const bare = file("bare.pt");
  const t = torch.ones([3, 4]);
  torchSave(bare, t);
  t.dispose();
  assert.throws(
    () => loadCheckpoint({ checkpoint: bare, arch: "resnet18" }),
    (e: Error) => {
      assert.match(
        e.message,
        /bare\.pt holds a bare tensor \(float32 \[3, 4\]\), not a state dict or a checkpoint: save the weights with torch\.save\(model\.state_dict\(\), path\)/,
      );
      assert.doesNotMatch(e.message, /_scope/);
      return true;
    },
  );
});

test("options that mean nothing are refused before any weights are read, naming the key and what is allowed", () => {
  torch.manualSeed(0);
  const m = createModel("resnet18", { width: 0.0625, numClasses: 10 });
  const weights = file("options.pt");
  torchSave(weights, m.stateDict());
  const ckpt = file("options-ckpt/model.safetensors");
  mkdirSync(file("options-ckpt"));
  saveCheckpoint(ckpt, m, { dataset: "fashion-mnist" });
  m.dispose();
  const flags =
    (options: string, arch = "resnet18") =>
    () =>
      modelSourceFrom({ frontArch: arch, frontOptions: options }, "front", weights);
  const cases: [() => unknown, RegExp][] = [
    // timm's create_model: "__init__() got an unexpected keyword argument 'foo'".
    [
      flags("{foo: 1}"),
      /^--front-options: resnet18 has no option 'foo' \(its options: numClasses, width, stem, imageSize\)$/,
    ],
    [
      flags("{stem: weird}"),
      /^--front-options: resnet18's option stem is "weird": expected one of "cifar", "imagenet"$/,
    ],
    [flags("{numClasses: 0}"), /^--front-options: resnet18's option numClasses is 0: expected a whole number >= 1$/],
    [flags("{width: -1}"), /^--front-options: resnet18's option width is -1: expected a number > 0$/],
    [
      flags("{stem: imagenet}", "vgg16_bn"),
      /vgg16_bn has no option 'stem' \(its options: numClasses, width, imageSize\)/,
    ],
    [
      flags("{numHeads: 2.5}", "vit_tiny_patch4_32"),
      /vit_tiny_patch4_32's option numHeads is 2\.5: expected a whole number >= 1/,
    ],
    [
      flags("{pointBlocks: [0, x]}", "vit_tiny_patch4_32"),
      /option pointBlocks is \[0,"x"\]: expected a list of block indices/,
    ],
    [flags("{}", "resnet19"), /^--front-arch: unknown model 'resnet19'; known models: resnet18/],
    // A stitchlab checkpoint's options are checked against its sidecar's architecture, before its weights are read.
    [
      () => loadCheckpoint({ checkpoint: ckpt, options: { foo: 1 } }),
      /options-ckpt\/model\.safetensors: resnet18 has no option 'foo'/,
    ],
    // The same schema reads an experiment file's model entry.
    [
      () => {
        const r = modelSourceSchema.safeParse({ checkpoint: weights, arch: "resnet18", options: { stem: "weird" } });
        if (!r.success) throw new Error(`${r.error.issues[0]?.path.join(".")}: ${r.error.issues[0]?.message}`);
      },
      /^options\.stem: resnet18's option stem is "weird"/,
    ],
  ];
  // An experiment file names the model and the key (its models are trained here or loaded: the
  // entry with a checkpoint is read as loaded, and only that reading's problem is reported).
  const exp = (model: string) => () =>
    parseExperiment(
      `name: t\ndataset: { name: fashion-mnist }\nmodels:\n  a: ${model}\npairs:\n  - { front: a, back: a, relation: identical }\n`,
      "t.yaml",
    );
  cases.push(
    [
      exp(`{ checkpoint: ${weights}, arch: resnet18, options: { foo: 1 } }`),
      /^t\.yaml: 1 problem:\n {2}models\.a\.options\.foo: resnet18 has no option 'foo'/,
    ],
    [
      exp("{ arch: resnet18, options: { stem: weird } }"),
      /^t\.yaml: 1 problem:\n {2}models\.a\.options\.stem: resnet18's option stem is "weird": expected one of/,
    ],
    // And createModel itself, whoever calls it.
    [() => createModel("resnet18", { foo: 1 } as object), /^resnet18 has no option 'foo'/],
    [() => createModel("vgg16_bn", { width: 0 }), /^vgg16_bn's option width is 0: expected a number > 0$/],
  );
  for (const [run, want] of cases)
    assert.throws(run, (e: Error) => {
      assert.match(e.message, want);
      return true;
    });
  // The command refuses it before anything is read or written.
  const r = runCli([
    "import",
    weights,
    "--arch",
    "resnet18",
    "--options",
    "{foo: 1}",
    "--dataset",
    "fashion-mnist",
    "--out",
    file("options-out"),
  ]);
  assert.equal(r.status, 1);
  assert.match(r.stderr, /--options: resnet18 has no option 'foo'/);
  assert.ok(!existsSync(file("options-out")));
  // Options that mean something still load.
  const ok = loadCheckpoint({ checkpoint: weights, arch: "resnet18", options: { numClasses: 10, stem: "cifar" } });
  ok.model.dispose();
});

test("your own checkpoints from the command line and from an experiment file, end to end; another image size is refused", {
  skip: noTorchvision || skipUnlessFashionMnist(),
}, () => {
  const imported = join(file("imported"), "model.safetensors");
  if (!existsSync(imported)) {
    const r = importDataParallel();
    assert.equal(r.status, 0, r.stderr);
  }
  const small = [
    "--point",
    "layer1.0",
    "--objective",
    "slm",
    "--mode",
    "standard",
    "--limit",
    "128",
    "--test-limit",
    "64",
    "--epochs",
    "1",
    "--init-images",
    "64",
    "--cka-images",
    "0",
  ];
  const cli = runCli([
    "stitch",
    "--front",
    file("whole.pt"),
    "--front-arch",
    "resnet18",
    "--front-normalization",
    "fashion-mnist",
    "--back",
    imported,
    ...small,
    "--out",
    file("cli-run"),
  ]);
  assert.equal(cli.status, 0, cli.stderr);
  assert.ok(existsSync(join(file("cli-run"), "scores.json")));
  // A 224 px model on 32 px images: refused, naming both sizes, before anything is written.
  const big = runCli([
    "stitch",
    "--front",
    file("imagenet_stem.pt"),
    "--front-arch",
    "resnet18",
    "--front-normalization",
    "imagenet",
    "--back",
    imported,
    ...small,
    "--out",
    file("big-run"),
  ]);
  assert.equal(big.status, 1);
  assert.match(big.stderr, /the front model \(resnet18\) takes 224 x 224 images, and the data are 32 x 32/);
  assert.ok(!existsSync(join(file("big-run"), "scores.json")));
  const flag = runCli([
    "stitch",
    "--front",
    file("plain.pt"),
    "--front-arch",
    "resnet18",
    "--front-image-size",
    "0",
    "--back",
    imported,
    ...small,
    "--out",
    file("z"),
  ]);
  assert.equal(flag.status, 1);
  assert.match(flag.stderr, /--front-image-size/);

  // An experiment file whose models are a file made elsewhere and the imported checkpoint.
  writeFileSync(
    file("mine.yaml"),
    [
      "name: byo",
      "dataset: { name: fashion-mnist, limit: 256, testLimit: 64 }",
      "models:",
      "  theirs: { checkpoint: model_state_dict.pt, arch: resnet18, normalization: fashion-mnist }",
      "  mine: { checkpoint: imported/model.safetensors }",
      "pairs:",
      "  - { front: theirs, back: mine, relation: theirs-vs-mine }",
      "points: [layer1.0]",
      "objectives: [slm]",
      "modes: [standard]",
      "stitch: { limit: 128, epochs: 1, initImages: 64, ckaImages: 0 }",
      "",
    ].join("\n"),
  );
  const run = runCli(["run", file("mine.yaml"), "--out", file("exp"), "--cache", file("cache")]);
  assert.equal(run.status, 0, run.stderr);
  const csv = readFileSync(join(file("exp"), "results.csv"), "utf8")
    .trim()
    .split("\n");
  assert.equal(csv.length, 2, csv.join("\n"));
  assert.ok(existsSync(join(file("exp"), "report.html")));
  // Without normalization, a file made elsewhere is refused at planning, naming the model.
  writeFileSync(
    file("bad.yaml"),
    readFileSync(file("mine.yaml"), "utf8").replace(", normalization: fashion-mnist", ""),
  );
  const bad = runCli(["run", file("bad.yaml"), "--out", file("exp2"), "--cache", file("cache"), "--dry-run"]);
  assert.equal(bad.status, 1);
  assert.match(bad.stderr, /models\.theirs: .*give normalization/);
});
