// A run's progress as `run`, `demo` and `compare` show it: on a terminal one overall bar weighted
// by task kind, with the running tasks, the time elapsed and left (cli/progress.ts TimeLeft);
// elsewhere at most a line per task kind a minute (eventPrinter).
import cliProgress from "cli-progress";
import { formatDuration } from "../experiments/estimate.js";
import type { Task } from "../experiments/plan.js";
import type { ProgressDisplay } from "../experiments/run.js";
import type { RunEvent } from "../experiments/runner.js";
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

/** How the run's progress is shown: the workers that share the work, and seconds per task by kind, or by task, when estimated before. */
export interface ProgressOptions {
  workers?: number;
  prior?: Record<string, number>;
  /** Each task's seconds by key (compare's estimate): the time left starts from them. */
  tasks?: Record<string, number>;
}

/**
 * On a terminal: one overall bar for the whole run, weighted by task kind, with the running
 * tasks' labels, the time elapsed and an estimate of the time left (cli/progress.ts TimeLeft);
 * failures are printed above it. Elsewhere: eventPrinter's lines, at most one per task kind a
 * minute, with the run's elapsed and left.
 */
export function overallProgress(todo: Task[], opts: ProgressOptions = {}): ProgressDisplay {
  const clock = new TimeLeft(todo, {
    workers: opts.workers ?? 1,
    weight: TASK_WEIGHT,
    prior: opts.prior,
    tasks: opts.tasks,
  });
  if (!process.stderr.isTTY) {
    const counts: Record<string, number> = {};
    for (const t of todo) counts[t.kind] = (counts[t.kind] ?? 0) + 1;
    return { onEvent: eventPrinter(undefined, clock, undefined, counts), stop: () => {} };
  }
  // The bar weighs tasks by their own estimates where every task has one, else by kind.
  const own = opts.tasks;
  const weight = (t: Task) =>
    own && todo.every((x) => own[x.key] !== undefined) ? (own[t.key] as number) : (TASK_WEIGHT[t.kind] ?? 1);
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

/** Seconds between two of a task kind's lines in a log. */
export const LOG_EVERY_S = 60;

/**
 * Progress lines on stderr (`write`) for a log, not a terminal: at most one line per task kind
 * every LOG_EVERY_S seconds (a compare's log had 118 lines of time left, one per task), each saying
 * how far that kind is, what of it runs now with its latest progress, and, given the run's clock,
 * the run's time elapsed and left. A failed or skipped task is always told, on a line of its own.
 * The first event of a kind is told at once, so a log shows what started.
 */
export function eventPrinter(
  write: (line: string) => void = (line) => console.error(line),
  clock?: TimeLeft,
  now: () => number = () => Date.now() / 1000,
  /** The run's tasks per kind, where known: a line says "3/8 ended", not "3 ended". */
  counts: Record<string, number> = {},
): (e: RunEvent) => void {
  const last = new Map<string, number>();
  const kinds = new Map<string, { ended: number; running: Map<string, string> }>();
  return (e) => {
    if (clock) track(clock, e);
    const kind = e.task.kind;
    const k = kinds.get(kind) ?? { ended: 0, running: new Map<string, string>() };
    kinds.set(kind, k);
    if (e.kind === "start") {
      k.running.set(e.task.key, e.task.label);
    } else if (e.kind === "progress") {
      const fields = Object.entries(e.fields ?? {})
        // A value not known yet (NaN, or null from a worker's JSON) is left out, never printed.
        .filter(([, v]) => v !== null && !(typeof v === "number" && !Number.isFinite(v)))
        .map(([f, v]) => `${f} ${v}`)
        .join(", ");
      k.running.set(e.task.key, fields ? `${e.task.label}: ${fields}` : e.task.label);
    } else {
      k.running.delete(e.task.key);
      k.ended++;
      if (e.kind === "failed") write(`[${e.index}/${e.total}] ${e.task.label}: FAILED: ${e.error}`);
      if (e.kind === "skipped") write(`[${e.index}/${e.total}] ${e.task.label}: skipped (${e.error})`);
    }
    const t = now();
    const before = last.get(kind);
    if (before !== undefined && t - before < LOG_EVERY_S) return;
    last.set(kind, t);
    const running = [...k.running.values()];
    const time = clock
      ? `; run: ${formatRunTime(clock.elapsed(), clock.left())} (${clock.remaining()} task${clock.remaining() === 1 ? "" : "s"} to go)`
      : "";
    const of = counts[kind] === undefined ? "" : `/${counts[kind]}`;
    write(
      `[${e.total} tasks] ${kind}: ${k.ended}${of} ended${running.length ? `; running ${running.join("; ")}` : ""}${time}`,
    );
  };
}
