// `stitchlab run FILE`: an experiment file through the planner and the cache; `stitchlab task KEY`:
// one task of a planned graph, by hand (as each worker process runs it: experiments/worker.ts);
// `stitchlab schema`: the experiment file's JSON Schema for editors.
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import cliProgress from "cli-progress";
import type { Command } from "commander";
import { disposeDataset, loadDataset } from "../data/index.js";
import { isDone, partials, readFailure } from "../experiments/cache.js";
import { formatLocalStatus, localStatus, readLocalRun, recordLocalRun } from "../experiments/local.js";
import { type Plan, planExperiment, type Task } from "../experiments/plan.js";
import { writeResults } from "../experiments/results.js";
import { type RunEvent, type RunSummary, runPlan } from "../experiments/runner.js";
import {
  formatStatus,
  readSlurmRun,
  SLURM_DEFAULTS,
  type SlurmOptions,
  type Submission,
  slurmRunPath,
  slurmStatus,
  submitPlan,
} from "../experiments/slurm.js";
import { type Experiment, experimentJsonSchema, readExperiment } from "../experiments/spec.js";
import { agreementTable, residualTable } from "../experiments/summary.js";
import { runTaskOfCache } from "../experiments/tasks.js";
import { repoRoot } from "../torch/files.js";
import { deviceArg, requireDevice } from "./device.js";
import { int, oneOf } from "./parse.js";

/** The cache experiments share: --cache, else $STITCHLAB_CACHE, else $XDG_CACHE_HOME/stitchlab (~/.cache/stitchlab). */
export function defaultCache(): string {
  return process.env.STITCHLAB_CACHE ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "stitchlab");
}

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

/** How much of a run's time a task kind takes, roughly (the demo: train 80 s, IRIs 40 s, a stitch 8 s). */
const TASK_WEIGHT: Record<string, number> = { train: 10, iris: 5, stitch: 1 };

/** The finished share of a running task, from its progress fields (0 when they say nothing). */
function taskFraction(fields: Record<string, number | string> | undefined): number {
  const f = fields ?? {};
  const n = (k: string) => (typeof f[k] === "number" ? (f[k] as number) : Number.NaN);
  if (n("epochs") > 0)
    return Math.min(1, (n("epoch") - 1 + (n("steps") > 0 ? n("step") / n("steps") : 0)) / n("epochs"));
  if (n("batches") > 0) return Math.min(1, (n("batch") - 1) / n("batches"));
  return 0;
}

/**
 * On a terminal: one overall bar for the whole run, weighted by task kind, with the running
 * tasks' labels and an ETA; failures are printed above it. Elsewhere: eventPrinter's lines.
 */
