// The Slurm executor: a plan's unfinished tasks become sbatch jobs whose --dependency=afterok
// lists mirror the task graph, plus one report job that runs after all of them. stitchlab does
// no scheduling of its own: Slurm starts, orders and cancels jobs; the cache (on the shared
// filesystem) says what is finished. Each job runs `stitchlab task KEY`, which is idempotent,
// so a job can be run again by hand to debug it.
//
// Where things are written:
//   <cache>/jobs/<key>.json   the Slurm jobs ever submitted for a task (last one current); shared
//                             by every experiment using the cache, so a task two experiments
//                             need is submitted once while its job is alive
//   <out>/slurm/run.json      the plan, the cache, the scale and the report job (for `status`
//                             and `report`)
//   <out>/slurm/logs/         one log per job: <key>.<jobid>.log
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import * as torch from "../torch/index.js";
import type { Plan, Task } from "./plan.js";
import { cliCommand, isDone, readFailure, saveTasks, taskCommand } from "./tasks.js";

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
  /** The device the tasks run on (cpu, cuda); not part of any task's key. */
  device: string;
  /** Shell lines each job runs first (module load ..., source venv/bin/activate). */
  setup?: string;
}

export const SLURM_DEFAULTS: SlurmOptions = { cpusPerTask: 1, sbatchArgs: [], retries: 1, device: "cpu" };

/** Slurm's job states that mean the job may still run the task. */
const LIVE = new Set(["PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED"]);

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
  return existsSync(p) ? (JSON.parse(readFileSync(p, "utf8")).jobs as string[]) : [];
}

function recordJob(cache: string, key: string, jobId: string): void {
  mkdirSync(join(cache, "jobs"), { recursive: true });
  const jobs = [...taskJobs(cache, key), jobId];
  torch.writeFileAtomic(jobsPath(cache, key), [`${JSON.stringify({ key, jobs }, null, 2)}\n`]);
}

export interface JobState {
  state: string;
  reason: string;
}

/**
 * Slurm's view of the given jobs: squeue (which also lists jobs finished within MinJobAge),
 * then sacct for older ones where accounting is on. Jobs Slurm no longer knows are absent.
 */
export function jobStates(ids: string[]): Map<string, JobState> {
  const states = new Map<string, JobState>();
  if (!ids.length) return states;
  const r = spawnSync("squeue", ["-h", "--states=all", "-j", ids.join(","), "-o", "%i|%T|%r"], { encoding: "utf8" });
  if (r.error) throw new Error(`squeue could not be run (${r.error.message}): is this a Slurm login node?`);
  // With only unknown ids squeue exits 1 ("Invalid job id specified"): none known, not an error.
  if (r.status !== 0 && !/Invalid job id/i.test(r.stderr)) throw new Error(`squeue failed: ${r.stderr.trim()}`);
  for (const line of r.stdout.trim().split("\n")) {
    const [id, state, reason] = line.split("|");
    if (id && state) states.set(id, { state, reason: reason ?? "" });
  }
  const unknown = ids.filter((i) => !states.has(i));
  if (unknown.length) {
    const a = spawnSync("sacct", ["-n", "-P", "-X", "-j", unknown.join(","), "-o", "JobIDRaw,State"], {
      encoding: "utf8",
    });
    if (!a.error && a.status === 0)
      for (const line of a.stdout.trim().split("\n")) {
        const [id, state] = line.split("|");
        // sacct writes "CANCELLED by 0"; the first word is the state.
        if (id && state) states.set(id, { state: state.split(" ")[0], reason: "" });
      }
  }
  return states;
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
    "set -u",
    ...(o.setup ? [o.setup] : []),
    // Each job uses the cores Slurm gave it, no more.
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell expansion, not a template
    "export STITCHLAB_THREADS=${SLURM_CPUS_PER_TASK:-1}",
    `echo "stitchlab-job start $(date +%s.%N) job $SLURM_JOB_ID on $(hostname) task ${key}"`,
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
  const cmd = [process.execPath, ...cliCommand("report", out)].map(sh).join(" ");
  return ["#!/bin/bash", "set -u", ...(o.setup ? [o.setup] : []), cmd, ""].join("\n");
}

