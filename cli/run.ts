// `stitchlab run FILE` and `stitchlab demo`: an experiment file through the planner and the cache
// (experiments/run.ts runs it; this shows its progress and prints what it returns); `stitchlab
// status` and `report DIR`: a run's folder (experiments/report.ts); `stitchlab task KEY`: one task
// of a planned graph, by hand (as each worker process runs it: experiments/worker.ts); `stitchlab
// schema`: the experiment file's JSON Schema for editors.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import cliProgress from "cli-progress";
import type { Command } from "commander";
import { isDone } from "../experiments/cache.js";
import { formatDuration } from "../experiments/estimate.js";
import { formatLocalStatus, localStatus, readLocalRun } from "../experiments/local.js";
import { claimOut } from "../experiments/outdir.js";
import {
  type IrisTask,
  type Plan,
  planExperiment,
  type StitchTask,
  type Task,
  type TrainTask,
} from "../experiments/plan.js";
import { type RunReport, reportFolder, reportText, requireRun } from "../experiments/report.js";
import {
  defaultCache,
  type ExperimentOptions,
  type ProgressDisplay,
  RunInterrupted,
  runExperiment,
} from "../experiments/run.js";
import type { RunEvent } from "../experiments/runner.js";
import { formatStatus, SLURM_DEFAULTS, type Submission, slurmRunPath, slurmStatus } from "../experiments/slurm.js";
import { experimentJsonSchema, readExperiment, shiftSeeds } from "../experiments/spec.js";
import { runTaskOfCache } from "../experiments/tasks.js";
import { repoRoot } from "../io/files.js";
import { type Device, getNumThreads, requireDevice, setNumThreads } from "../torch/index.js";
import type { TrainConfig } from "../train/config.js";
import { trainModel } from "../train/trainer.js";
import { deviceArg } from "./device.js";
import { int, oneOf } from "./parse.js";
import { formatRunTime, TimeLeft } from "./progress.js";

/**
 * Seconds a task of each kind takes, relative to one another: the demo's, measured on 2 cores with
 * two workers (docs/experiments.md, "Time per task": a model 50-54 s, an IRI set 7-9 s, a stitch
 * 2-8 s). The overall bar weighs tasks by it; the time left (cli/progress.ts TimeLeft) costs a kind
 * none of whose tasks has ended by it, until one has.
 */
export const TASK_WEIGHT: Record<string, number> = { train: 52, iris: 8, stitch: 5 };

/** The finished share of a running task, from its progress fields (0 when they say nothing). */
function taskFraction(fields: Record<string, number | string> | undefined): number {
  const f = fields ?? {};
  const n = (k: string) => (typeof f[k] === "number" ? (f[k] as number) : Number.NaN);
  if (n("epochs") > 0)
    return Math.min(1, (n("epoch") - 1 + (n("steps") > 0 ? n("step") / n("steps") : 0)) / n("epochs"));
  if (n("batches") > 0) return Math.min(1, (n("batch") - 1) / n("batches"));
  return 0;
}

/** Tells the run's clock what a runner event says: a task started, is this far, or ended. */
function track(clock: TimeLeft, e: RunEvent): void {
  if (e.kind === "start") clock.start(e.task.key);
  else if (e.kind === "progress") clock.progress(e.task.key, taskFraction(e.fields));
  else clock.end(e.task.key, e.kind === "done" ? (e.seconds ?? null) : null);
}

/** How the run's progress is shown: the workers that share the work, and seconds per task by kind when estimated before. */
export interface ProgressOptions {
  workers?: number;
  prior?: Record<string, number>;
}

/**
 * On a terminal: one overall bar for the whole run, weighted by task kind, with the running
 * tasks' labels, the time elapsed and an estimate of the time left (cli/progress.ts TimeLeft);
 * failures are printed above it. Elsewhere: eventPrinter's lines, with the run's elapsed and left
 * after each task's end.
 */
