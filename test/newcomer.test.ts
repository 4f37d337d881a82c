// What a newcomer tripped on (issue 37, part 5): the settings weights made elsewhere cannot show,
// asked for all at once in the command's flag names; `demo` printing its plan and an estimate
// before it runs (--dry-run stops there); and progress that gives the time elapsed and left.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { type TrainingRate, trainSeconds } from "../cli/demo.js";
import { formatRunTime, TimeLeft } from "../cli/progress.js";
import { eventPrinter, TASK_WEIGHT } from "../cli/run-progress.js";
import { missingModelSettings, modelSourceFrom, requireModelSettings } from "../cli/source.js";
import type { Task } from "../experiments/plan.js";
import type { RunEvent } from "../experiments/runner.js";
import { torchSave } from "../io/torchsave.js";
import { saveCheckpoint } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import { resolveTrainConfig, trainSettingsSchema } from "../train/config.js";
import { runCli } from "./helpers/cli.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

const tmp = mkdtempSync(join(tmpdir(), "stitchlab-newcomer-"));
const file = (name: string) => join(tmp, name);
after(() => rmSync(tmp, { recursive: true, force: true }));

before(() => {
  // Plain state dicts as PyTorch saves them (torchvision's names; a CIFAR stem, 10 classes), narrow
  // so that the test stays quick; a ViT's, whose position embeddings show its image size; and a
  // stitchlab checkpoint, which says everything itself.
  for (const name of ["a.pt", "b.pt"]) {
    const m = createModel("resnet18", { width: 0.0625, numClasses: 10, stem: "cifar" });
    torchSave(file(name), m.stateDict());
    m.dispose();
  }
  const vit = createModel("vit_tiny_patch4_32", { depth: 1 });
  torchSave(file("vit.pt"), vit.stateDict());
  vit.dispose();
  const own = createModel("resnet18", { width: 0.0625, numClasses: 10 });
  saveCheckpoint(file("own.safetensors"), own, { dataset: "fashion-mnist" });
  own.dispose();
});

/** The message a call throws. */
function thrown(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    return (e as Error).message;
  }
  return assert.fail("expected an error");
}

