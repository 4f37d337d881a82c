// The Slurm executor: a plan's unfinished tasks become sbatch jobs whose --dependency=afterok
// lists mirror the task graph, plus one report job that runs after all of them. stitchlab does
// no scheduling of its own: Slurm starts, orders and cancels jobs; the cache (on the shared
// filesystem) says what is finished. Each job runs one task in the worker script
// (experiments/worker.ts, as `stitchlab task KEY` does), which is idempotent, so a job can be run
// again by hand to debug it; the report job runs the worker's report mode (`stitchlab report OUT`).
//
// Where things are written:
//   <cache>/jobs/<key>.json   the Slurm jobs ever submitted for a task (last one current); shared
//                             by every experiment using the cache, so a task two experiments
//                             need is submitted once while its job is alive
//   <out>/slurm/run.json      the plan, the cache, the scale and the report job (for `status`
//                             and `report`)
//   <out>/slurm/logs/         one log per job: <key>.<jobid>.log
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { readJsonFile, writeFileAtomic } from "../io/files.js";
import { DEFAULT_DEVICE, type Device } from "../torch/index.js";
import { isDone, readFailure, saveTasks } from "./cache.js";
import type { Plan, Task } from "./plan.js";
import { type JobState, jobStates, LIVE } from "./squeue.js";
import { reportCommand, taskCommand } from "./tasks.js";

export interface SlurmOptions {
  partition?: string;
  /** e.g. gpu:1 */
  gres?: string;
  /** Slurm's time format: minutes, HH:MM:SS, D-HH:MM:SS. */
  time?: string;
  cpusPerTask: number;
  /** e.g. 16G; absent: the partition's default. */
  mem?: string;
  /** Anything else, passed to sbatch as given (--account=x, --qos=y, --constraint=z). */
  sbatchArgs: string[];
  /** How many times a failed task is run again inside its job before the job fails. */
  retries: number;
  /** The device the tasks run on (cpu, cuda, cuda:N); not part of any task's key. */
  device: Device;
  /** Shell lines each job runs first (module load ..., source venv/bin/activate). */
  setup?: string;
}

export const SLURM_DEFAULTS: SlurmOptions = { cpusPerTask: 1, sbatchArgs: [], retries: 1, device: DEFAULT_DEVICE };

export interface SlurmRun {
  file: string;
  scale: string;
  cache: string;
  out: string;
  options: SlurmOptions;
  plan: Plan;
  reportJob: string | null;
  submitted: string;
}

export interface Submission {
  /** Jobs submitted now, in dependency order. */
  jobs: { key: string; label: string; jobId: string; deps: string[] }[];
  /** Tasks whose job from an earlier submission is still queued or running (reused, not resubmitted). */
  reused: { key: string; label: string; jobId: string }[];
  cached: number;
  reportJob: string | null;
  /** Things the user should know (kept jobs with other options). */
  warnings: string[];
}

const jobsPath = (cache: string, key: string) => join(cache, "jobs", `${key}.json`);
export const slurmRunPath = (out: string) => join(out, "slurm", "run.json");

function sh(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replaceAll("'", "'\\''")}'`;
}