export function overallProgress(todo: Task[], opts: ProgressOptions = {}): ProgressDisplay {
  const clock = new TimeLeft(todo, { workers: opts.workers ?? 1, weight: TASK_WEIGHT, prior: opts.prior });
  if (!process.stderr.isTTY) return { onEvent: eventPrinter(undefined, clock), stop: () => {} };
  const weight = (t: Task) => TASK_WEIGHT[t.kind] ?? 1;
  const total = todo.reduce((s, t) => s + weight(t), 0);
  const multi = new cliProgress.MultiBar(
    {
      format: "run [{bar}] {percentage}% | {tasks} | {elapsed} elapsed | ETA {left}",
      stream: process.stderr,
      hideCursor: true,
    },
    cliProgress.Presets.shades_classic,
  );
  const times = () => {
    const left = clock.left();
    return { elapsed: formatDuration(clock.elapsed()), left: left === null ? "not known yet" : formatDuration(left) };
  };
  const bar = multi.create(total, 0, { tasks: "starting", ...times() });
  let finished = 0;
  let ended = 0;
  const running = new Map<string, { task: Task; fraction: number }>();
  const redraw = () => {
    let value = finished;
    for (const r of running.values()) value += weight(r.task) * r.fraction;
    const labels = [...running.values()].map((r) => r.task.label);
    bar.update(Math.min(total, value), {
      tasks: `${ended}/${todo.length} tasks; ${labels.join("; ") || "-"}`,
      ...times(),
    });
  };
  // The elapsed time moves on between events too.
  const tick = setInterval(redraw, 1000);
  tick.unref();
  return {
    onEvent(e) {
      track(clock, e);
      if (e.kind === "start") running.set(e.task.key, { task: e.task, fraction: 0 });
      else if (e.kind === "progress") {
        const r = running.get(e.task.key);
        if (r) r.fraction = taskFraction(e.fields);
      } else {
        running.delete(e.task.key);
        finished += weight(e.task);
        ended++;
        if (e.kind === "failed") multi.log(`${e.task.label}: FAILED: ${e.error}\n`);
        if (e.kind === "skipped") multi.log(`${e.task.label}: skipped (${e.error})\n`);
      }
      redraw();
    },
    stop: () => {
      clearInterval(tick);
      multi.stop();
    },
  };
}

/**
 * Progress lines on stderr (`write`): one per task start and end, and for each running task at
 * most one progress line every 2 s, which names the task. The wait is per task: with several
 * workers, one shared wait printed whichever task spoke first after it, so a task's lines came
 * and went, and its progress read as if it continued the task printed before it (issue 23).
 * Given the run's clock, each task's end is followed by the run's elapsed time and time left.
 */
export function eventPrinter(
  write: (line: string) => void = (line) => console.error(line),
  clock?: TimeLeft,
): (e: RunEvent) => void {
  const last = new Map<string, number>();
  return (e) => {
    if (clock) track(clock, e);
    const tag = `[${e.index}/${e.total}]`;
    if (e.kind === "start") write(`${tag} ${e.task.label} ...`);
    else if (e.kind === "done") write(`${tag} ${e.task.label}: done in ${e.seconds?.toFixed(1)} s`);
    else if (e.kind === "failed") write(`${tag} ${e.task.label}: FAILED: ${e.error}`);
    else if (e.kind === "skipped") write(`${tag} ${e.task.label}: skipped (${e.error})`);
    else if (Date.now() - (last.get(e.task.key) ?? 0) > 2000) {
      last.set(e.task.key, Date.now());
      write(
        `${tag} ${e.task.label}: ${Object.entries(e.fields ?? {})
          // A value not known yet (NaN, or null from a worker's JSON) is left out, never printed.
          .filter(([, v]) => v !== null && !(typeof v === "number" && !Number.isFinite(v)))
          .map(([k, v]) => `${k} ${v}`)
          .join(", ")}`,
      );
    }
    if (e.kind !== "start" && e.kind !== "progress") {
      last.delete(e.task.key);
      if (clock)
        write(
          `run: ${formatRunTime(clock.elapsed(), clock.left())} (${clock.remaining()} task${clock.remaining() === 1 ? "" : "s"} to go)`,
        );
    }
  };
}

