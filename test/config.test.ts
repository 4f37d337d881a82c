// Every setting resolved once (issue 24): the CLI's flags and an experiment file go through the
// same schema and resolver, so the same settings give the same resolved config and the same task
// key; defaults are in the resolved config (so in the key); settings that mean nothing alone are
// refused on both paths.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { Command } from "commander";
import { irisConfigFromFlags, registerIrisCommand } from "../cli/iris.js";
import { registerStitchCommand, stitchConfigFromFlags } from "../cli/stitch.js";
import { registerTrainCommand, trainConfigFromFlags } from "../cli/train.js";
import type { Dataset } from "../data/index.js";
import { CIFAR10_NORMALIZATION } from "../data/transforms.js";
import { parseFraction, REFERENCE_ROBUST_EVAL_224 } from "../eval/config.js";
import { taskKey } from "../experiments/cache.js";
import { type IrisTask, type Plan, planExperiment, type StitchTask, type TrainTask } from "../experiments/plan.js";
import { ExperimentError, parseExperiment, readExperiment } from "../experiments/spec.js";
import { modelSourceSchema, resolveNormalization } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import { type StitchConfig, stitchConfig, stitchSettingsSchema } from "../stitch/config.js";
import { StitchedModel } from "../stitch/stitched.js";
import { recipeOf, STITCH_RECIPE_KEYS, type StitchRecipe, trainStitch } from "../stitch/train.js";
import * as torch from "../torch/index.js";
import { stitchTrainOptions } from "./helpers/stitch.js";

