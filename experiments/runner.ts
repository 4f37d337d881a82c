// Runs a plan's tasks in dependency order: in this process (one worker), or in N child
// processes (`stitchlab task KEY`), each with its share of the cores as its thread count.
// A failed task is reported with its error; its dependants are skipped; independent tasks go on.
import { spawn } from "node:child_process";
import { availableParallelism } from "node:os";
import { isDone, saveTasks } from "./cache.js";
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
  device?: string;
  onEvent?: (e: RunEvent) => void;
}

function runChild(
  cache: string,
  task: Task,
  threads: number,
  device: string,
  onLine: (line: string) => void,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...taskCommand(cache, task.key), "--device", device], {
      env: { ...process.env, STITCHLAB_THREADS: String(threads) },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let err = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => {
      for (const l of d.split("\n")) if (l.trim()) onLine(l);
    });
    child.stderr.setEncoding("utf8").on("data", (d: string) => {
      err += d;
    });
    child.on("error", reject);
    child.on("close", (code, signal) => {
      if (code === 0) resolve();
      else {
        const last = err.trim().split("\n").pop() ?? "";
        reject(new Error(last.replace(/^stitchlab: /, "") || `exited with ${signal ?? code}`));
      }
    });
  });
}

export async function runPlan(plan: Plan, opts: RunOptions): Promise<RunSummary> {
  const { cache } = opts;
  const workers = Math.max(1, opts.workers ?? 1);
  const device = opts.device ?? "cpu";
  const emit = opts.onEvent ?? (() => {});
  saveTasks(cache, plan.tasks);
  const states: Record<string, TaskState> = {};
  const errors: Record<string, string> = {};
  const started = performance.now();
  const total = plan.tasks.length;
  let index = 0;
  for (const t of plan.tasks) if (isDone(cache, t.key)) states[t.key] = "cached";

  const pending = plan.tasks.filter((t) => !states[t.key]);
  const running = new Set<Promise<void>>();
  const threads = Math.max(1, Math.floor(availableParallelism() / workers));
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
            await runChild(cache, t, threads, device, (line) => {
              try {
                emit({ kind: "progress", task: t, index: n, total, fields: JSON.parse(line) });
              } catch {
                // not a progress line
              }
            });
          states[t.key] = "ran";
          emit({ kind: "done", task: t, index: n, total, seconds: (performance.now() - t0) / 1000 });
        } catch (e) {
          states[t.key] = "failed";
          errors[t.key] = (e as Error).message;
          emit({ kind: "failed", task: t, index: n, total, error: errors[t.key] });
        }
      })();
      running.add(job);
      job.finally(() => running.delete(job));
    }
    if (running.size) await Promise.race(running);
    else if (pending.length) {
      // Nothing runs and nothing is ready: a dependency outside the plan is missing.
      for (const t of pending.splice(0)) {
        states[t.key] = "skipped";
        errors[t.key] = `not run: its dependencies ${t.deps.join(", ")} are not in the cache`;
        emit({ kind: "skipped", task: t, index: ++index, total, error: errors[t.key] });
      }
    }
  }
  return { states, errors, seconds: (performance.now() - started) / 1000 };
}