/** The plan's lines, as `compare` prints its own: pairs and replicates, models to train, points, modes, data, IRIs, stitching, tasks. */
export function planLines(title: string, plan: Plan, cache: string): string[] {
  const e = plan.experiment;
  const of = (kind: string) => plan.tasks.filter((t) => t.kind === kind);
  const count = (kind: string, what: string) =>
    `${of(kind).length} ${what} (${of(kind).filter((t) => isDone(cache, t.key)).length} cached)`;
  const plural = (n: number, w: string) => `${n} ${w}${n === 1 ? "" : "s"}`;
  const pairs = e.pairs.map(
    (p) =>
      `${p.front} -> ${p.back} (${p.relation === "identical" ? "the control" : p.relation}), ${plural(p.replicates ?? e.replicates, "replicate")}`,
  );
  // The models to train, grouped by recipe (seeds and shortcuts aside).
  const recipes = new Map<string, number>();
  for (const t of of("train")) {
    const c = (t.spec as TrainTask).config;
    const width = c.modelOptions.width !== undefined ? ` width ${c.modelOptions.width}` : "";
    const r = `${c.model}${width}, ${c.epochs} epochs on ${c.limit ?? "all"} ${c.dataset} images, batch ${c.batchSize}`;
    recipes.set(r, (recipes.get(r) ?? 0) + 1);
  }
  const iri = of("iris")[0]?.spec as IrisTask | undefined;
  const io = iri?.options;
  const st = (of("stitch")[0]?.spec as StitchTask | undefined)?.config;
  const points = [...new Set(plan.stitches.map((s) => s.point))];
  const modes = [...new Set(plan.stitches.map((s) => (s.mode === "iris" ? "invariance-aware" : s.mode)))];
  return [
    `${title}: ${pairs.join("; ")}`,
    ...(recipes.size ? [`  models     ${[...recipes].map(([r, n]) => `${n} to train: ${r}`).join("; ")}`] : []),
    `  points     ${points.join(", ")} (${points.length})`,
    `  modes      ${modes.join(", ")}; objectives ${e.objectives.join(", ")}`,
    `  data       ${e.dataset.name}${e.dataset.root ? ` (${e.dataset.root})` : ""}, ${st?.testLimit ?? "all"} test images`,
    ...(iri && io
      ? [
          `  IRIs       ${iri.limit ?? "all"} per model and point, ${io.optimizer} ${io.steps} steps${io.start === "image" ? " from another image" : ""}${io.keepBest ? ", keep-best" : ""}${io.target != null ? `; an image stops at residual ${io.target}, restarts up to ${io.maxSteps} steps` : ""}`,
        ]
      : []),
    ...(st
      ? [`  stitching  ${st.epochs} epochs on ${st.limit ?? "all"} real images (or the IRIs), batch ${st.batchSize}`]
      : []),
    `  tasks      ${count("train", "models")}, ${count("iris", "IRI sets")}, ${count("stitch", "stitches")}; cache ${cache}`,
  ];
}

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
): Promise<{ line: string; prior: Record<string, number> } | null> {
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
  const sum = (kinds: string[]) =>
    todo
      .filter((t) => kinds.includes(t.kind))
      .reduce((s, t) => s + (t.spec.kind === "train" ? trainSeconds(t.spec.config, rate) : (prior[t.kind] ?? 0)), 0) /
    share;
  const n = (k: string) => todo.filter((t) => t.kind === k).length;
  const trained = sum(["train"]);
  const rest = sum(["iris", "stitch"]);
  return {
    prior,
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

function printReport(r: RunReport): void {
  const { text, stream } = reportText(r);
  if (stream === "stderr") console.error(text);
  else console.log(text);
}

function printSubmission(sub: Submission, out: string): void {
  const n = sub.jobs.length;
  console.log(
    `submitted ${n} job(s) to Slurm` +
      (sub.reused.length ? `; ${sub.reused.length} task(s) already queued or running, not resubmitted` : "") +
      `; ${sub.cached} task(s) already in the cache`,
  );
  for (const j of sub.jobs)
    console.log(`  ${j.jobId}\t${j.label}${j.deps.length ? `  (after ${j.deps.join(", ")})` : ""}`);
  for (const j of sub.reused) console.log(`  ${j.jobId}\t${j.label}  (queued earlier)`);
  for (const w of sub.warnings) console.error(`warning: ${w}`);
  if (sub.reportJob) console.log(`  ${sub.reportJob}\treport: writes ${join(out, "report.html")} when all have ended`);
  console.log(`follow it with: stitchlab status ${out}`);
}

/**
 * `run` and `demo`: runs the experiment (experiments/run.ts) with the progress shown here, prints
 * what came of it, and returns the number of tasks that failed or were not run. Ctrl-C (SIGINT)
 * or SIGTERM while the tasks run: the runner ends its worker processes and waits for them, so
 * that none is left holding a task's lock for the next run to wait on; finished tasks are in the
 * cache, and a task under way resumes (IRI sets) or restarts. A second signal while the workers
 * end is not caught: it ends this process at once (the workers then end themselves).
 */
export async function runCommand(
  file: string,
  o: Omit<ExperimentOptions, "progress" | "signal">,
  /**
   * Lines printed before the report (`stitchlab compare`'s verdict); or, with `json`, the one JSON
   * value printed instead of the lead and the report (`compare --json`).
   */
  lead?: ((r: RunReport) => string[]) | { json: (r: RunReport) => unknown },
  /** How the progress is shown (the workers are o's). */
  shownWith: Omit<ProgressOptions, "workers"> = {},
): Promise<number> {
  const stop = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => stop.abort(signal);
  const caught = () => {
    process.removeListener("SIGINT", onSignal);
    process.removeListener("SIGTERM", onSignal);
  };
  // The signals are caught while the tasks run, no longer (a dry run, a Slurm submission and the
  // report end at Ctrl-C as any command does).
  const progress = (todo: Task[]): ProgressDisplay => {
    const shown = overallProgress(todo, { workers: o.workers, ...shownWith });
    process.once("SIGINT", onSignal);
    process.once("SIGTERM", onSignal);
    return {
      onEvent: shown.onEvent,
      stop: () => {
        caught();
        shown.stop();
      },
    };
  };
  try {
    const r = await runExperiment(file, { ...o, progress, signal: stop.signal });
    if (r.kind === "dry-run") {
      console.log(r.text);
      return 0;
    }
    if (r.kind === "submitted") {
      printSubmission(r.submission, r.out);
      return 0;
    }
    if (lead && typeof lead !== "function") {
      // stdout itself: `compare --json` sends every other line to stderr.
      process.stdout.write(`${JSON.stringify(lead.json(r.report))}\n`);
      return r.report.failed;
    }
    if (r.nothingToSubmit) console.log("every task is in the cache; nothing to submit");
    const first = lead && !r.report.kept ? lead(r.report) : [];
    if (first.length) console.log(`${first.join("\n")}\n`);
    printReport(r.report);
    return r.report.failed;
  } catch (e) {
    if (!(e instanceof RunInterrupted)) throw e;
    console.error(`\n${e.message}`);
    // The shell's convention, 128 + the signal's number, as if the signal had ended the process.
    process.exit(e.reason === "SIGTERM" ? 143 : 130);
  } finally {
    caught();
  }
}

const collect = (v: string, prev: string[]) => [...prev, v];

/**
 * Tasks at once when --workers is not given, one default for demo, run and compare (issue 38: the
 * demo took 2 and the others 1). Two: stitchlab's CPU target has 2 cores, and two tasks of one
 * thread each are how the demo's timings (TASK_WEIGHT), its measured layout (channels-last on a
 * worker's one thread) and the numbers in docs/experiments.md were made; on more cores each gets
 * half of them. One worker runs tasks in this process on every core, which rounds otherwise: pass
 * --workers 1 to remake an earlier run of run or compare bit for bit. Slurm's jobs are one task each.
 */
export const DEFAULT_WORKERS = 2;
const WORKERS_HELP = `tasks at once, each in its own process with its share of the cores (default ${DEFAULT_WORKERS}: on 2 cores, two one-thread tasks, as the demo's timings were measured; 1 runs tasks in this process on every core)`;

/** --workers' value: given, or the default (the local executor's; slurm's is one task per job). */
export const workersOf = (o: Record<string, unknown>, executor: "local" | "slurm" = "local"): number =>
  (o.workers as number | undefined) ?? (executor === "slurm" ? 1 : DEFAULT_WORKERS);

/** --root, or the deprecated --data-dir (said once on stderr): the experiment dataset's root, else undefined. */
export function rootOf(o: Record<string, unknown>): string | undefined {
  if (o.dataDir === undefined) return o.root as string | undefined;
  if (o.root !== undefined && o.root !== o.dataDir)
    throw new Error("--data-dir is --root's old name: give --root only");
  console.error("--data-dir is deprecated: use --root");
  return o.dataDir as string;
}

/** --root and its deprecated alias --data-dir, of run and demo: the name the other commands use. */
function addRootOptions(cmd: Command, help: string): Command {
  return cmd.option("--root <path>", help).option("--data-dir <dir>", "deprecated: use --root");
}

/** The flags of where a run's tasks go, `run`'s and `compare`'s: --workers, --device, --executor and Slurm's. */
export function addExecutorOptions(cmd: Command): Command {
  return cmd
    .option("--workers <n>", WORKERS_HELP, int)
    .option("--device <d>", "where tasks run: cpu, cuda, cuda:N (not part of the cache keys)", deviceArg, "cpu")
    .option("--executor <e>", "local (this machine) or slurm (one sbatch job per task; returns at once)", "local")
    .option("--partition <p>", "slurm: the partition to submit to")
    .option("--gres <g>", "slurm: generic resources per job, e.g. gpu:1")
    .option("--time <t>", "slurm: time limit per job (minutes, HH:MM:SS or D-HH:MM:SS)")
    .option("--cpus-per-task <n>", "slurm: cores per job (its thread count)", int, SLURM_DEFAULTS.cpusPerTask)
    .option("--mem <m>", "slurm: memory per job, e.g. 16G")
    .option("--retries <n>", "slurm: runs of a failed task again inside its job", int, SLURM_DEFAULTS.retries)
    .option("--sbatch-arg <arg>", "slurm: any other sbatch argument, e.g. --account=x (repeatable)", collect, [])
    .option("--job-setup <sh>", "slurm: shell lines each job runs first, e.g. 'module load cuda'")
    .option("--resubmit", "slurm: cancel this experiment's queued or running jobs and submit them with these options");
}

/** addExecutorOptions's flags as runExperiment's options. */
export function executorOptions(
  o: Record<string, unknown>,
): Pick<ExperimentOptions, "executor" | "slurm" | "workers" | "device" | "resubmit"> {
  const executor = oneOf("--executor", ["local", "slurm"] as const, o.executor as string);
  if (executor === "slurm" && o.workers !== undefined && o.workers !== 1)
    throw new Error("--workers is for the local executor; with slurm every task is its own job");
  return {
    executor,
    workers: workersOf(o, executor),
    device: o.device as Device,
    resubmit: Boolean(o.resubmit),
    slurm: {
      partition: o.partition as string | undefined,
      gres: o.gres as string | undefined,
      time: o.time as string | undefined,
      cpusPerTask: Math.max(1, o.cpusPerTask as number),
      mem: o.mem as string | undefined,
      retries: o.retries as number,
      sbatchArgs: o.sbatchArg as string[],
      setup: o.jobSetup as string | undefined,
    },
  };
}

export function registerRunCommands(program: Command): void {
  const run = program
    .command("run <file>")
    .description("run an experiment file (YAML or JSON): train -> iris -> stitch -> report, reusing the cache")
    .requiredOption(
      "--out <dir>",
      "experiment folder: report.html, results.csv, figures/, plan.json, run.json, env.json; one run at a time, of one experiment (see --force)",
    )
    .option("--cache <dir>", "task cache shared by experiments (default $STITCHLAB_CACHE or ~/.cache/stitchlab)")
    .option("--scale <name>", "one of the file's scales (small, paper); default small when it has one")
    .option(
      "--force",
      "run into an --out that holds another experiment's run (another name, or tasks this plan lacks); its files are moved to <out>/replaced-<time>/",
    )
    .option("--dry-run", "print the task graph (per kind: cached, to run) and stop");
  addRootOptions(run, "the experiment dataset's root (overrides the file's): its folder or archive");
  addExecutorOptions(run).action(async (file: string, o) => {
    const failed = await runCommand(file, { ...o, dataDir: rootOf(o), ...executorOptions(o) });
    if (failed) process.exitCode = 1;
  });

  program
    .command("status <dir>")
    .description(
      "a run's tasks: done, running, failed (with the error), missing (and on Slurm pending, cancelled); local or Slurm",
    )
    .option("--json", "print the status as JSON")
    .action((dir: string, o: { json?: boolean }) => {
      const local = readLocalRun(resolve(dir));
      if (local && !existsSync(slurmRunPath(resolve(dir)))) {
        const tasks = localStatus(local);
        console.log(
          o.json
            ? JSON.stringify(
                { experiment: local.plan.experiment.name, cache: local.cache, executor: "local", tasks },
                null,
                2,
              )
            : formatLocalStatus(local, tasks, resolve(dir)),
        );
        return;
      }
      requireRun(resolve(dir));
      const s = slurmStatus(resolve(dir));
      if (o.json)
        console.log(
          JSON.stringify(
            { experiment: s.run.plan.experiment.name, cache: s.run.cache, tasks: s.tasks, report: s.report },
            null,
            2,
          ),
        );
      else console.log(formatStatus(s));
    });

  program
    .command("report <dir>")
    .description("write a run's results (report.html, results.csv, ...) from what the cache holds now; local or Slurm")
    // Exits 0 when the report is written, failed tasks or not (the report job's own state
    // should say whether the report was made); `stitchlab status` shows the failures.
    .action(async (dir: string) => printReport(await reportFolder(dir)));

  const demo = program
    .command("demo")
    .description(
      "the main job: Fashion-MNIST, narrow ResNet-18s; standard and invariance-aware stitching for the pairs " +
        "identical, cross-seed and cross-bias; prints the table, the IRI residuals and a reading; writes report.html",
    )
    .option("--out <dir>", "experiment folder", "runs/demo");
  addRootOptions(demo, "where Fashion-MNIST's IDX files are (default: Debian's /usr/share/datasets/fashion-mnist)")
    .option("--cache <dir>", "task cache (default $STITCHLAB_CACHE or ~/.cache/stitchlab)")
    .option("--workers <n>", WORKERS_HELP, int)
    .option("--device <d>", "cpu, cuda or cuda:N", deviceArg, "cpu")
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
      console.log(planLines("demo", plan, cache).join("\n"));
      requireDevice(o.device);
      const est = await estimateByTraining(plan, cache, o.device, workers);
      console.log(est?.line ?? "estimate   every task is in the cache");
      // A dry run also prints the task graph (runCommand's dry run), then stops.
      if (o.dryRun) {
        await runCommand(file, { ...o, cache, dataDir, workers });
        return;
      }
      const failed = await runCommand(file, { ...o, cache, dataDir, workers }, undefined, { prior: est?.prior });
      if (failed) process.exitCode = 1;
    });

  program
    .command("task <key>")
    .description("run one task of a planned graph (idempotent: exits at once when its output exists)")
    .option("--cache <dir>", "the cache the task was planned in", defaultCache())
    .option("--device <d>", "cpu, cuda or cuda:N", deviceArg, "cpu")
    // The worker's own function (experiments/worker.ts), for running or debugging a task by hand.
    .action((key: string, o: { cache: string; device: Device }) => runTaskOfCache(resolve(o.cache), key, o.device));

  program
    .command("schema")
    .description("print the JSON Schema of experiment files (for editor completion)")
    .action(() => console.log(JSON.stringify(experimentJsonSchema(), null, 2)));
}