/** Runs a Slurm client command; its failure becomes an error naming the command and Slurm's words. */
function slurm(cmd: string, args: string[], input?: string): string {
  const r = spawnSync(cmd, args, { encoding: "utf8", input });
  if (r.error)
    throw new Error(
      `${cmd} could not be run (${(r.error as NodeJS.ErrnoException).code ?? r.error.message}): is this a Slurm login node? ` +
        "Install Slurm's client commands or run without --executor slurm",
    );
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed: ${(r.stderr || r.stdout).trim()}`);
  return r.stdout;
}

/** The job ids recorded for a task, oldest first. */
export function taskJobs(cache: string, key: string): string[] {
  const p = jobsPath(cache, key);
  return existsSync(p) ? readJsonFile<{ jobs: string[] }>(p, "a task's Slurm jobs").jobs : [];
}

function recordJob(cache: string, key: string, jobId: string): void {
  mkdirSync(join(cache, "jobs"), { recursive: true });
  const jobs = [...taskJobs(cache, key), jobId];
  writeFileAtomic(jobsPath(cache, key), [`${JSON.stringify({ key, jobs }, null, 2)}\n`]);
}

/** sbatch's arguments for one job (everything but the script, which goes to stdin). */
export function sbatchArgs(o: SlurmOptions, name: string, log: string, deps: string[], depKind: string): string[] {
  const args = ["--parsable", `--job-name=${name}`, `--output=${log}`, `--cpus-per-task=${o.cpusPerTask}`];
  if (o.partition) args.push(`--partition=${o.partition}`);
  if (o.gres) args.push(`--gres=${o.gres}`);
  if (o.time) args.push(`--time=${o.time}`);
  if (o.mem) args.push(`--mem=${o.mem}`);
  if (deps.length) {
    args.push(`--dependency=${depKind}:${deps.join(":")}`);
    // A job whose dependency failed or was cancelled is cancelled by Slurm, not left pending forever.
    args.push(`--kill-on-invalid-dep=${depKind === "afterok" ? "yes" : "no"}`);
  }
  return [...args, ...o.sbatchArgs];
}

/** The batch script of one task: `stitchlab task KEY`, retried, with start and end lines in the log. */
export function taskScript(o: SlurmOptions, cache: string, key: string): string {
  const cmd = [process.execPath, ...taskCommand(cache, key), "--device", o.device].map(sh).join(" ");
  return [
    "#!/bin/bash",
    // The setup first: activate scripts and module systems may read unset variables.
    ...(o.setup ? [o.setup] : []),
    "set -u",
    // Each job uses the cores Slurm gave it, no more.
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell expansion, not a template
    "export STITCHLAB_THREADS=${SLURM_CPUS_PER_TASK:-1}",
    `echo "stitchlab-job start $(date +%s.%N) job $SLURM_JOB_ID on $(hostname) task ${key}"`,
    `echo "stitchlab-job command:" ${sh(cmd)}`,
    `for attempt in $(seq 1 ${o.retries + 1}); do`,
    `  if STITCHLAB_ATTEMPT=$attempt ${cmd}; then`,
    `    echo "stitchlab-job end $(date +%s.%N) ok attempt $attempt"`,
    "    exit 0",
    "  fi",
    `  echo "stitchlab-job attempt $attempt of ${o.retries + 1} failed"`,
    "done",
    `echo "stitchlab-job end $(date +%s.%N) failed"`,
    "exit 1",
    "",
  ].join("\n");
}

function reportScript(o: SlurmOptions, out: string): string {
  const cmd = [process.execPath, ...reportCommand(out)].map(sh).join(" ");
  return ["#!/bin/bash", ...(o.setup ? [o.setup] : []), "set -u", cmd, ""].join("\n");
}

function submit(args: string[], script: string): string {
  // --parsable prints "jobid" or "jobid;cluster".
  return slurm("sbatch", args, script).trim().split(";")[0];
}

/**
 * Submits every unfinished task of the plan whose job is not already queued or running, in
 * dependency order, then a report job after all of them. Returns at once; Slurm does the rest.
 * A live job is kept unless `resubmit` is set or a task it needs is submitted anew now (its
 * dependency would then point at a dead job); kept jobs keep the options they were submitted with.
 * If sbatch fails part-way (a submit limit, say), what was submitted is recorded before the
 * error, which says how many went in: running the command again submits the rest.
 */
export function submitPlan(
  plan: Plan,
  run: { file: string; scale: string; cache: string; out: string; options: SlurmOptions; resubmit?: boolean },
): Submission {
  const { cache, out, options } = run;
  saveTasks(cache, plan.tasks);
  const logs = join(out, "slurm", "logs");
  mkdirSync(logs, { recursive: true });
  const earlier = existsSync(slurmRunPath(out)) ? readSlurmRun(out) : null;
  const todo = plan.tasks.filter((t) => !isDone(cache, t.key));
  const latest = new Map(todo.map((t) => [t.key, taskJobs(cache, t.key).at(-1)]));
  const states = jobStates([...latest.values(), earlier?.reportJob].filter((j): j is string => !!j));
  const live = (id: string | null | undefined) => !!id && LIVE.has(states.get(id)?.state ?? "");
  const jobOf = new Map<string, string>();
  const fresh = new Set<string>();
  const result: Submission = {
    jobs: [],
    reused: [],
    cached: plan.tasks.length - todo.length,
    reportJob: null,
    warnings: [],
  };
  const record = () => {
    const r: SlurmRun = { ...run, plan, reportJob: result.reportJob, submitted: new Date().toISOString() };
    writeFileAtomic(slurmRunPath(out), [`${JSON.stringify(r, null, 2)}\n`]);
  };
  try {
    for (const t of todo) {
      const prev = latest.get(t.key);
      if (prev && live(prev)) {
        if (!run.resubmit && !t.deps.some((d) => fresh.has(d))) {
          jobOf.set(t.key, prev);
          result.reused.push({ key: t.key, label: t.label, jobId: prev });
          continue;
        }
        slurm("scancel", [prev]);
      }
      const deps = [
        ...new Set(
          t.deps
            .filter((d) => !isDone(cache, d))
            .map((d) => {
              const id = jobOf.get(d);
              if (!id) throw new Error(`${t.label}: no job for the task it needs, ${d} (the plan is out of order)`);
              return id;
            }),
        ),
      ];
      const args = sbatchArgs(options, jobName(t), join(logs, `${t.key}.%j.log`), deps, "afterok");
      const jobId = submit(args, taskScript(options, cache, t.key));
      recordJob(cache, t.key, jobId);
      jobOf.set(t.key, jobId);
      fresh.add(t.key);
      result.jobs.push({ key: t.key, label: t.label, jobId, deps });
    }
  } catch (e) {
    // An earlier report job, if any, was left alone: it is still the one to show.
    result.reportJob = earlier?.reportJob ?? null;
    record();
    throw new Error(
      `${(e as Error).message}\n${result.jobs.length} of the ${todo.length - result.reused.length} jobs to submit went in ` +
        `(recorded; \`stitchlab status ${out}\` shows them); run the same command again to submit the rest`,
    );
  }
  if (result.reused.length && earlier && JSON.stringify(earlier.options) !== JSON.stringify(options))
    result.warnings.push(
      `${result.reused.length} job(s) still queued or running keep the options they were submitted with, ` +
        "which differ from these; add --resubmit to cancel and submit them with these",
    );
  const waitFor = [...jobOf.values()];
  // An earlier submission's report job still waiting would report a superseded state: the new
  // one (after every job, old and new) replaces it. One already running is left to finish.
  if (earlier?.reportJob && waitFor.length && states.get(earlier.reportJob)?.state === "PENDING")
    slurm("scancel", [earlier.reportJob]);
  if (waitFor.length) {
    // The report needs one core and no GPU; the partition and --sbatch-arg (an account) stay.
    const args = sbatchArgs(
      { ...options, gres: undefined, cpusPerTask: 1 },
      `stitchlab-report-${plan.experiment.name}`,
      join(logs, "report.%j.log"),
      waitFor,
      "afterany",
    );
    result.reportJob = submit(args, reportScript(options, out));
  }
  record();
  return result;
}

