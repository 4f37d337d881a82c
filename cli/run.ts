// `stitchlab run FILE` and `stitchlab demo`: an experiment file through the planner and the cache
// (experiments/run.ts runs it; this shows its progress and prints what it returns); `stitchlab
// status` and `report DIR`: a run's folder (experiments/report.ts); `stitchlab task KEY`: one task
// of a planned graph, by hand (as each worker process runs it: experiments/worker.ts); `stitchlab
// schema`: the experiment file's JSON Schema for editors.
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import cliProgress from "cli-progress";
import type { Command } from "commander";
import { formatLocalStatus, localStatus, readLocalRun } from "../experiments/local.js";
import type { Task } from "../experiments/plan.js";
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
import { experimentJsonSchema } from "../experiments/spec.js";
import { runTaskOfCache } from "../experiments/tasks.js";
import { repoRoot } from "../io/files.js";
import type { Device } from "../torch/index.js";
import { deviceArg } from "./device.js";
import { int, oneOf } from "./parse.js";

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
export function overallProgress(todo: Task[]): ProgressDisplay {
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

/**
 * Progress lines on stderr (`write`): one per task start and end, and for each running task at
 * most one progress line every 2 s, which names the task. The wait is per task: with several
 * workers, one shared wait printed whichever task spoke first after it, so a task's lines came
 * and went, and its progress read as if it continued the task printed before it (issue 23).
 */
export function eventPrinter(write: (line: string) => void = (line) => console.error(line)): (e: RunEvent) => void {
  const last = new Map<string, number>();
  return (e) => {
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
    if (e.kind !== "start" && e.kind !== "progress") last.delete(e.task.key);
  };
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
  /** Lines printed before the report (`stitchlab compare`'s verdict). */
  lead?: (r: RunReport) => string[],
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
    const shown = overallProgress(todo);
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

/** The flags of where a run's tasks go, `run`'s and `compare`'s: --workers, --device, --executor and Slurm's. */
export function addExecutorOptions(cmd: Command): Command {
  return cmd
    .option("--workers <n>", "tasks at once, each in its own process with its share of the cores", int, 1)
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
  if (executor === "slurm" && o.workers !== 1)
    throw new Error("--workers is for the local executor; with slurm every task is its own job");
  return {
    executor,
    workers: o.workers as number,
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
    .option("--dry-run", "print the task graph (per kind: cached, to run) and stop")
    .option("--data-dir <dir>", "the experiment dataset's root (overrides the file)");
  addExecutorOptions(run).action(async (file: string, o) => {
    const failed = await runCommand(file, { ...o, ...executorOptions(o) });
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
    .option("--force", "run into an --out that holds another run (e.g. another --seed's); its files are moved aside")
    .option(
      "--seed <s>",
      "shift every seed of the study by s (models, IRI starts, stitching): another draw of the same demo",
      int,
      0,
    )
    .action(async (o) => {
      const failed = await runCommand(join(repoRoot, "presets", "demo.yaml"), o);
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
