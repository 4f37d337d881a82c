// `stitchlab demo`: presets/demo.yaml through runCommand (cli/run.ts), after its plan and an
// estimate from a few timed training steps of one of its models (estimateByTraining): the demo
// trains its models, which compare's probe (experiments/estimate.ts) does not cost.
import { mkdtempSync, rmSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { isDone } from "../experiments/cache.js";
import { formatDuration } from "../experiments/estimate.js";
import { claimOut } from "../experiments/outdir.js";
import { type Plan, planExperiment, type Task, type TrainTask } from "../experiments/plan.js";
import { defaultCache } from "../experiments/run.js";
import { readExperiment, shiftSeeds } from "../experiments/spec.js";
import { demoProtocolLine } from "../findings/protocol-distance.js";
import { repoRoot } from "../io/files.js";
import { type Device, getNumThreads, requireDevice, setNumThreads } from "../torch/index.js";
import type { TrainConfig } from "../train/config.js";
import { trainModel } from "../train/trainer.js";
import { deviceOption } from "./device.js";
import { int } from "./parse.js";
import { planLines } from "./plan-lines.js";
import { addRootOptions, rootOf, runCommand, WORKERS_HELP, workersOf } from "./run.js";
import { TASK_WEIGHT } from "./run-progress.js";

/** What a few timed training steps of one of the plan's models say a training task costs. */
export interface TrainingRate {
  /** One optimiser step at the recipe's batch. */
  step: number;
  /** Evaluating one test image. */
  evalPerImage: number;
  /** Loading the data and building the model. */
  overhead: number;
  /** Steps timed (after the warm-up), the threads they ran on, and the probe's own time. */
  steps: number;
  threads: number;
  seconds: number;
}

const PROBE_WARM = 2;
const PROBE_STEPS = 8;

/**
 * Trains one of the plan's models for a few steps, through the training task's own code
 * (trainModel, into a folder removed after), on the threads a worker gets: the first
 * PROBE_WARM steps warm up, the next PROBE_STEPS are timed, and the evaluation after them too.
 */
export async function timeTraining(config: TrainConfig, device: Device, threads: number): Promise<TrainingRate> {
  const now = () => performance.now() / 1000;
  const testImages = Math.min(config.testLimit ?? 256, 256);
  const probe: TrainConfig = {
    ...config,
    limit: config.batchSize * (PROBE_WARM + PROBE_STEPS),
    testLimit: testImages,
    epochs: 1,
    robustEval: null,
    simclr: null,
    device,
  };
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-probe-"));
  const before = getNumThreads();
  setNumThreads(threads);
  const stamps: number[] = [];
  const t0 = now();
  try {
    await trainModel(probe, dir, () => stamps.push(now()));
  } finally {
    setNumThreads(before);
    rmSync(dir, { recursive: true, force: true });
  }
  const end = now();
  const last = stamps[stamps.length - 1];
  const step = (last - stamps[PROBE_WARM - 1]) / (stamps.length - PROBE_WARM);
  return {
    step,
    // One evaluation after the epoch and the final one (and the checkpoint's writing).
    evalPerImage: (end - last) / (2 * testImages),
    overhead: Math.max(0, stamps[0] - t0 - step),
    steps: stamps.length - PROBE_WARM,
    threads,
    seconds: end - t0,
  };
}

/** A training task's seconds at a measured rate: its steps, its evaluations (one per epoch, the last, the shortcut's). */
export function trainSeconds(c: TrainConfig, rate: TrainingRate): number {
  const steps = c.epochs * Math.floor((c.limit ?? 0) / c.batchSize);
  const evals = c.epochs + 1 + (c.shortcut ? (c.shortcut === "rand" ? 1 : 2) : 0);
  return rate.overhead + steps * rate.step + evals * (c.testLimit ?? 10000) * rate.evalPerImage;
}

/** A labels-only IRI set's seconds: loading the front for its shapes and drawing the starts. */
const LABELS_ONLY_IRIS_SECONDS = 1;

/**
 * The demo's time on this machine: its models from a measured training rate (timeTraining), its
 * IRI sets and stitches at their share of a model's time as the demo measured it on a CPU
 * (TASK_WEIGHT), the work shared by the workers. Null when every task is in the cache.
 */
export async function estimateByTraining(
  plan: Plan,
  cache: string,
  device: Device,
  workers: number,
): Promise<{ line: string; prior: Record<string, number>; tasks?: Record<string, number> } | null> {
  const todo = plan.tasks.filter((t) => !isDone(cache, t.key));
  if (!todo.length) return null;
  const first = plan.tasks.find((t) => t.kind === "train")?.spec as TrainTask | undefined;
  if (!first || first.config.limit === null)
    return { line: "estimate   none (it is timed on a model the plan trains on a limited set of images)", prior: {} };
  const threads = workers > 1 ? Math.max(1, Math.floor(availableParallelism() / workers)) : getNumThreads();
  const rate = await timeTraining(first.config, device, threads);
  const model = trainSeconds(first.config, rate);
  const prior: Record<string, number> = {};
  for (const k of Object.keys(TASK_WEIGHT)) prior[k] = (model * TASK_WEIGHT[k]) / TASK_WEIGHT.train;
  const share = Math.max(1, Math.min(workers, todo.length));
  // The labels-only sender's IRI sets are their starts, drawn in a moment (no descent): a second
  // each, not an IRI set's share, so that they neither swell the estimate nor, ending at once,
  // pull the real sets' cost down as the run goes.
  const own = (t: Task): number | null =>
    t.spec.kind === "train"
      ? trainSeconds(t.spec.config, rate)
      : t.spec.kind === "iris" && t.spec.noiseClusters
        ? LABELS_ONLY_IRIS_SECONDS
        : null;
  const sum = (kinds: string[]) =>
    todo.filter((t) => kinds.includes(t.kind)).reduce((s, t) => s + (own(t) ?? prior[t.kind] ?? 0), 0) / share;
  const n = (k: string) => todo.filter((t) => t.kind === k).length;
  const trained = sum(["train"]);
  const rest = sum(["iris", "stitch"]);
  // Each model's own cost, from its training steps: the time left starts from them, and the IRI
  // sets and stitches, costed by kind (prior), take the mean of their kind's ended tasks as they
  // end (cli/progress.ts TimeLeft).
  const tasks = Object.fromEntries(todo.flatMap((t) => (own(t) === null ? [] : [[t.key, own(t) as number]])));
  return {
    prior,
    tasks,
    line:
      `estimate   ${formatDuration(trained + rest)} on this machine with ${workers} worker${workers === 1 ? "" : "s"} ` +
      `(${n("train")} models ${formatDuration(trained)}, from ${rate.steps} training steps timed here on ${rate.threads} thread${rate.threads === 1 ? "" : "s"} in ${rate.seconds.toFixed(1)} s; ` +
      `${n("iris")} IRI sets and ${n("stitch")} stitches ${formatDuration(rest)}, at their share of a model's time in the demo measured on a CPU)`,
  };
}

/** The demo's experiment as it runs: the preset, every seed shifted by --seed, its data where --root says. */
function demoPlan(file: string, o: { seed?: number; dataDir?: string }): Plan {
  const exp = shiftSeeds(readExperiment(file), o.seed ?? 0);
  if (o.dataDir) {
    // As experiments/run.ts withDataDir (--root): the same root in the task keys as the run's.
    exp.dataset.root = resolve(o.dataDir);
    for (const m of Object.values(exp.models))
      if ("dataset" in m && m.dataset?.name === exp.dataset.name) m.dataset.root = resolve(o.dataDir);
  }
  return planExperiment(exp, file);
}

export function registerDemoCommand(program: Command): void {
  const demo = program
    .command("demo")
    .description(
      "the main job: Fashion-MNIST, narrow ResNet-18s; standard and invariance-aware stitching for the pairs " +
        "identical, cross-seed and cross-bias; prints the table, the IRI residuals and a reading; writes report.html",
    )
    .option("--out <dir>", "experiment folder", "runs/demo");
  addRootOptions(demo, "where Fashion-MNIST's IDX files are (default: Debian's /usr/share/datasets/fashion-mnist)")
    .option("--cache <dir>", "task cache (default $STITCHLAB_CACHE or ~/.cache/stitchlab)")
    .option("--workers <n>", WORKERS_HELP, int);
  deviceOption(demo)
    .option("--dry-run", "print the plan and the time estimate, and stop")
    .option("--force", "run into an --out that holds another run (e.g. another --seed's); its files are moved aside")
    .option(
      "--seed <s>",
      "shift every seed of the study by s (models, IRI starts, stitching): another draw of the same demo",
      int,
      0,
    )
    .action(async (o) => {
      const file = join(repoRoot, "presets", "demo.yaml");
      const cache = resolve(o.cache ?? defaultCache());
      const dataDir = rootOf(o);
      const workers = workersOf(o);
      const plan = demoPlan(file, { seed: o.seed, dataDir });
      // Refused now, before the estimate's training steps, when --out holds another run.
      claimOut(resolve(o.out), plan, Boolean(o.force), false);
      console.log(planLines("demo", plan, cache, [demoProtocolLine()]).join("\n"));
      requireDevice(o.device);
      const est = await estimateByTraining(plan, cache, o.device, workers);
      console.log(est?.line ?? "estimate   every task is in the cache");
      // A dry run also prints the task graph (runCommand's dry run), then stops.
      if (o.dryRun) {
        await runCommand(file, { ...o, cache, dataDir, workers });
        return;
      }
      const failed = await runCommand(file, { ...o, cache, dataDir, workers }, undefined, {
        prior: est?.prior,
        tasks: est?.tasks,
      });
      if (failed) process.exitCode = 1;
    });
}