const jobName = (t: Task) => `stitchlab-${t.key}`;

export function readSlurmRun(out: string): SlurmRun {
  const p = slurmRunPath(out);
  if (!existsSync(p))
    throw new Error(`${out} holds no Slurm run (${p} not found); submit one with stitchlab run FILE --executor slurm`);
  return readJsonFile<SlurmRun>(p, "a Slurm run's record");
}

export type TaskStatus = "done" | "running" | "pending" | "failed" | "cancelled" | "missing";

export interface TaskReport {
  key: string;
  label: string;
  status: TaskStatus;
  jobId: string | null;
  /** Slurm's state and reason, when Slurm knows the job. */
  slurm: string | null;
  error: string | null;
  log: string | null;
}

/**
 * Each task's state, from the cache (done, and the error a failed attempt recorded) and from
 * Slurm (pending, running, failed, cancelled). "missing": not done and no job will run it (never
 * submitted, or its job is gone without finishing): `stitchlab run` submits it again.
 */
export function slurmStatus(out: string): { run: SlurmRun; tasks: TaskReport[]; report: JobState | null } {
  const run = readSlurmRun(out);
  const { cache, plan } = run;
  const latest = new Map(plan.tasks.map((t) => [t.key, taskJobs(cache, t.key).at(-1) ?? null]));
  const ids = [...latest.values(), run.reportJob].filter((j): j is string => !!j);
  const states = jobStates(ids);
  const tasks = plan.tasks.map((t): TaskReport => {
    const jobId = latest.get(t.key) ?? null;
    const js = jobId ? states.get(jobId) : undefined;
    // A failure recorded by an earlier job is history, not this job's error.
    const recorded = readFailure(cache, t.key);
    const failure = recorded && (!jobId || !recorded.job || recorded.job === jobId) ? recorded : null;
    const log = jobId ? join(out, "slurm", "logs", `${t.key}.${jobId}.log`) : null;
    const base = {
      key: t.key,
      label: t.label,
      jobId,
      slurm: js ? `${js.state}${js.reason && js.reason !== "None" ? ` (${js.reason})` : ""}` : null,
      log: log && existsSync(log) ? log : null,
    };
    if (isDone(cache, t.key)) return { ...base, status: "done", error: null };
    const state = js?.state ?? "";
    if (state === "RUNNING" || state === "COMPLETING" || state === "CONFIGURING")
      return { ...base, status: "running", error: null };
    if (LIVE.has(state)) return { ...base, status: "pending", error: null };
    if (state === "CANCELLED" || state === "PREEMPTED" || state === "DEADLINE")
      return {
        ...base,
        status: "cancelled",
        error: js?.reason === "DependencyNeverSatisfied" ? "a task it needs failed or was cancelled" : null,
      };
    if (state || failure) return { ...base, status: "failed", error: failure?.error ?? `Slurm: ${state}` };
    return { ...base, status: "missing", error: null };
  });
  return { run, tasks, report: run.reportJob ? (states.get(run.reportJob) ?? null) : null };
}

