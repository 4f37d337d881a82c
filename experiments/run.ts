// Running an experiment: its file through the planner, the unfinished tasks through the local
// runner (experiments/runner.ts) or as Slurm jobs (experiments/slurm.ts), then its report
// (experiments/report.ts). `stitchlab run` and `stitchlab demo` are a shell over runExperiment:
// they parse the flags, show the progress, and print what it returns.
import { resolve } from "node:path";
import { disposeDataset, loadDataset } from "../data/index.js";
import { stitchlabCacheDir } from "../io/files.js";
import { DEFAULT_DEVICE, type Device, requireDevice } from "../torch/index.js";
import { trainingMemoryProblem } from "../train/memory.js";
import { isDone, partials } from "./cache.js";
import { recordLocalRun } from "./local.js";
import { claimOut, withOutLock } from "./outdir.js";
import { type Plan, planExperiment, type Task } from "./plan.js";
import { type RunReport, reportRun, summaryFromCache } from "./report.js";
import { type RunEvent, type RunSummary, runPlan } from "./runner.js";
import { SLURM_DEFAULTS, type SlurmOptions, type Submission, submitPlan } from "./slurm.js";
import { type Experiment, ExperimentError, readExperiment, shiftSeeds } from "./spec.js";

/** The cache experiments share: --cache, else $STITCHLAB_CACHE, else $XDG_CACHE_HOME/stitchlab (~/.cache/stitchlab). */
export function defaultCache(): string {
  return stitchlabCacheDir();
}

/** A dry run's text: per task kind how many are cached and how many to run, then the tasks to run. */
export function dryRun(plan: Plan, cache: string): string {
  const lines: string[] = [];
  const kinds = ["train", "iris", "stitch"] as const;
  lines.push(`cache: ${cache}`);
  for (const k of kinds) {
    const all = plan.tasks.filter((t) => t.kind === k);
    const cached = all.filter((t) => isDone(cache, t.key)).length;
    lines.push(
      `${k.padEnd(7)} ${String(all.length).padStart(4)} tasks: ${cached} cached, ${all.length - cached} to run`,
    );
  }
  lines.push(`report  written from ${plan.stitches.length} stitch results`);
  const todo = plan.tasks.filter((t) => !isDone(cache, t.key));
  if (todo.length) lines.push("to run:", ...todo.map((t) => `  ${t.key}  ${t.label}`));
  const left = partials(cache);
  if (left.length) lines.push(`unfinished work from interrupted runs (resumed or redone): ${left.join(", ")}`);
  return lines.join("\n");
}

/**
 * A dry run reads one test image of every dataset the experiment uses, so that a wrong path or
 * a missing download is found now, with the loader's message (the path looked at, how to get it).
 */
async function checkData(exp: Experiment): Promise<void> {
  const sets = [
    exp.dataset,
    ...Object.values(exp.models).flatMap((m) => ("dataset" in m && m.dataset ? [m.dataset] : [])),
  ];
  const seen = new Set<string>();
  for (const d of sets) {
    const id = `${d.name}\t${d.root ?? ""}\t${d.imageSize ?? ""}`;
    if (seen.has(id)) continue;
    seen.add(id);
    const ds = await loadDataset(d.name, {
      root: d.root,
      split: "test",
      limit: 1,
      imageSize: d.imageSize,
      pad32: true,
      rgb: true,
    });
    disposeDataset(ds);
  }
}

/**
 * Refuses, before any work, an experiment with a model too large to train on this machine
 * (train/memory.ts), naming each one by its key in the file. Replicates train the same model with
 * other seeds, so a model's first training task stands for all of its own.
 */
function checkTrainingFits(plan: Plan, device: Device, file: string): void {
  const problems: string[] = [];
  for (const [name, ref] of Object.entries(plan.models)) {
    if (!("task" in ref)) continue;
    const spec = plan.tasks.find((t) => t.key === ref.task)?.spec;
    if (spec?.kind !== "train") continue;
    const problem = trainingMemoryProblem({ ...spec.config, device }, "its width or batchSize");
    if (problem) problems.push(`models.${name}: ${problem}`);
  }
  if (problems.length) throw new ExperimentError(file, problems);
}

/** Points the experiment's dataset (and models' own datasets of the same name) at dir. */
function withDataDir(exp: Experiment, dir: string): void {
  const name = exp.dataset.name;
  exp.dataset.root = resolve(dir);
  for (const m of Object.values(exp.models))
    if ("dataset" in m && m.dataset?.name === name) m.dataset.root = resolve(dir);
}

/**
 * What lives while a local run's tasks run: the progress display, which gets every event of the
 * runner, and stop() once the tasks have ended, however they ended (the CLI also catches Ctrl-C
 * for that long).
 */
export interface ProgressDisplay {
  onEvent: (e: RunEvent) => void;
  stop: () => void;
}