function submit(args: string[], script: string): string {
  // --parsable prints "jobid" or "jobid;cluster".
  return slurm("sbatch", args, script).trim().split(";")[0];
}

/**
 * Submits every unfinished task of the plan whose job is not already queued or running, in
 * dependency order, then a report job after all of them. Returns at once; Slurm does the rest.
 */
export function submitPlan(
  plan: Plan,
  run: { file: string; scale: string; cache: string; out: string; options: SlurmOptions },
): Submission {
  const { cache, out, options } = run;
  saveTasks(cache, plan.tasks);
  const logs = join(out, "slurm", "logs");
  mkdirSync(logs, { recursive: true });
  const todo = plan.tasks.filter((t) => !isDone(cache, t.key));
  const latest = new Map(todo.map((t) => [t.key, taskJobs(cache, t.key).at(-1)]));
  const states = jobStates([...latest.values()].filter((j): j is string => !!j));
  const jobOf = new Map<string, string>();
  const result: Submission = { jobs: [], reused: [], cached: plan.tasks.length - todo.length, reportJob: null };
  for (const t of todo) {
    const prev = latest.get(t.key);
    if (prev && LIVE.has(states.get(prev)?.state ?? "")) {
      jobOf.set(t.key, prev);
      result.reused.push({ key: t.key, label: t.label, jobId: prev });
      continue;
    }
    const deps = [...new Set(t.deps.filter((d) => !isDone(cache, d)).map((d) => jobOf.get(d) as string))];
    const args = sbatchArgs(options, jobName(t), join(logs, `${t.key}.%j.log`), deps, "afterok");
    const jobId = submit(args, taskScript(options, cache, t.key));
    recordJob(cache, t.key, jobId);
    jobOf.set(t.key, jobId);
    result.jobs.push({ key: t.key, label: t.label, jobId, deps });
  }
  const waitFor = [...jobOf.values()];
  // An earlier submission's report job still waiting would report a superseded state: the new
  // one (after every job, old and new) replaces it.
  const earlier = existsSync(slurmRunPath(out)) ? readSlurmRun(out).reportJob : null;
  if (earlier && waitFor.length && LIVE.has(jobStates([earlier]).get(earlier)?.state ?? ""))
    slurm("scancel", [earlier]);
  if (waitFor.length) {
    const args = sbatchArgs(
      { ...options, gres: undefined, cpusPerTask: 1 },
      `stitchlab-report-${plan.experiment.name}`,
      join(logs, "report.%j.log"),
      waitFor,
      "afterany",
    );
    result.reportJob = submit(args, reportScript(options, out));
  }
  const record: SlurmRun = { ...run, plan, reportJob: result.reportJob, submitted: new Date().toISOString() };
  torch.writeFileAtomic(slurmRunPath(out), [`${JSON.stringify(record, null, 2)}\n`]);
  return result;
}

const jobName = (t: Task) => `stitchlab-${t.key}`;

export function readSlurmRun(out: string): SlurmRun {
  const p = slurmRunPath(out);
  if (!existsSync(p))
    throw new Error(`${out} holds no Slurm run (${p} not found); submit one with stitchlab run FILE --executor slurm`);
  return JSON.parse(readFileSync(p, "utf8")) as SlurmRun;
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
    const failure = readFailure(cache, t.key);
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
      `report job ${s.run.reportJob}: ${s.report ? s.report.state : "finished"}; ${join(s.run.out, "report.html")}`,
    );
  if (count("missing") + count("failed") + count("cancelled"))
    lines.push("`stitchlab run` again (same file and --out) submits only what is missing.");
  return lines.join("\n");
}
