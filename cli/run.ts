import { join, resolve } from "node:path";
import type { Command } from "commander";
import type { Task } from "../experiments/plan.js";
import { type RunReport, reportText } from "../experiments/report.js";
import {
  defaultCache,
  type ExperimentOptions,
  type ProgressDisplay,
  RunInterrupted,
  runExperiment,
} from "../experiments/run.js";
import { SLURM_DEFAULTS, type Submission } from "../experiments/slurm.js";
import { experimentJsonSchema } from "../experiments/spec.js";
import { runTaskOfCache } from "../experiments/tasks.js";
import type { Device } from "../torch/index.js";
import { DEVICE_HELP, deviceOption } from "./device.js";
import { int, oneOf, renamedFlag } from "./parse.js";
import { overallProgress, type ProgressOptions } from "./run-progress.js";

export function printReport(r: RunReport): void {
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
export const WORKERS_HELP = `tasks at once, each in its own process with its share of the cores (default ${DEFAULT_WORKERS}: on 2 cores, two one-thread tasks, as the demo's timings were measured; 1 runs tasks in this process on every core)`;

/** --workers' value: given, or the default (the local executor's; slurm's is one task per job). */
export const workersOf = (o: Record<string, unknown>, executor: "local" | "slurm" = "local"): number =>
  (o.workers as number | undefined) ?? (executor === "slurm" ? 1 : DEFAULT_WORKERS);

/** --root, or the deprecated --data-dir (said once on stderr): the experiment dataset's root, else undefined. */
export const rootOf = (o: Record<string, unknown>): string | undefined =>
  renamedFlag(o, "--data-dir", "--root") as string | undefined;

/**
 * --root and its deprecated alias --data-dir, of run and demo: the name the other commands use.
 * They take no --dataset, by decision: the experiment file (the demo's: presets/demo.yaml) names
 * its dataset, and its models, pairs and sizes are chosen for it, so a flag that swapped the
 * dataset would run another experiment under the file's name. Where the files are is the
 * machine's business, so --root may move them; another dataset is another file.
 */
export function addRootOptions(cmd: Command, help: string): Command {
  return cmd.option("--root <path>", help).option("--data-dir <dir>", "deprecated: use --root");
}

/** The flags of where a run's tasks go, `run`'s and `compare`'s: --workers, --device, --executor and Slurm's. */
export function addExecutorOptions(cmd: Command): Command {
  return deviceOption(
    cmd.option("--workers <n>", WORKERS_HELP, int),
    `where tasks run: ${DEVICE_HELP} (not part of the cache keys)`,
  )
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

  const task = program
    .command("task <key>")
    .description("run one task of a planned graph (idempotent: exits at once when its output exists)")
    .option("--cache <dir>", "the cache the task was planned in", defaultCache());
  deviceOption(task)
    // The worker's own function (experiments/worker.ts), for running or debugging a task by hand.
    .action((key: string, o: { cache: string; device: Device }) => runTaskOfCache(resolve(o.cache), key, o.device));

  program
    .command("schema")
    .description("print the JSON Schema of experiment files (for editor completion)")
    .action(() => console.log(JSON.stringify(experimentJsonSchema(), null, 2)));
}