function reportFile(out: string): string {
  const p = join(out, "report.html");
  return existsSync(p) ? `${p} (written ${statSync(p).mtime.toISOString()})` : `${p} not written yet`;
}

export function formatStatus(s: ReturnType<typeof slurmStatus>): string {
  const order: TaskStatus[] = ["done", "running", "pending", "failed", "cancelled", "missing"];
  const count = (k: TaskStatus) => s.tasks.filter((t) => t.status === k).length;
  const lines = [
    `${s.run.plan.experiment.name} (${s.run.scale}): ${s.tasks.length} tasks: ${order.map((k) => `${count(k)} ${k}`).join(", ")}`,
    `cache: ${s.run.cache}`,
  ];
  for (const k of order.slice(1)) {
    const ts = s.tasks.filter((t) => t.status === k);
    if (!ts.length) continue;
    lines.push(`${k}:`);
    for (const t of ts)
      lines.push(
        `  ${t.jobId ?? "-"}\t${t.label}${t.slurm ? `  [${t.slurm}]` : ""}${t.error ? `: ${t.error}` : ""}${t.log ? `\n\t  log: ${t.log}` : ""}`,
      );
  }
  if (s.run.reportJob)
    lines.push(
      `report job ${s.run.reportJob}: ${s.report ? s.report.state : "unknown to Slurm now"}; ${reportFile(s.run.out)}`,
    );
  if (count("missing") + count("failed") + count("cancelled"))
    lines.push("`stitchlab run` again (same file and --out) submits only what is missing.");
  return lines.join("\n");
}