export interface ExperimentOptions {
  out: string;
  cache?: string;
  scale?: string;
  workers?: number;
  dryRun?: boolean;
  dataDir?: string;
  device?: Device;
  executor?: "local" | "slurm";
  slurm?: Partial<SlurmOptions>;
  /** slurm: cancel this experiment's queued or running jobs and submit them again. */
  resubmit?: boolean;
  /**
   * Run into an --out that holds another experiment's run (experiments/outdir.ts); its files are
   * moved to out/replaced-<time>/ first. Without it such an --out is refused before any work.
   */
  force?: boolean;
  /** Told where --force moved another experiment's files (default: stderr). */
  onReplaced?: (message: string) => void;
  /** Shift every seed of the study by this much (models, IRI starts, stitching): another draw of it. */
  seed?: number;
  /** local: called as the tasks start, with those to run (not in the cache). */
  progress?: (todo: Task[]) => ProgressDisplay;
  /**
   * local: stops the run (Ctrl-C, SIGTERM): the workers are ended and waited for, and
   * runExperiment rejects with RunInterrupted.
   */
  signal?: AbortSignal;
}

/** A local run stopped by its signal: finished tasks are in the cache, the rest are not run. */
export class RunInterrupted extends Error {
  constructor(
    /** The signal's reason (the CLI passes the signal's name, SIGINT or SIGTERM). */
    readonly reason: unknown,
    cache: string,
    out: string,
  ) {
    super(
      `interrupted: finished tasks are kept in the cache (${cache}); run the same command again to go on (stitchlab status ${out} shows where it stands)`,
    );
  }
}

/** What runExperiment did: a dry run's text, a Slurm submission, or a run reported. */
export type ExperimentOutcome =
  | { kind: "dry-run"; text: string }
  | { kind: "submitted"; submission: Submission; out: string }
  /** nothingToSubmit: the Slurm executor found every task in the cache and reported at once. */
  | { kind: "reported"; report: RunReport; nothingToSubmit?: boolean };

/**
 * Plans, runs and reports an experiment (report.failed counts the tasks that failed or were not
 * run). With the Slurm executor it submits the unfinished tasks and returns at once, or reports
 * straight away when the cache already holds everything.
 */
export async function runExperiment(file: string, o: ExperimentOptions): Promise<ExperimentOutcome> {
  const cache = resolve(o.cache ?? defaultCache());
  const exp = shiftSeeds(readExperiment(file, o.scale), o.seed ?? 0);
  if (o.dataDir) withDataDir(exp, o.dataDir);
  const plan = planExperiment(exp, file);
  // The scale applied (the file's small one when none is named), as env.json and status record it.
  const scale = exp.appliedScale ?? "default";
  const device = o.device ?? DEFAULT_DEVICE;
  const out = resolve(o.out);
  // Run here, every model must fit this machine's memory to train; Slurm's jobs run elsewhere.
  if (o.executor !== "slurm") checkTrainingFits(plan, device, file);
  if (o.dryRun) {
    // Told now what the run would be refused for (another experiment's --out); nothing is moved.
    claimOut(out, plan, Boolean(o.force), false);
    await checkData(exp);
    return { kind: "dry-run", text: dryRun(plan, cache) };
  }
  if (o.executor !== "slurm") requireDevice(device);
  // The folder is this run's from here to its report (or its submission): another run into it is
  // refused at once, and so is a folder that holds another experiment's run (unless --force).
  return withOutLock(out, async () => {
    const moved = claimOut(out, plan, Boolean(o.force), true);
    if (moved) (o.onReplaced ?? ((m) => console.error(m)))(moved);
    if (o.executor === "slurm") {
      const options: SlurmOptions = { ...SLURM_DEFAULTS, ...o.slurm, device };
      const submission = submitPlan(plan, { file: resolve(file), scale, cache, out, options, resubmit: o.resubmit });
      if (submission.jobs.length || submission.reused.length) return { kind: "submitted", submission, out };
      const report = await reportRun(plan, summaryFromCache(plan, cache), cache, out, { scale, device });
      return { kind: "reported", report, nothingToSubmit: true };
    }
    // Before any task: `stitchlab status` and `report` read the run from here (experiments/local.ts).
    recordLocalRun(out, { plan, cache, scale, device });
    const progress = o.progress?.(plan.tasks.filter((t) => !isDone(cache, t.key)));
    let summary: RunSummary;
    try {
      summary = await runPlan(plan, {
        cache,
        workers: o.workers,
        device,
        onEvent: progress?.onEvent,
        signal: o.signal,
      });
    } catch (e) {
      if (o.signal?.aborted) throw new RunInterrupted(o.signal.reason, cache, o.out);
      throw e;
    } finally {
      progress?.stop();
    }
    return { kind: "reported", report: await reportRun(plan, summary, cache, o.out, { scale, device }) };
  });
}