export function overallProgress(todo: Task[]): { onEvent: (e: RunEvent) => void; stop: () => void } {
  if (!process.stderr.isTTY) return { onEvent: eventPrinter(), stop: () => {} };
  const weight = (t: Task) => TASK_WEIGHT[t.kind] ?? 1;
  const total = todo.reduce((s, t) => s + weight(t), 0);
  const multi = new cliProgress.MultiBar(
    {
      format: "run [{bar}] {percentage}% | {tasks} | ETA {eta_formatted}",
      stream: process.stderr,
      hideCursor: true,
      etaBuffer: 50,
    },
    cliProgress.Presets.shades_classic,
  );
  const bar = multi.create(total, 0, { tasks: "starting" });
  let finished = 0;
  let ended = 0;
  const running = new Map<string, { task: Task; fraction: number }>();
  const redraw = () => {
    let value = finished;
    for (const r of running.values()) value += weight(r.task) * r.fraction;
    const labels = [...running.values()].map((r) => r.task.label);
    bar.update(Math.min(total, value), { tasks: `${ended}/${todo.length} tasks; ${labels.join("; ") || "-"}` });
  };
  return {
    onEvent(e) {
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
    stop: () => multi.stop(),
  };
}

/** Progress lines on stderr: one per task start/end, and at most one progress line a second. */
export function eventPrinter(): (e: RunEvent) => void {
  let last = 0;
  return (e) => {
    const tag = `[${e.index}/${e.total}]`;
    if (e.kind === "start") console.error(`${tag} ${e.task.label} ...`);
    else if (e.kind === "done") console.error(`${tag} ${e.task.label}: done in ${e.seconds?.toFixed(1)} s`);
    else if (e.kind === "failed") console.error(`${tag} ${e.task.label}: FAILED: ${e.error}`);
    else if (e.kind === "skipped") console.error(`${tag} ${e.task.label}: skipped (${e.error})`);
    else if (Date.now() - last > 2000) {
      last = Date.now();
      console.error(
        `${tag}   ${Object.entries(e.fields ?? {})
          // A value not known yet (NaN, or null from a worker's JSON) is left out, never printed.
          .filter(([, v]) => v !== null && !(typeof v === "number" && !Number.isFinite(v)))
          .map(([k, v]) => `${k} ${v}`)
          .join(", ")}`,
      );
    }
  };
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

/** Points the experiment's dataset (and models' own datasets of the same name) at dir. */
function withDataDir(exp: Experiment, dir: string): void {
  const name = exp.dataset.name;
  exp.dataset.root = resolve(dir);
  for (const m of Object.values(exp.models))
    if ("dataset" in m && m.dataset?.name === name) m.dataset.root = resolve(dir);
}

/** Writes the experiment folder from the cache and prints the table, the residuals and a reading. */
async function report(
  plan: Plan,
  summary: RunSummary,
  cache: string,
  out: string,
  scale: string,
  read: boolean,
  device: string,
): Promise<void> {
  // The device the tasks ran on (not where this report is written: a Slurm report job has no GPU).
  const { rows, iris, reading, kept } = await writeResults(plan, summary, cache, out, { scale, device });
  if (kept) {
    console.error(
      `no stitch finished: ${out} keeps the report of an earlier run (report.html, results.csv); fix what failed above and run again`,
    );
    return;
  }
  console.log(
    `agreement probability (larger = more similar; mean ± 95% half-width over replicates):\n${agreementTable(rows)}`,
  );
  if (iris.length) console.log(`\nIRI residuals (relative; 0.1 or less is a good IRI):\n${residualTable(iris)}`);
  if (read) console.log(`\nReading:\n${reading.map((l) => `- ${l}`).join("\n")}`);
  const failed = Object.keys(summary.errors).length;
  console.log(
    `\n${out}: report.html, results.csv (${rows.length} runs); ${summary.seconds.toFixed(0)} s` +
      (failed ? `; ${failed} task(s) failed or not run, see run.json` : ""),
  );
}

/** A summary read from the cache alone (for a run made by Slurm jobs): done, failed, or not run. */
function summaryFromCache(plan: Plan, cache: string): RunSummary {
  const states: RunSummary["states"] = {};
  const errors: RunSummary["errors"] = {};
  for (const t of plan.tasks) {
    if (isDone(cache, t.key)) states[t.key] = "ran";
    else {
      const f = readFailure(cache, t.key);
      states[t.key] = f ? "failed" : "skipped";
      errors[t.key] = f ? f.error : "not run";
    }
  }
  return { states, errors, seconds: 0 };
}

/** A folder that holds neither a local run's record nor a Slurm run's: one clear error. */
function requireRun(out: string): void {
  if (!readLocalRun(out) && !existsSync(slurmRunPath(out)))
    throw new Error(
      `${out} holds no stitchlab run (neither local/run.json nor slurm/run.json): start one with stitchlab run FILE --out ${out}`,
    );
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

export interface RunCommandOptions {
  out: string;
  cache?: string;
  scale?: string;
  workers?: number;
  dryRun?: boolean;
  dataDir?: string;
  read?: boolean;
  device?: string;
  executor?: "local" | "slurm";
  slurm?: Partial<SlurmOptions>;
  /** slurm: cancel this experiment's queued or running jobs and submit them again. */
  resubmit?: boolean;
}

/**
 * Plans, runs and reports an experiment; returns the number of failed or skipped tasks. With the
 * Slurm executor it submits the unfinished tasks and returns at once (0), or reports straight
 * away when the cache already holds everything.
 */
export async function runExperiment(file: string, o: RunCommandOptions): Promise<number> {
  const cache = resolve(o.cache ?? defaultCache());
  const exp = readExperiment(file, o.scale);
  if (o.dataDir) withDataDir(exp, o.dataDir);
  const plan = planExperiment(exp, file);
  // The scale applied (the file's small one when none is named), as env.json and status record it.
  const scale = exp.appliedScale ?? "default";
  const device = o.device ?? "cpu";
  if (o.dryRun) {
    await checkData(exp);
    console.log(dryRun(plan, cache));
    return 0;
  }
  if (o.executor === "slurm") {
    const out = resolve(o.out);
    const options: SlurmOptions = { ...SLURM_DEFAULTS, ...o.slurm, device };
    const sub = submitPlan(plan, { file: resolve(file), scale, cache, out, options, resubmit: o.resubmit });
    if (sub.jobs.length || sub.reused.length) {
      printSubmission(sub, out);
      return 0;
    }
    console.log("every task is in the cache; nothing to submit");
    const summary = summaryFromCache(plan, cache);
    await report(plan, summary, cache, out, scale, Boolean(o.read), device);
    return Object.keys(summary.errors).length;
  }
  requireDevice(device);
  // Before any task: `stitchlab status` and `report` read the run from here (experiments/local.ts).
  recordLocalRun(resolve(o.out), { plan, cache, scale, device });
  const progress = overallProgress(plan.tasks.filter((t) => !isDone(cache, t.key)));
  // Ctrl-C (SIGINT) or SIGTERM: the runner ends its worker processes and waits for them, so that
  // none is left holding a task's lock for the next run to wait on; finished tasks are in the
  // cache, and a task under way resumes (IRI sets) or restarts. A second signal while the workers
  // end is not caught: it ends this process at once (the workers then end themselves).
  const stop = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => stop.abort(signal);
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  let summary: RunSummary;
  try {
    summary = await runPlan(plan, {
      cache,
      workers: o.workers,
      device,
      onEvent: progress.onEvent,
      signal: stop.signal,
    });
  } catch (e) {
    if (!stop.signal.aborted) throw e;
    progress.stop();
    console.error(
      `\ninterrupted: finished tasks are kept in the cache (${cache}); run the same command again to go on (stitchlab status ${o.out} shows where it stands)`,
    );
    // The shell's convention, 128 + the signal's number, as if the signal had ended the process.
    process.exit(stop.signal.reason === "SIGTERM" ? 143 : 130);
  } finally {
    process.removeListener("SIGINT", onSignal);
    process.removeListener("SIGTERM", onSignal);
  }
  progress.stop();
  await report(plan, summary, cache, o.out, scale, Boolean(o.read), device);
  return Object.keys(summary.errors).length;
}

const collect = (v: string, prev: string[]) => [...prev, v];

export function registerRunCommands(program: Command): void {
  program
    .command("run <file>")
    .description("run an experiment file (YAML or JSON): train -> iris -> stitch -> report, reusing the cache")
    .requiredOption(
      "--out <dir>",
      "experiment folder: report.html, results.csv, figures/, plan.json, run.json, env.json",
    )
    .option("--cache <dir>", "task cache shared by experiments (default $STITCHLAB_CACHE or ~/.cache/stitchlab)")
    .option("--scale <name>", "one of the file's scales (small, paper); default small when it has one")
    .option("--workers <n>", "tasks at once, each in its own process with its share of the cores", int, 1)
    .option("--dry-run", "print the task graph (per kind: cached, to run) and stop")
    .option("--data-dir <dir>", "the experiment dataset's root (overrides the file)")
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
    .option("--resubmit", "slurm: cancel this experiment's queued or running jobs and submit them with these options")
    .action(async (file: string, o) => {
      const executor = oneOf("--executor", ["local", "slurm"] as const, o.executor);
      if (executor === "slurm" && o.workers !== 1)
        throw new Error("--workers is for the local executor; with slurm every task is its own job");
      const failed = await runExperiment(file, {
        ...o,
        executor,
        read: true,
        slurm: {
          partition: o.partition,
          gres: o.gres,
          time: o.time,
          cpusPerTask: Math.max(1, o.cpusPerTask),
          mem: o.mem,
          retries: o.retries,
          sbatchArgs: o.sbatchArg,
          setup: o.jobSetup,
        },
      });
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
    .action(async (dir: string) => {
      const out = resolve(dir);
      const local = readLocalRun(out);
      if (local && !existsSync(slurmRunPath(out))) {
        await report(
          local.plan,
          summaryFromCache(local.plan, local.cache),
          local.cache,
          out,
          local.scale,
          true,
          local.device,
        );
        return;
      }
      requireRun(out);
      const run = readSlurmRun(out);
      const summary = summaryFromCache(run.plan, run.cache);
      // Exits 0 when the report is written, failed tasks or not (the report job's own state
      // should say whether the report was made); `stitchlab status` shows the failures.
      await report(run.plan, summary, run.cache, out, run.scale, true, run.options.device);
    });

  program
    .command("demo")
    .description(
      "the main job: Fashion-MNIST, narrow ResNet-18s; standard and invariance-aware stitching for the pairs " +
        "identical, cross-seed and cross-bias; prints the table, the IRI residuals and a reading; writes report.html",
    )
    .option("--out <dir>", "experiment folder", "runs/demo")
    .option(
      "--data-dir <dir>",
      "where Fashion-MNIST's IDX files are (default: Debian's /usr/share/datasets/fashion-mnist)",
    )
    .option("--cache <dir>", "task cache (default $STITCHLAB_CACHE or ~/.cache/stitchlab)")
    .option("--workers <n>", "tasks at once", int, 2)
    .option("--device <d>", "cpu, cuda or cuda:N", deviceArg, "cpu")
    .option("--dry-run", "print the task graph and stop")
    .action(async (o) => {
      const failed = await runExperiment(join(repoRoot, "presets", "demo.yaml"), { ...o, read: true });
      if (failed) process.exitCode = 1;
    });

  program
    .command("task <key>")
    .description("run one task of a planned graph (idempotent: exits at once when its output exists)")
    .option("--cache <dir>", "the cache the task was planned in", defaultCache())
    .option("--device <d>", "cpu, cuda or cuda:N", deviceArg, "cpu")
    // The worker's own function (experiments/worker.ts), for running or debugging a task by hand.
    .action((key: string, o: { cache: string; device: string }) => runTaskOfCache(resolve(o.cache), key, o.device));

  program
    .command("schema")
    .description("print the JSON Schema of experiment files (for editor completion)")
    .action(() => console.log(JSON.stringify(experimentJsonSchema(), null, 2)));
}