const root = join(import.meta.dirname, "..");
const tmp = mkdtempSync(join(tmpdir(), "stitchlab-config-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** A command's options as commander parses them from argv (parsers and defaults applied). */
function flags(register: (p: Command) => void, name: string, argv: string[]): Record<string, unknown> {
  const program = new Command();
  register(program);
  const cmd = program.commands.find((c) => c.name() === name);
  if (!cmd) throw new Error(`no command ${name}`);
  // A value a flag's parser refuses throws here (commander would end the process).
  cmd.exitOverride().configureOutput({ writeErr: () => {} });
  cmd.parseOptions(argv);
  return cmd.opts();
}

const plan = (text: string): Plan => planExperiment(parseExperiment(text, "exp.yaml"), join(tmp, "exp.yaml"));

const FILE = (extra = "", model = "") => `
name: keys
dataset: { name: fashion-mnist, limit: 1024, testLimit: 256 }
models:
  a: { arch: resnet18, width: 0.125, seed: 0, epochs: 4${model} }
pairs:
  - { front: a, back: a, relation: identical }
points: [layer1.0]
objectives: [slm]
${extra}
`;

/** Every field of a resolved config is given: null where absent, never undefined (so every default is in the key). */
function assertNoUndefined(o: unknown, path = "config"): void {
  assert.notEqual(o, undefined, `${path} is undefined`);
  if (o && typeof o === "object") for (const [k, v] of Object.entries(o)) assertNoUndefined(v, `${path}.${k}`);
}

test("train: the same settings from flags and from a file give the same resolved config and task key", () => {
  const fromFile = plan(FILE("", ", shortcut: pixel, robustEval: { steps: 20 }")).tasks.find((t) => t.kind === "train");
  assert.ok(fromFile?.spec.kind === "train");
  const argv = ["--model", "resnet18", "--dataset", "fashion-mnist", "--out", "x", "--width", "0.125", "--seed", "0"];
  const fromFlags = trainConfigFromFlags(
    flags(registerTrainCommand, "train", [
      ...argv,
      ...[
        "--epochs",
        "4",
        "--limit",
        "1024",
        "--test-limit",
        "256",
        "--shortcut",
        "pixel",
        "--robust-eval-steps",
        "20",
      ],
    ]),
  );
  assertNoUndefined(fromFlags);
  assert.deepEqual(fromFlags, fromFile.spec.config);
  assert.equal(taskKey("train", { kind: "train", config: fromFlags }), fromFile.key);
  // The file's robustEval steps on a clean model are honoured, as the flag is (it once gave 0).
  assert.equal(fromFile.spec.config.robustEval?.steps, 20);
  // Defaults are resolved into the config: the architecture's lr, the recipe's schedule, no autocast.
  assert.equal(fromFlags.lr, 0.1);
  assert.deepEqual(fromFlags.milestones, [1 / 3, 2 / 3]);
  assert.equal(fromFlags.autocast, null);
});

test("stitch and iris: the same settings from flags and from a file give the same resolved config", () => {
  const p = plan(
    FILE(
      "iris: { limit: 64, steps: 7, optimizer: adam, start: image, keepBest: true }\nstitch: { limit: 128, batchSize: 64 }",
    ),
  );
  const iris = p.tasks.map((t) => t.spec).find((s): s is IrisTask => s.kind === "iris");
  const stitches = p.tasks.map((t) => t.spec).filter((s): s is StitchTask => s.kind === "stitch");
  assert.ok(iris);
  assert.equal(stitches.length, 2);
  const common = ["--front", "f.safetensors", "--point", "layer1.0", "--dataset", "fashion-mnist", "--out", "x"];
  const fromIrisFlags = irisConfigFromFlags(
    flags(registerIrisCommand, "iris", [
      ...common,
      ...["--limit", "64", "--steps", "7", "--optimizer", "adam", "--start", "image", "--keep-best"],
    ]),
  );
  const { front: _f, device: _d, ...irisConfig } = fromIrisFlags;
  const { kind: _k, front: _ref, ...planned } = iris;
  assertNoUndefined(fromIrisFlags.options);
  assert.deepEqual(irisConfig, planned);
  for (const mode of ["standard", "iris"] as const) {
    const fromFlags = stitchConfigFromFlags(
      flags(registerStitchCommand, "stitch", [
        ...common,
        ...["--back", "b.safetensors", "--objective", "SLM", "--mode", mode, "--limit", "128", "--batch-size", "64"],
        ...["--test-limit", "256", ...(mode === "iris" ? ["--iris", "somewhere"] : [])],
      ]),
    );
    assertNoUndefined(fromFlags);
    const { front: _a, back: _b, iris: _i, device: _e, ...config } = fromFlags;
    const fromFile = stitches.find((s) => s.config.mode === mode)?.config;
    assert.deepEqual(config, fromFile, mode);
    // Epochs and batch-norm mode are resolved above the key (they were filled in below it).
    assert.equal(config.epochs, 30);
    assert.equal(config.bnMode, mode === "standard" ? "adapt" : "eval");
  }
});

test("a default is in the key: giving it changes nothing, changing it changes the key", () => {
  const keys = (extra: string) =>
    plan(FILE(extra))
      .tasks.filter((t) => t.kind === "stitch")
      .map((t) => t.key)
      .sort();
  const implicit = keys("");
  assert.deepEqual(keys("stitch: { epochs: 30, batchSize: 128, bnMode: { standard: adapt, iris: eval } }"), implicit);
  assert.notDeepEqual(keys("stitch: { epochs: 31 }"), implicit);
  // The default itself depends on the data: 12 epochs for image folders.
  const folder = stitchConfig(
    { front: "a", back: "b", frontPoint: "layer1.0", objective: "slm", mode: "standard" },
    {},
    { dataset: "imagefolder" },
  );
  assert.equal(folder.epochs, 12);
  // The lr drop of base training is in the train task's config, hence in its key.
  const train = (text: string) => plan(text).tasks.find((t) => t.kind === "train")?.key;
  assert.equal(train(FILE("", ", lr: 0.1")), train(FILE()));
  assert.notEqual(train(FILE("", ", lr: 0.05")), train(FILE()));
});

test("settings that mean nothing alone are refused, on the command line and in a file", () => {
  const train = (...extra: string[]) =>
    trainConfigFromFlags(
      flags(registerTrainCommand, "train", [
        "--model",
        "resnet18",
        "--dataset",
        "fashion-mnist",
        "--out",
        "x",
        ...extra,
      ]),
    );
  assert.throws(
    () => train("--eps", "8/255", "--pgd-steps", "3"),
    /--pgd-steps: these are for adversarial training: add --adversarial/,
  );
  assert.throws(() => train("--eps", "8/255"), /--eps is the radius of --adversarial training: add --adversarial/);
  assert.throws(() => train("--temperature", "0.2"), /are for --method simclr/);
  assert.equal(train("--adversarial", "--pgd-steps", "3").adversarial?.steps, 3);
  assert.equal(train("--adversarial").robustEval?.steps, 100, "adversarial models get AutoAttack's budget");
  assert.equal(train().robustEval, null, "clean models: none unless asked");
  assert.equal(train("--method", "simclr").simclr?.temperature, 0.5);
  assert.throws(() => train("--model", "resnet19"), /'--model <name>' argument 'resnet19' is invalid\. .*resnet18/);
  assert.throws(
    () => plan(FILE("", ", simclr: { temperature: 0.2 }")),
    (e: unknown) => e instanceof ExperimentError && /models\.a: simclr settings are for method simclr/.test(e.message),
  );
  const stitch = (...extra: string[]) =>
    stitchConfigFromFlags(
      flags(registerStitchCommand, "stitch", [
        ...["--front", "f", "--back", "b", "--point", "layer1.0", "--objective", "slm", "--mode", "standard"],
        ...["--dataset", "fashion-mnist", "--out", "x", ...extra],
      ]),
    );
  assert.throws(() => stitch("--pgd-steps", "3"), /--pgd-steps: these are for adversarial stitching/);
  assert.throws(() => stitch("--robust-eval-steps", "3"), /--robust-eval-steps: these are for the robust evaluation/);
  assert.throws(() => stitch("--eps", "4/255"), /--eps is the radius/);
  assert.equal(stitch("--adversarial").adversarial?.fraction, 1, "stitching's attack ratio is 1");
  assert.equal(stitch("--robust-eval", "--robust-eval-steps", "20").robustEval?.steps, 20);
  assert.equal(stitch().robustEval, null);
});

test("normalization none: [0, 1] pixels as they are (the reference's 32 px models), wherever a model source takes one", () => {
  assert.deepEqual(resolveNormalization("none"), { mean: [0, 0, 0], std: [1, 1, 1] });
  assert.deepEqual(modelSourceSchema.parse({ checkpoint: "x.pt", normalization: "none" }).normalization, "none");
  assert.throws(() => resolveNormalization("nones"), /no normalisation preset for 'nones' \(known: .*none/);
});

test("normalisation in 0-255 units is refused, naming the flag or key", () => {
  const r = modelSourceSchema.safeParse({
    checkpoint: "x.pt",
    normalization: { mean: [125.3, 123, 113.9], std: [63, 62, 66.7] },
  });
  assert.equal(r.success, false);
  assert.match(JSON.stringify(r.error?.issues), /\[0, 1\] pixel units \(divide 0-255 values by 255\)/);
  assert.equal(
    modelSourceSchema.safeParse({
      checkpoint: "x.pt",
      normalization: { mean: [0.49, 0.48, 0.45], std: [0.25, 0.24, 0.26] },
    }).success,
    true,
  );
  const program = new Command();
  registerStitchCommand(program);
  const stitch = program.commands.find((c) => c.name() === "stitch");
  stitch?.parseOptions([
    "--front",
    "f.pt",
    "--front-arch",
    "resnet18",
    "--front-normalization",
    "{mean: [128, 128, 128], std: [64, 64, 64]}",
  ]);
  assert.throws(
    () =>
      stitchConfigFromFlags({
        ...stitch?.opts(),
        back: "b",
        point: "layer1.0",
        objective: "slm",
        mode: "standard",
        dataset: "fashion-mnist",
      }),
    /--front-normalization: .*\[0, 1\] pixel units/,
  );
  // --normalization (and --arch) give both models', as compare's do; a role's own flag wins.
  const both = stitchConfigFromFlags(
    flags(registerStitchCommand, "stitch", [
      ...["--front", "f.pt", "--back", "b.pt", "--arch", "resnet18", "--normalization", "cifar10"],
      ...[
        "--back-normalization",
        "none",
        "--point",
        "layer1.0",
        "--objective",
        "slm",
        "--dataset",
        "fashion-mnist",
        "--out",
        "x",
      ],
    ]),
  );
  assert.deepEqual(both.front, { checkpoint: "f.pt", arch: "resnet18", normalization: "cifar10" });
  assert.deepEqual(both.back, { checkpoint: "b.pt", arch: "resnet18", normalization: "none" });
  // A bad value given once for both is named by the flag given, not by a role's.
  assert.throws(
    () =>
      stitchConfigFromFlags(
        flags(registerStitchCommand, "stitch", [
          ...["--front", "f.pt", "--back", "b.pt", "--arch", "resnet18", "--point", "layer1.0", "--objective", "slm"],
          ...[
            "--normalization",
            "{mean: [128, 128, 128], std: [64, 64, 64]}",
            "--dataset",
            "fashion-mnist",
            "--out",
            "x",
          ],
        ]),
      ),
    /Error: --normalization: .*\[0, 1\] pixel units/,
  );
});

test("the markers' strength is a data setting: --marker-scale and a file's dataset.markerScale resolve alike, into every task that marks", () => {
  const fromFile = plan(FILE("", ", shortcut: pixel").replace("testLimit: 256 }", "testLimit: 256, markerScale: 2 }"));
  const train = fromFile.tasks.find((t) => t.kind === "train");
  assert.ok(train?.spec.kind === "train");
  assert.equal(train.spec.config.markerScale, 2);
  const argv = ["--model", "resnet18", "--dataset", "fashion-mnist", "--out", "x", "--width", "0.125", "--seed", "0"];
  const fromFlags = trainConfigFromFlags(
    flags(registerTrainCommand, "train", [
      ...argv,
      ...["--epochs", "4", "--limit", "1024", "--test-limit", "256", "--shortcut", "pixel", "--marker-scale", "2"],
    ]),
  );
  assert.equal(taskKey("train", { kind: "train", config: fromFlags }), train.key);
  const scaleOf = (p: Plan) =>
    p.tasks
      .filter((t) => t.spec.kind !== "train")
      .map((t) =>
        t.spec.kind === "iris" ? t.spec.markerScale : t.spec.kind === "stitch" ? t.spec.config.markerScale : 0,
      );
  // The identical pair's data are clean: its IRI and stitch tasks ignore the strength (shared keys).
  assert.deepEqual([...new Set(scaleOf(fromFile))], [1]);
  const marked = plan(
    FILE("", ", shortcut: pixel")
      .replace("testLimit: 256 }", "testLimit: 256, markerScale: 2 }")
      .replace("relation: identical }", "relation: identical, shortcut: pixel }"),
  );
  assert.deepEqual([...new Set(scaleOf(marked))], [2]);
  assert.notEqual(plan(FILE("", ", shortcut: pixel")).tasks.find((t) => t.kind === "train")?.key, train.key);
  // A clean model's key does not depend on the markers' strength.
  const cleanKey = (scale: number) =>
    plan(FILE().replace("testLimit: 256 }", `testLimit: 256, markerScale: ${scale} }`)).tasks.find(
      (t) => t.kind === "train",
    )?.key;
  assert.equal(cleanKey(2), cleanKey(1));
});

test("the reference's robust-evaluation settings are a named choice, resolved into their numbers (so into the key), from flags and from a file alike", () => {
  const reference = { attack: "apgd", eps: 8 / 255, steps: 20, stepSize: 2 / 255 };
  const stitches = (extra: string) =>
    plan(FILE(extra))
      .tasks.map((t) => t.spec)
      .filter((s): s is StitchTask => s.kind === "stitch");
  const keys = (extra: string) =>
    plan(FILE(extra))
      .tasks.filter((t) => t.kind === "stitch")
      .map((t) => t.key)
      .sort();
  // A stitch: the file's `robustEval: { settings: reference }` and the flag give one config.
  const fromFile = stitches("stitch: { robustEval: { settings: reference } }").find(
    (s) => s.config.mode === "standard",
  )?.config;
  assert.deepEqual(fromFile?.robustEval, reference);
  const fromFlags = stitchConfigFromFlags(
    flags(registerStitchCommand, "stitch", [
      ...["--front", "f.safetensors", "--back", "b.safetensors", "--point", "layer1.0", "--objective", "slm"],
      ...["--mode", "standard", "--dataset", "fashion-mnist", "--out", "x", "--test-limit", "256"],
      ...["--robust-eval", "--robust-eval-settings", "reference"],
    ]),
  );
  const { front: _a, back: _b, iris: _i, device: _e, ...config } = fromFlags;
  assertNoUndefined(fromFlags);
  assert.deepEqual(config, fromFile);
  // The name is resolved away: the same numbers spelt out are the same task; AutoAttack's are not.
  assert.deepEqual(
    keys(`stitch: { robustEval: { settings: reference } }`),
    keys(`stitch: { robustEval: { steps: 20, stepSize: ${2 / 255} } }`),
  );
  assert.notDeepEqual(keys("stitch: { robustEval: { settings: reference } }"), keys("stitch: { robustEval: {} }"));
  assert.deepEqual(stitches("stitch: { robustEval: {} }")[0].config.robustEval, {
    attack: "apgd",
    eps: 8 / 255,
    steps: 100,
    stepSize: 16 / 255,
  });
  // A number given overrides the named settings' own; at 224 px the reference's numbers are its
  // ImageNet ones (4.758/255 in normalised units, in pixel units).
  const stitchWith = (robustEval: object, data: object = {}) =>
    stitchConfig(
      { front: "a", back: "b", frontPoint: "layer1.0", objective: "slm", mode: "standard" },
      { robustEval },
      { dataset: "fashion-mnist", ...data },
    ).robustEval;
  assert.deepEqual(stitchWith({ settings: "reference", steps: 50 }), { ...reference, steps: 50 });
  assert.deepEqual(stitchWith({ settings: "reference" }, { dataset: "imagefolder", imageSize: 224 }), {
    attack: "apgd",
    steps: 20,
    ...REFERENCE_ROBUST_EVAL_224,
  });
  assert.ok(Math.abs(REFERENCE_ROBUST_EVAL_224.stepSize * 255 - 1.075) < 0.001);
  // A base model: the model entry's robustEval and train's flag give one config; named settings
  // ask for the evaluation even of a clean model, at the reference's radius.
  const trained = (model: string) => {
    const t = plan(FILE("", model)).tasks.find((t) => t.kind === "train");
    assert.ok(t?.spec.kind === "train");
    return t.spec.config;
  };
  const argv = ["--model", "resnet18", "--dataset", "fashion-mnist", "--out", "x", "--width", "0.125", "--seed", "0"];
  const trainFlags = (...extra: string[]) =>
    trainConfigFromFlags(
      flags(registerTrainCommand, "train", [
        ...argv,
        ...["--epochs", "4", "--limit", "1024", "--test-limit", "256", ...extra],
      ]),
    );
  assert.deepEqual(trainFlags("--robust-eval-settings", "reference"), trained(", robustEval: { settings: reference }"));
  assert.deepEqual(trained(", robustEval: { settings: reference }").robustEval, reference);
  assert.deepEqual(
    trainFlags("--robust-eval-settings", "reference", "--robust-eval-step-size", "1/255"),
    trained(`, robustEval: { settings: reference, stepSize: ${1 / 255} }`),
  );
  // An adversarially trained model: AutoAttack's budget at its own radius by default.
  const adversarial = ", adversarial: { eps: 0.0627451 }";
  assert.deepEqual(trained(adversarial).robustEval, {
    attack: "apgd",
    eps: 0.0627451,
    steps: 100,
    stepSize: 0.1254902,
  });
  assert.deepEqual(trained(`${adversarial}, robustEval: { settings: reference }`).robustEval, reference);
  // A name that is not one is refused, naming the flag or the key.
  assert.throws(() => trainFlags("--robust-eval-settings", "art"), /--robust-eval-settings/);
  assert.throws(
    () => plan(FILE("stitch: { robustEval: { settings: art } }")),
    (e: unknown) => e instanceof ExperimentError && /stitch\.robustEval\.settings/.test(e.message),
  );
});

/** A setting's default changed to another valid value: numbers moved, an array's first entry moved, another enum option. */
function perturbed(v: unknown, options?: readonly unknown[]): unknown {
  if (typeof v === "number") return Number.isInteger(v) ? v + 1 : v / 2;
  if (Array.isArray(v)) return [perturbed(v[0]), ...v.slice(1)];
  if (typeof v === "string") return options?.find((o) => o !== v);
  throw new Error(`no perturbation for ${JSON.stringify(v)}`);
}

test("every setting of the stitching schema that has a value by default, the recipe among them, reaches the task key: change one, the key changes (issue 36)", () => {
  const d = stitchSettingsSchema.parse({});
  const keys = (stitch: Record<string, unknown>) =>
    plan(FILE(`stitch: ${JSON.stringify(stitch)}`))
      .tasks.filter((t) => t.kind === "stitch")
      .map((t) => t.key)
      .sort();
  const implicit = keys({});
  const what = { front: "a", back: "b", frontPoint: "layer1.0", objective: "slm", mode: "standard" } as const;
  const spec = (c: StitchConfig) => {
    const { front: _f, back: _b, iris: _i, device: _d, ...config } = c;
    return { kind: "stitch", front: { task: "a" }, back: { task: "b" }, iris: null, config };
  };
  const base = stitchConfig(what, {}, { dataset: "fashion-mnist" });
  // The settings, read off the schema's shape (no list written here): each one whose value, the
  // schema's default or else the resolved config's (epochs: 30 here), can be written in a file.
  // Those without one (limit: null, adversarial, robustEval, the per-mode bnMode) are left out.
  const shape = stitchSettingsSchema.shape as Record<string, unknown>;
  const defaults = d as Record<string, unknown>;
  const resolved = base as unknown as Record<string, unknown>;
  const defaultOf = (k: string) => defaults[k] ?? resolved[k];
  const settings = Object.keys(shape).filter(
    (k) => defaultOf(k) != null && stitchSettingsSchema.safeParse({ [k]: defaultOf(k) }).success,
  );
  // The recipe trainStitch is given (recipeOf) is among them: each of its keys is a setting of the
  // schema with a default, held by the resolved config.
  for (const k of STITCH_RECIPE_KEYS) {
    assert.ok(settings.includes(k), `${k}: a setting of the stitching schema, with a default`);
    assert.deepEqual(base[k], d[k], `${k} is in the resolved config`);
    assert.deepEqual(recipeOf(base)[k], d[k]);
  }
  // An experiment file's stitch section takes all but the seed (the file's seeds are the experiment's).
  const inFile = (k: string) => {
    try {
      return keys({ [k]: defaultOf(k) });
    } catch (e) {
      if (e instanceof ExperimentError && e.message.includes(`Unrecognized key: "${k}"`)) return null;
      throw e;
    }
  };
  for (const k of settings) {
    // The resolved config holds it.
    assert.deepEqual(resolved[k], defaultOf(k), `${k} is in the resolved config`);
    const options = (shape[k] as { unwrap?: () => { options?: unknown[] } }).unwrap?.().options;
    // Another value (a name outside the schema's where it has one choice only, optimizer: adam:
    // still in the config, so the key changes with it) gives another key.
    const other = perturbed(defaultOf(k), options);
    const changed = taskKey("stitch", spec({ ...base, [k]: other ?? "other" }));
    assert.notEqual(changed, taskKey("stitch", spec(base)), `${k}: ${JSON.stringify(defaultOf(k))} -> ${other}`);
    // Through a file: the default written out changes nothing, another value the planned keys.
    const written = inFile(k);
    if (written === null) {
      assert.equal(k, "seed", `${k}: an experiment file's stitch section takes it`);
      continue;
    }
    assert.deepEqual(written, implicit, `${k}: its default written out`);
    if (other !== undefined)
      assert.notDeepEqual(
        keys({ [k]: other }),
        implicit,
        `${k}: ${JSON.stringify(defaultOf(k))} -> ${JSON.stringify(other)}`,
      );
  }
  // Milestones may be written as fractions, as pixel units are: 1/3 is the default's 1/3.
  assert.deepEqual(keys({ milestones: ["1/3", "2/3"] }), implicit);
});

test("trainStitch uses every value of the recipe it is given: each changed alone gives another T", () => {
  // The other half of the key's promise: a recipe value in the key that the loop ignored (a
  // constant written in stitch/train.ts instead) would give the same T for two keys.
  torch.manualSeed(0);
  const front = createModel("resnet18", { width: 0.0625 });
  const back = createModel("resnet18", { width: 0.0625 });
  torch.manualSeed(1);
  const data: Dataset = {
    images: torch.keep(torch.rand([32, 3, 32, 32]).mul(255).to("uint8")),
    labels: torch.keep(torch.arange(32).remainder(10).long()),
    classes: Array.from({ length: 10 }, (_, i) => String(i)),
    name: "noise",
  };
  const d = stitchSettingsSchema.parse({});
  const trained = (over: Partial<StitchRecipe>): Float32Array => {
    const s = new StitchedModel(front, back, "layer1.0");
    trainStitch(
      s,
      data,
      data,
      stitchTrainOptions({
        objective: { slm: 1 },
        normalization: CIFAR10_NORMALIZATION,
        epochs: 3,
        batchSize: 16,
        bnMode: "eval",
        init: "identity",
        frozenOnce: false,
        ...over,
      }),
    );
    const w = torch.tidy(() => torch.cat(s.layer.parameters().map((p) => p.flatten())).toTypedArray() as Float32Array);
    s.layer.dispose();
    return w;
  };
  const plain = trained({});
  const changes: Partial<StitchRecipe> = {
    lr: d.lr * 3,
    weightDecay: 0.5,
    betas: [0.5, d.betas[1]],
    adamEps: 1e-2,
    // Epochs 3: the default drops at epochs 1 and 2; these keep the lr for longer or cut it harder.
    lrDecay: 0.5,
    milestones: [2 / 3],
  };
  for (const k of STITCH_RECIPE_KEYS) {
    if (k === "optimizer") continue; // one choice
    assert.ok(k in changes, `a change of ${k}`);
    const w = trained({ [k]: changes[k] });
    const moved = w.reduce((m, v, i) => Math.max(m, Math.abs(v - plain[i])), 0);
    assert.ok(moved > 1e-6, `${k} changed T (by ${moved})`);
  }
  assert.deepEqual(trained({}), plain, "and the same recipe gives the same T");
  front.dispose();
  back.dispose();
  torch.dispose(data.images);
  torch.dispose(data.labels);
});

test("an experiment file takes 8/255 as the flags do (one parser): the preset's robust model and the CLI's are one key", () => {
  assert.equal(parseFraction("8/255"), 8 / 255);
  assert.equal(parseFraction(" 16 / 255 "), 16 / 255);
  assert.equal(parseFraction("0.5"), 0.5);
  assert.throws(() => parseFraction("8/0"), /finite fraction/);
  assert.throws(() => parseFraction("eight"), /a number or a fraction such as 8\/255/);
  // The flags' parser is the key's schema, so the same function (test/schema-flags.test.ts: pixel units).
  // In a file: pixel units of training, stitching, robust evaluation and IRIs.
  const p = plan(
    FILE(
      "iris: { stepSize: 1/255, ball: 16/255 }\nstitch: { adversarial: { eps: 8/255, step: 2/255 }, robustEval: { eps: 8/255, stepSize: 1/255 } }",
      ", adversarial: { eps: 16/255, step: 4/255 }",
    ),
  );
  const train = p.tasks.find((t) => t.kind === "train")?.spec as TrainTask;
  assert.deepEqual([train.config.adversarial?.eps, train.config.adversarial?.step], [16 / 255, 4 / 255]);
  const iris = p.tasks.map((t) => t.spec).find((s): s is IrisTask => s.kind === "iris");
  assert.deepEqual([iris?.options.stepSize, iris?.options.ball], [1 / 255, 16 / 255]);
  const stitch = p.tasks.map((t) => t.spec).find((s): s is StitchTask => s.kind === "stitch" && !!s.config.adversarial);
  assert.deepEqual([stitch?.config.adversarial?.eps, stitch?.config.adversarial?.step], [8 / 255, 2 / 255]);
  assert.deepEqual([stitch?.config.robustEval?.eps, stitch?.config.robustEval?.stepSize], [8 / 255, 1 / 255]);
  // A bad fraction is named by its path in the file.
  assert.throws(
    () => parseExperiment(FILE("stitch: { adversarial: { eps: 8/0 } }"), "bad.yaml"),
    (e: unknown) =>
      e instanceof ExperimentError && /stitch\.adversarial\.eps: expected a finite fraction/.test(e.message),
  );
  // The preset's robust model of seed 0 (paper scale) and the same model from `stitchlab train`.
  const path = join(root, "presets", "adversarial-stitching.yaml");
  const preset = planExperiment(readExperiment(path, "paper"), path);
  const robust = preset.tasks.find(
    (t) => t.spec.kind === "train" && t.spec.config.seed === 0 && t.spec.config.adversarial !== null,
  );
  assert.ok(robust);
  const cli = trainConfigFromFlags(
    flags(registerTrainCommand, "train", [
      ...["--model", "resnet18", "--dataset", "cifar10", "--root", "data/cifar-10-binary.tar.gz", "--out", "x"],
      ...["--seed", "0", "--epochs", "200", "--adversarial", "--eps", "8/255", "--pgd-step", "2/255"],
    ]),
  );
  assert.equal(cli.adversarial?.eps, 8 / 255);
  assert.equal(taskKey("train", { kind: "train", config: cli }), robust.key, "the preset and the CLI: one model");
  // So are robust.yaml's: the two presets train it once.
  const robustPath = join(root, "presets", "robust.yaml");
  const robustPlan = planExperiment(readExperiment(robustPath, "paper"), robustPath);
  assert.ok(robustPlan.tasks.some((t) => t.key === robust.key));
});
