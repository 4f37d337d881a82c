// Runs a plan's tasks in dependency order: in this process (one worker), or in N child
// processes (experiments/worker.ts), each with its share of the cores as its thread count.
// A failed task is reported with its error; its dependants are skipped; independent tasks go on.
// Stopped (RunOptions.signal), it ends its worker processes before it returns, so that none is
// left holding a task's lock for the next run to wait on.
import { type ChildProcess, spawn } from "node:child_process";
import { rmSync } from "node:fs";
import { availableParallelism, hostname } from "node:os";
import { DEFAULT_DEVICE, type Device } from "../torch/index.js";
import { entryProblem, isDone, lockPath, recordFailure, saveTasks, setAside } from "./cache.js";
import { readHolder } from "./lock.js";
import type { Plan, Task } from "./plan.js";
import { runTask, taskCommand } from "./tasks.js";

export type TaskState = "cached" | "ran" | "failed" | "skipped";

export interface RunEvent {
  kind: "start" | "done" | "failed" | "skipped" | "progress";
  task: Task;
  index: number;
  total: number;
  seconds?: number;
  error?: string;
  fields?: Record<string, number | string>;
}

export interface RunSummary {
  states: Record<string, TaskState>;
  errors: Record<string, string>;
  seconds: number;
}

export interface RunOptions {
  cache: string;
  workers?: number;
  /** cpu or cuda (cuda:1, ...); every task runs there. */
  device?: Device;
  onEvent?: (e: RunEvent) => void;
  /**
   * Stops the run: no task starts any more, the worker processes are ended (SIGTERM, then
   * SIGKILL after WORKER_GRACE_MS) and waited for, and runPlan rejects with the signal's reason.
   * A task running in this process (one worker) cannot be stopped: runPlan rejects at once and
   * the caller is expected to exit.
   */
  signal?: AbortSignal;
}

/** How long stopped workers get to end on SIGTERM before SIGKILL. */
const WORKER_GRACE_MS = 5000;

/** The worker processes running now, and for each a promise of its end. */
type Workers = Map<ChildProcess, Promise<void>>;

/**
 * A signal to a worker's process group: the worker and whatever it started, which may hold its
 * output open after the worker itself has ended.
 */
function signalWorker(child: ChildProcess, sig: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, sig);
  } catch {
    // gone already
  }
}

/** Ends every worker: SIGTERM to each one's group, SIGKILL to what is left after the grace. */
async function stopWorkers(workers: Workers): Promise<void> {
  if (!workers.size) return;
  for (const c of workers.keys()) signalWorker(c, "SIGTERM");
  const ended = Promise.all(workers.values());
  let timer: NodeJS.Timeout | undefined;
  const grace = new Promise<"late">((r) => {
    timer = setTimeout(() => r("late"), WORKER_GRACE_MS);
  });
  if ((await Promise.race([ended, grace])) === "late") for (const c of workers.keys()) signalWorker(c, "SIGKILL");
  clearTimeout(timer);
  await ended;
}

/**
 * Whole lines from a stream that arrives in chunks: push() each chunk as it comes, end() when the
 * stream ends. A chunk may end inside a line (a pipe delivers what was written so far): that
 * part is kept until the rest comes; end() gives a last line that had no newline. Lines are
 * given without their "\n" (or "\r\n"), blank ones left out.
 */
export function lineSplitter(onLine: (line: string) => void): { push: (chunk: string) => void; end: () => void } {
  let partial = "";
  const give = (line: string) => {
    const l = line.endsWith("\r") ? line.slice(0, -1) : line;
    if (l.trim()) onLine(l);
  };
  return {
    push(chunk) {
      const lines = (partial + chunk).split("\n");
      partial = lines.pop() ?? "";
      for (const l of lines) give(l);
    },
    end() {
      const last = partial;
      partial = "";
      give(last);
    },
  };
}

/**
 * A line of a worker's stdout (its protocol: experiments/tasks.ts runTaskOfCache) as progress
 * fields, or null for the others: an event, such as the line that ends the task
 * ({"event":"done","key":...,"state":...}: the runner learns the end from the exit status, and a
 * person has no use for it), and anything that is not a JSON object.
 */