/** Never an experiment file's key (`normalization:`, `arch:`, `imageSize`), never a file a dry run did not write. */
function flagsOnly(message: string): void {
  assert.doesNotMatch(message, /(^|[\s(])(arch|normalization|imageSize|dataset):/m, message);
  assert.doesNotMatch(message, /imageSize|compare\.yaml|experiment file/, message);
}

test("compare on two plain state dicts asks for --arch, --normalization and --image-size at once, with the dataset's statistics", () => {
  const out = file("compare-out");
  // --data, compare's old name for --dataset, still works and says the new one (issue 38).
  const r = runCli(["compare", file("a.pt"), file("b.pt"), "--data", "fashion-mnist", "--dry-run", "--out", out]);
  assert.equal(r.status, 1, r.stdout);
  assert.match(r.stderr, /^--data is deprecated: use --dataset$/m);
  const message = r.stderr.replace(/^--data is deprecated: use --dataset\n/m, "");
  assert.match(message, /A \(.*a\.pt\) and B \(.*b\.pt\) are not stitchlab checkpoints/);
  // One flag for both where they need the same, each with its suggestion.
  assert.match(message, /^ {2}--arch resnet18 .*their keys look like torchvision's resnet18/m);
  assert.match(message, /^ {2}--normalization fashion-mnist .*fashion-mnist \(the dataset's own\), none/m);
  assert.match(message, /^ {2}--image-size <px> .*fashion-mnist's: 28 px, or 32 padded/m);
  flagsOnly(message);
  assert.ok(!existsSync(out), "a dry run writes nothing");

  // Without --dataset, the dataset is asked for in the same message; with --arch given, it is not asked for again.
  const noData = thrown(() =>
    requireModelSettings(
      { frontArch: "resnet18", backArch: "resnet18" },
      [
        { role: "front", file: file("a.pt"), name: "A" },
        { role: "back", file: file("b.pt"), name: "B" },
      ],
      { both: true, dataset: { flag: "--dataset", from: "back" } },
    ),
  );
  assert.doesNotMatch(noData, /--arch/);
  assert.match(noData, /^ {2}--normalization <stats> /m);
  assert.match(noData, /^ {2}--dataset <name> .*B does not record one/m);
  flagsOnly(noData);
});

test("a source that cannot be read is told in the same message as the facts to give: a hub name not cached offline, a file not there", () => {
  const was = { offline: process.env.STITCHLAB_OFFLINE, cache: process.env.STITCHLAB_CACHE };
  process.env.STITCHLAB_OFFLINE = "1";
  process.env.STITCHLAB_CACHE = join(tmp, "empty-cache");
  try {
    const models = (a: string) => [
      { role: "front" as const, file: a, name: "A" },
      { role: "back" as const, file: file("b.pt"), name: "B" },
    ];
    const ctx = { both: true, dataset: { flag: "--dataset", given: "fashion-mnist", from: "back" as const } };
    const hub = thrown(() =>
      requireModelSettings({ backArch: "resnet18" }, models("hf-hub:timm/resnet18.a1_in1k"), ctx),
    );
    assert.match(
      hub,
      /^A model that cannot be read:\n {2}A \(hf-hub:timm\/resnet18\.a1_in1k\): .*STITCHLAB_OFFLINE is set/,
    );
    assert.match(hub, /^B \(.*b\.pt\) is not a stitchlab checkpoint: give what the file does not say:$/m);
    assert.match(hub, /^ {2}--back-normalization fashion-mnist /m);
    const gone = thrown(() => requireModelSettings({ backArch: "resnet18" }, models(file("gone.pt")), ctx));
    assert.match(gone, /^A model that cannot be read:\n {2}A \(.*gone\.pt\): no such file\n/);
    assert.match(gone, /--back-normalization/);
    // Nothing to ask: the source's own load names its problem, as before.
    requireModelSettings(
      { backArch: "resnet18", backNormalization: "fashion-mnist", backImageSize: 32 },
      models(file("gone.pt")),
      ctx,
    );
  } finally {
    for (const [k, v] of [
      ["STITCHLAB_OFFLINE", was.offline],
      ["STITCHLAB_CACHE", was.cache],
    ] as const)
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
  }
});

test("stitch and iris ask for each model's flags by its role, and import for its own", () => {
  // stitch: both models' settings in one message, under --front-* and --back-*, and the dataset.
  const stitch = thrown(() => modelSourceFrom({ front: file("a.pt"), back: file("b.pt") }, "front", file("a.pt")));
  assert.match(stitch, /^ {2}--front-arch resnet18 --back-arch resnet18 /m);
  assert.match(stitch, /^ {2}--front-normalization <stats> --back-normalization <stats> /m);
  assert.match(stitch, /^ {2}--front-image-size <px> --back-image-size <px> /m);
  assert.match(stitch, /^ {2}--dataset <name> .*the back does not record one/m);
  flagsOnly(stitch);
  // A stitchlab back records its dataset: the front's statistics are suggested from it, no --dataset asked.
  const withOwn = thrown(() =>
    modelSourceFrom({ front: file("a.pt"), back: file("own.safetensors") }, "front", file("a.pt")),
  );
  assert.match(withOwn, /^the front \(.*a\.pt\) is not a stitchlab checkpoint/);
  assert.match(withOwn, /--front-normalization fashion-mnist /);
  assert.doesNotMatch(withOwn, /--back-|--dataset/);
  // iris, the architecture given: what is left.
  const iris = thrown(() =>
    modelSourceFrom({ front: file("a.pt"), frontArch: "resnet18", dataset: "mnist" }, "front", file("a.pt")),
  );
  assert.match(iris, /--front-normalization mnist /);
  assert.match(iris, /--front-image-size <px> /);
  assert.doesNotMatch(iris, /--front-arch|--dataset/);
  // import: its normalisation defaults to its dataset's, and it says so.
  const imp = thrown(() =>
    requireModelSettings({}, [{ role: null, file: file("a.pt") }], {
      normalization: "dataset",
      dataset: { flag: "--dataset", why: "the dataset it was trained on" },
    }),
  );
  assert.match(imp, /^ {2}--arch resnet18 /m);
  assert.match(imp, /^ {2}--normalization <stats> .*left out: the dataset's$/m);
  assert.match(imp, /^ {2}--dataset <name> +the dataset it was trained on/m);
  flagsOnly(imp);
});

test("nothing is asked when nothing required is missing; a ViT's weights show their side", () => {
  const both = [
    { role: "front" as const, file: file("a.pt") },
    { role: "back" as const, file: file("own.safetensors") },
  ];
  // Architecture and statistics given: the side is left to its default, not asked for alone.
  assert.equal(missingModelSettings({ frontArch: "resnet18", frontNormalization: "none" }, both), null);
  // A stitchlab checkpoint and a file not found (its load names it) are never asked about.
  assert.equal(missingModelSettings({}, [{ role: "back", file: file("own.safetensors") }]), null);
  assert.equal(missingModelSettings({}, [{ role: "back", file: file("missing.pt") }]), null);
  const vit = missingModelSettings({}, [{ role: "front", file: file("vit.pt") }]) ?? "";
  assert.match(vit, /--front-arch vit_tiny_patch4_32 /);
  assert.doesNotMatch(vit, /image-size/);
});

test("demo --dry-run prints its plan and an estimate from timed training steps, and stops", {
  skip: skipUnlessFashionMnist(),
}, () => {
  const out = file("demo");
  const r = runCli(["demo", "--dry-run", "--out", out, "--cache", file("cache"), "--workers", "2"]);
  assert.equal(r.status, 0, r.stderr);
  const s = r.stdout;
  assert.match(s, /^demo: clean-s0 -> clean-s0 \(the control\), 1 replicate; .*cross-seed.*cross-bias/m);
  assert.match(
    s,
    /^ {2}models {5}13 to train: resnet18 width 0\.125, \d+ epochs on \d+ fashion-mnist images, batch 64; 3 to build: resnet18 width 0\.125 at its initialisation \(a null front\)$/m,
  );
  // The untrained and noise nulls, each once on clean data and once on the cross-bias pair's marked data.
  assert.match(
    s,
    /clean-s1~untrained -> clean-s0 \(null:untrained\), 3 replicates, standard only; clean-s1~noise -> clean-s0 \(null:noise\), 3 replicates; clean-s1~untrained -> clean-s0 \(null:untrained\), 3 replicates, standard only, pixel-marked data; clean-s1~noise -> clean-s0 \(null:noise\), 3 replicates, pixel-marked data$/m,
  );
  assert.match(s, /^ {2}points {5}layer2\.1, layer4\.1 \(2\)$/m);
  assert.match(s, /^ {2}tasks {6}16 models \(0 cached\), 38 IRI sets \(0 cached\), 88 stitches \(0 cached\)/m);
  assert.match(
    s,
    /^estimate {3}\d.* on this machine with 2 workers \(16 models .*from 8 training steps timed here.*38 IRI sets and 88 stitches .*share of a model's time/m,
  );
  assert.ok(!existsSync(out), "a dry run writes nothing");
});

test("a training task's time from a measured rate: its steps and its evaluations", () => {
  const c = resolveTrainConfig(
    trainSettingsSchema.parse({ arch: "resnet18", epochs: 6, batchSize: 64, shortcut: "pixel" }),
    { dataset: "fashion-mnist", root: null, imageSize: null, limit: 8000, testLimit: 1000, markerScale: 1 },
  );
  const rate: TrainingRate = { step: 0.05, evalPerImage: 0.001, overhead: 2, steps: 8, threads: 1, seconds: 3 };
  // 6 x 125 steps, 6 + 1 clean evaluations and the marked and rolled ones, of 1000 images.
  assert.ok(Math.abs(trainSeconds(c, rate) - (2 + 750 * 0.05 + 9 * 1000 * 0.001)) < 1e-9);
});

test("progress gives the time elapsed and left, the left updated as tasks finish", () => {
  assert.equal(formatRunTime(125, 840), "2 min 5 s elapsed, about 14 min 0 s left");
  assert.equal(formatRunTime(5, null), "5 s elapsed, time left not known yet");

  let now = 0;
  const todo = [
    { key: "t1", kind: "train" },
    { key: "t2", kind: "train" },
    { key: "i", kind: "iris" },
    { key: "s", kind: "stitch" },
  ];
  const weight = { train: 52, iris: 8, stitch: 5 };
  const clock = new TimeLeft(todo, { workers: 2, weight, now: () => now });
  assert.equal(clock.left(), null, "nothing to cost it by yet");
  clock.start("t1");
  clock.start("t2");
  now = 10;
  clock.progress("t1", 0.5);
  // t1 projects to 20 s, so a model costs 20 s, an IRI set 20 x 8/52, a stitch 20 x 5/52; the work
  // left (10 + 10 + 5) is shared by the two workers.
  const close = (a: number | null, b: number) => assert.ok(a !== null && Math.abs(a - b) < 1e-9, `${a} vs ${b}`);
  close(clock.left(), 12.5);
  assert.equal(clock.elapsed(), 10);
  now = 20;
  clock.end("t1", 20);
  clock.start("i");
  // t2 has run its 20 s; the IRI set (20 x 8/52) and the stitch (20 x 5/52) are left.
  close(clock.left(), (20 * 13) / 52 / 2);
  now = 24;
  clock.end("t2", 24);
  // Models now cost their mean, 22 s; the kinds not measured yet scale with it.
  close(clock.left(), (Math.max(0, (22 * 8) / 52 - 4) + (22 * 5) / 52) / 2);
  clock.end("i", null);
  clock.end("s", null);
  assert.equal(clock.left(), 0);
  // An estimate made before the run (the demo's) gives the time left from the start.
  const prior = new TimeLeft(todo, { workers: 1, weight, prior: { train: 60, iris: 10, stitch: 5 }, now: () => 0 });
  assert.equal(prior.left(), 135);
  assert.deepEqual(Object.keys(TASK_WEIGHT).sort(), ["iris", "stitch", "train"]);
});

test("the time left starts from each task's own estimate, and tasks that end correct it by their share of the run", () => {
  let now = 0;
  // The walk's compare: IRI sets at the middle point take seconds, at the last point minutes.
  const todo = [
    { key: "i2", kind: "iris" },
    { key: "i4", kind: "iris" },
    { key: "s2", kind: "stitch" },
    { key: "s4", kind: "stitch" },
  ];
  const tasks = { i2: 10, i4: 400, s2: 200, s4: 100 };
  const clock = new TimeLeft(todo, { workers: 1, weight: TASK_WEIGHT, tasks, now: () => now });
  const close = (a: number | null, b: number) => assert.ok(a !== null && Math.abs(a - b) < 1e-6, `${a} vs ${b}`);
  // The first time left is the estimate itself, not a projection from the first (cheap) task.
  close(clock.left(), 710);
  clock.start("i2");
  now = 20;
  clock.end("i2", 20);
  // The cheap set ran twice as long as said: W = 71 s, so the last point's set is scaled by
  // (20 + 71) / (10 + 71), not doubled.
  close(clock.left(), 400 * (91 / 81) + 300);
  clock.start("i4");
  now = 320;
  clock.end("i4", 300);
  // The long one ran short: the kind's costs shrink by (320 + 71) / (410 + 71); stitches keep theirs.
  close(clock.left(), 300);
  clock.start("s2");
  now = 420;
  clock.progress("s2", 0.25);
  close(clock.left(), 200 * 0.75 + 100);
  // Per-kind costs without per-task estimates: as before.
  const plain = new TimeLeft(todo, { workers: 1, weight: TASK_WEIGHT, now: () => 0 });
  assert.equal(plain.left(), null);
  // The demo's: models estimated each, the rest by kind. A kind with no estimate of its own costs
  // its prior until one of its tasks ends, then the mean of those ended, not a damped prior.
  let t = 0;
  const demo = new TimeLeft(
    [
      { key: "m", kind: "train" },
      { key: "i1", kind: "iris" },
      { key: "i2", kind: "iris" },
    ],
    { workers: 1, weight: TASK_WEIGHT, prior: { iris: 8 }, tasks: { m: 50 }, now: () => t },
  );
  close(demo.left(), 66);
  demo.start("m");
  t = 50;
  demo.end("m", 50);
  demo.start("i1");
  t = 74;
  demo.end("i1", 24);
  // The IRI set took 3x its prior: the other costs what it took.
  close(demo.left(), 24);
});

test("into a pipe, progress is at most one line per task kind a minute, with the run's time elapsed and left; a failure always gets its line", () => {
  let now = 0;
  const task = (key: string, kind: string) => ({ key, label: `${kind} ${key}`, kind, deps: [] }) as unknown as Task;
  const iris = [task("a", "iris"), task("b", "iris"), task("c", "iris")];
  const stitch = task("s", "stitch");
  const clock = new TimeLeft([...iris, stitch], {
    workers: 1,
    weight: TASK_WEIGHT,
    tasks: { a: 10, b: 10, c: 100, s: 50 },
    now: () => now,
  });
  const lines: string[] = [];
  const print = eventPrinter(
    (l) => lines.push(l),
    clock,
    () => now,
    { iris: 3, stitch: 1 },
  );
  const event = (e: Omit<RunEvent, "total">): RunEvent => ({ ...e, total: 4 });
  print(event({ kind: "start", task: iris[0], index: 1 }));
  assert.deepEqual(lines, [
    "[4 tasks] iris: 0/3 ended; running iris a; run: 1 s elapsed, about 2 min 50 s left (4 tasks to go)",
  ]);
  // Within the minute: nothing more of the IRI sets, however many events.
  for (let s = 1; s <= 50; s++) {
    now = s;
    print(event({ kind: "progress", task: iris[0], index: 1, fields: { batch: 1, step: s } }));
  }
  now = 10;
  print(event({ kind: "done", task: iris[0], index: 1, seconds: 10 }));
  print(event({ kind: "start", task: iris[1], index: 2 }));
  now = 20;
  print(event({ kind: "failed", task: iris[1], index: 2, error: "out of memory" }));
  print(event({ kind: "start", task: iris[2], index: 3 }));
  assert.deepEqual(lines.slice(1), ["[2/4] iris b: FAILED: out of memory"]);
  // Another kind gets its own line at once.
  print(event({ kind: "start", task: stitch, index: 4 }));
  assert.match(
    lines[2] as string,
    /^\[4 tasks\] stitch: 0\/1 ended; running stitch s; run: 20 s elapsed, about .* left \(2 tasks to go\)$/,
  );
  // A minute after the IRI sets' last line: the next event of theirs is told, with the latest progress.
  now = 61;
  print(event({ kind: "progress", task: iris[2], index: 3, fields: { batch: 1, step: 300, residual: Number.NaN } }));
  assert.match(
    lines[3] as string,
    /^\[4 tasks\] iris: 2\/3 ended; running iris c: batch 1, step 300; run: 61 s elapsed, about \d+ s left \(2 tasks to go\)$/,
  );
  assert.equal(lines.length, 4);
});