export function progressFields(line: string): Record<string, number | string> | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch {
    return null;
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return null;
  if ("event" in parsed) return null;
  return parsed as Record<string, number | string>;
}

/** A worker ended by a signal: it never got to record its failure, so the runner records it. */
class WorkerKilled extends Error {
  constructor(readonly signal: NodeJS.Signals) {
    super(`killed by ${signal}${signal === "SIGKILL" ? " (by hand, or by the kernel's out-of-memory killer)" : ""}`);
  }
}

/**
 * Removes the locks of the tasks whose workers a stopped run ended (theirs, by pid), once they
 * have ended: a stopped task is not run, not failed (`stitchlab status` reads a lock whose holder
 * is gone as a task killed under way).
 */
function releaseStopped(cache: string, stopped: Map<ChildProcess, string>): void {
  for (const [child, key] of stopped) {
    const path = lockPath(cache, key);
    const h = readHolder(path);
    if (h && h.pid === child.pid && h.host === hostname()) rmSync(path, { force: true });
  }
}

function runChild(
  cache: string,
  task: Task,
  threads: number,
  device: Device,
  workers: Workers,
  taskOf: Map<ChildProcess, string>,
  onLine: (line: string) => void,
): Promise<void> {
  return new Promise((resolve, reject) => {
    // detached: the worker leads its own process group, so that stopping the run ends whatever
    // it started too (signalWorker), and a Ctrl-C at the terminal reaches this process alone,
    // which then stops the workers itself. --exit-with-parent: a worker outliving a runner
    // killed with SIGKILL ends itself (experiments/worker.ts).
    const child = spawn(process.execPath, [...taskCommand(cache, task.key), "--device", device, "--exit-with-parent"], {
      env: { ...process.env, STITCHLAB_THREADS: String(threads) },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    taskOf.set(child, task.key);
    workers.set(
      child,
      new Promise((r) =>
        child.on("close", () => {
          workers.delete(child);
          taskOf.delete(child);
          r();
        }),
      ),
    );
    let err = "";
    // Line by line: a JSON line split across two chunks is read whole, not lost.
    const lines = lineSplitter(onLine);
    child.stdout.setEncoding("utf8").on("data", (d: string) => lines.push(d));
    // 'end' comes before the child's 'close', so the last line is read before the task ends.
    child.stdout.on("end", () => lines.end());
    child.stderr.setEncoding("utf8").on("data", (d: string) => {
      err += d;
    });
    child.on("error", (e) => {
      // Not started (no 'close' follows): nothing to wait for.
      workers.delete(child);
      taskOf.delete(child);
      reject(e);
    });
    child.on("close", (code, signal) => {
      if (code === 0) resolve();
      else if (signal)
        // Killed: whatever it printed last is not why (a worker killed outright records nothing).
        reject(new WorkerKilled(signal));
      else {
        const last = err.trim().split("\n").pop() ?? "";
        reject(new Error(last.replace(/^stitchlab: /, "") || `exited with ${code}`));
      }
    });
  });
}

/**
 * Checks the SHA-256 of every finished entry this run will read: each stitch's scores (the
 * report reads them) and the inputs of every task it will make. An entry whose files changed
 * after it was made (sizes alone miss a file changed in place) is named, moved aside and made
 * again in this run; its own inputs are then checked in turn. Reading is what costs: about 2 ms
 * per MB, so a fully cached rerun hashes only the stitches' few kilobytes.
 */
function verifyReads(plan: Plan, cache: string, states: Record<string, TaskState>): void {
  const labels = new Map(plan.tasks.map((t) => [t.key, t.label]));
  const verified = new Set<string>();
  for (let changed = true; changed; ) {
    changed = false;
    const reads = new Set(plan.tasks.filter((t) => t.kind === "stitch").map((t) => t.key));
    for (const t of plan.tasks) if (!states[t.key]) for (const d of t.deps) reads.add(d);
    for (const key of reads) {
      if (states[key] !== "cached" || verified.has(key)) continue;
      verified.add(key);
      const problem = entryProblem(cache, key, "hashes");
      if (!problem) continue;
      const aside = setAside(cache, key);
      console.error(
        `task ${key} (${labels.get(key)}): its cache entry is corrupt (${problem}); moved to ${aside}, making it again`,
      );
      delete states[key];
      changed = true;
    }
  }
}

export async function runPlan(plan: Plan, opts: RunOptions): Promise<RunSummary> {
  const { cache } = opts;
  const workers = Math.max(1, opts.workers ?? 1);
  const device = opts.device ?? DEFAULT_DEVICE;
  const emit = opts.onEvent ?? (() => {});
  const { signal } = opts;
  signal?.throwIfAborted();
  saveTasks(cache, plan.tasks);
  const states: Record<string, TaskState> = {};
  const errors: Record<string, string> = {};
  const started = performance.now();
  const total = plan.tasks.length;
  let index = 0;
  for (const t of plan.tasks) if (isDone(cache, t.key)) states[t.key] = "cached";
  verifyReads(plan, cache, states);

  const pending = plan.tasks.filter((t) => !states[t.key]);
  const running = new Set<Promise<void>>();
  const children: Workers = new Map();
  /** The task each running worker makes. */
  const taskOf = new Map<ChildProcess, string>();
  const threads = Math.max(1, Math.floor(availableParallelism() / workers));
  const stopped = new Promise<void>((r) => signal?.addEventListener("abort", () => r(), { once: true }));
  while (pending.length || running.size) {
    // Skip what can never run; start what is ready, up to the worker count.
    for (let i = 0; i < pending.length; i++) {
      const t = pending[i];
      const blocked = t.deps.find((d) => states[d] === "failed" || states[d] === "skipped");
      if (blocked) {
        states[t.key] = "skipped";
        errors[t.key] = `not run: it needs ${blocked}, which ${states[blocked]}`;
        emit({ kind: "skipped", task: t, index: ++index, total, error: errors[t.key] });
        pending.splice(i--, 1);
        continue;
      }
      if (running.size >= workers) continue;
      if (!t.deps.every((d) => states[d] === "cached" || states[d] === "ran")) continue;
      pending.splice(i--, 1);
      const n = ++index;
      emit({ kind: "start", task: t, index: n, total });
      const t0 = performance.now();
      const job = (async () => {
        try {
          if (workers === 1)
            await runTask(cache, t, (fields) => emit({ kind: "progress", task: t, index: n, total, fields }), device);
          else
            await runChild(cache, t, threads, device, children, taskOf, (line) => {
              const fields = progressFields(line);
              if (fields) emit({ kind: "progress", task: t, index: n, total, fields });
            });
          states[t.key] = "ran";
          emit({ kind: "done", task: t, index: n, total, seconds: (performance.now() - t0) / 1000 });
        } catch (e) {
          // A worker ended because the run was stopped has not failed: it is simply not done.
          if (signal?.aborted) return;
          states[t.key] = "failed";
          errors[t.key] = (e as Error).message;
          // For `stitchlab status`, which otherwise would find no failure and call it missing.
          if (e instanceof WorkerKilled) recordFailure(cache, t.key, errors[t.key]);
          emit({ kind: "failed", task: t, index: n, total, error: errors[t.key] });
        }
      })();
      running.add(job);
      job.finally(() => running.delete(job));
    }
    if (running.size) await Promise.race([...running, stopped]);
    else if (pending.length) {
      // Nothing runs and nothing is ready: a dependency outside the plan is missing.
      for (const t of pending.splice(0)) {
        states[t.key] = "skipped";
        errors[t.key] = `not run: its dependencies ${t.deps.join(", ")} are not in the cache`;
        emit({ kind: "skipped", task: t, index: ++index, total, error: errors[t.key] });
      }
    }
    if (signal?.aborted) {
      const stopped = new Map(taskOf);
      await stopWorkers(children);
      releaseStopped(cache, stopped);
      signal.throwIfAborted();
    }
  }
  return { states, errors, seconds: (performance.now() - started) / 1000 };
}
