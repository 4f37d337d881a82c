// Progress for long commands: a bar on a terminal, JSON lines otherwise (at most one a second,
// plus the last), so logs of batch jobs stay parseable.
import cliProgress from "cli-progress";
import { formatDuration } from "../experiments/estimate.js";

export interface ProgressSink {
  update(done: number, total: number, fields: Record<string, number | string>): void;
  stop(): void;
}

export function progressSink(label: string, format: (f: Record<string, number | string>) => string): ProgressSink {
  if (process.stderr.isTTY) {
    const bar = new cliProgress.SingleBar(
      {
        format: `${label} [{bar}] {percentage}% | {info} | {duration_formatted} elapsed | ETA {eta_formatted}`,
        stream: process.stderr,
        hideCursor: true,
      },
      cliProgress.Presets.shades_classic,
    );
    let started = false;
    return {
      update(done, total, fields) {
        if (!started) {
          bar.start(total, 0, { info: "" });
          started = true;
        }
        bar.setTotal(total);
        bar.update(done, { info: format(fields) });
      },
      stop: () => started && bar.stop(),
    };
  }
  let last = 0;
  let pending: string | null = null;
  return {
    update(done, total, fields) {
      pending = JSON.stringify({ event: label, done, total, ...fields });
      const now = Date.now();
      if (now - last >= 1000 || done === total) {
        console.log(pending);
        pending = null;
        last = now;
      }
    },
    stop() {
      if (pending) console.log(pending);
    },
  };
}

/**
 * A run's elapsed time and an estimate of the time left, updated as its tasks start, report their
 * share done and end.
 *
 * With each task's cost estimated before the run (`tasks`: compare's probe, experiments/estimate.ts
 * estimateFrom), the time left starts from those costs, and the tasks that end correct them: a
 * kind's costs are scaled by (its ended tasks' seconds + W) / (their estimates + W), W a tenth of
 * the run's estimate, so a short task that ran twice as long as said barely moves a long one's cost
 * while a long task moves it as far as it deserves. Per task matters: an IRI set at a model's last
 * point can take a hundred times one at its middle, and a time left projected from the first
 * (cheap) tasks of a kind said 1 min 40 s where 16 min were left.
 *
 * Without them, a kind's tasks are costed at the mean time of those of that kind that have ended;
 * a kind none of whose tasks has ended yet, at its weight times the seconds per weight of the tasks
 * that have (or, before any has, of the running tasks' projections: time so far over their share
 * done; or of `prior`, seconds per task by kind, where the caller has an estimate).
 *
 * The work left (tasks not started, and what is left of the running ones) is shared by the
 * workers. Null while nothing is known.
 */
export class TimeLeft {
  private readonly started: number;
  private readonly pending = new Map<string, string>();
  private readonly running = new Map<string, { kind: string; since: number; fraction: number }>();
  private readonly ended: { key: string; kind: string; seconds: number }[] = [];
  /** W of the correction: a tenth of the estimated run (0 without per-task estimates). */
  private readonly pseudo: number;

  constructor(
    todo: { key: string; kind: string }[],
    private readonly opts: {
      workers: number;
      /** Relative cost of a task by kind (cli/run-progress.ts TASK_WEIGHT); 1 for a kind not named. */
      weight: Record<string, number>;
      /** Seconds per task by kind, estimated before the run (the demo's): used until tasks end. */
      prior?: Record<string, number>;
      /** Seconds of each task by key, estimated before the run (compare's probe); tasks ending correct them. */
      tasks?: Record<string, number>;
      /** Seconds (performance.now() / 1000 by default). */
      now?: () => number;
    },
  ) {
    this.started = this.now();
    for (const t of todo) this.pending.set(t.key, t.kind);
    const own = opts.tasks ?? {};
    this.pseudo = 0.1 * todo.reduce((s, t) => s + (own[t.key] ?? 0), 0);
  }

  private now(): number {
    return this.opts.now ? this.opts.now() : performance.now() / 1000;
  }

  start(key: string): void {
    const kind = this.pending.get(key);
    if (kind === undefined) return;
    this.pending.delete(key);
    this.running.set(key, { kind, since: this.now(), fraction: 0 });
  }

  /** The running task's share done (0-1). */
  progress(key: string, fraction: number): void {
    const r = this.running.get(key);
    if (r && Number.isFinite(fraction)) r.fraction = Math.min(1, Math.max(0, fraction));
  }

  /** A task ended: `seconds` it took when it ran to its end (null: failed or skipped, no measure). */
  end(key: string, seconds: number | null): void {
    const r = this.running.get(key);
    const kind = r?.kind ?? this.pending.get(key);
    this.running.delete(key);
    this.pending.delete(key);
    if (kind !== undefined && seconds !== null && Number.isFinite(seconds)) this.ended.push({ key, kind, seconds });
  }

  elapsed(): number {
    return this.now() - this.started;
  }

  /** Tasks not ended (pending and running). */
  remaining(): number {
    return this.pending.size + this.running.size;
  }

  /** Seconds left, or null while nothing is known to cost it by. */
  left(): number | null {
    if (!this.remaining()) return 0;
    const cost = this.opts.tasks ? this.perTaskCost(this.opts.tasks) : this.perKindCost();
    if (!cost) return null;
    const now = this.now();
    let work = 0;
    for (const [key, kind] of this.pending) work += cost(key, kind);
    for (const [key, r] of this.running) {
      const c = cost(key, r.kind);
      work += r.fraction > 0 ? c * (1 - r.fraction) : Math.max(0, c - (now - r.since));
    }
    return work / Math.max(1, Math.min(this.opts.workers, this.remaining()));
  }

  /**
   * Each task's estimate, scaled by its kind's correction (the class comment). A task without an
   * estimate of its own (the demo's IRI sets and stitches, costed by kind) costs the mean of its
   * kind's ended tasks once one has ended, else its kind's prior (or weight) scaled as the ended
   * tasks with estimates ran.
   */
  private perTaskCost(tasks: Record<string, number>): (key: string, kind: string) => number {
    const ratio = (ended: { key: string; seconds: number }[]) => {
      const own = ended.filter((e) => tasks[e.key] !== undefined);
      const seconds = own.reduce((s, e) => s + e.seconds, 0);
      const said = own.reduce((s, e) => s + (tasks[e.key] as number), 0);
      return (seconds + this.pseudo) / Math.max(1e-9, said + this.pseudo);
    };
    const byKind = new Map<string, number>();
    for (const kind of new Set(this.ended.map((e) => e.kind)))
      byKind.set(kind, ratio(this.ended.filter((e) => e.kind === kind)));
    const overall = ratio(this.ended);
    return (key, kind) => {
      const own = tasks[key];
      if (own !== undefined) return own * (byKind.get(kind) ?? 1);
      const done = this.ended.filter((e) => e.kind === kind);
      if (done.length) return done.reduce((s, e) => s + e.seconds, 0) / done.length;
      return (this.opts.prior?.[kind] ?? this.opts.weight[kind] ?? 1) * overall;
    };
  }

  /** A kind's cost from its ended tasks, or from the weights and what has run (the class comment); null: nothing known. */
  private perKindCost(): ((key: string, kind: string) => number) | null {
    const weight = (k: string) => this.opts.weight[k] ?? 1;
    const now = this.now();
    // Samples: ended tasks, else the running tasks' projections (a tenth done or more).
    let samples: { kind: string; seconds: number }[] = this.ended;
    if (!samples.length)
      samples = [...this.running.values()]
        .filter((r) => r.fraction >= 0.1)
        .map((r) => ({ kind: r.kind, seconds: (now - r.since) / r.fraction }));
    const base = (k: string) => this.opts.prior?.[k] ?? weight(k);
    let scale: number;
    if (samples.length)
      scale = samples.reduce((s, x) => s + x.seconds, 0) / samples.reduce((s, x) => s + base(x.kind), 0);
    else if (this.opts.prior) scale = 1;
    else return null;
    return (_key, k) => {
      const own = this.ended.filter((x) => x.kind === k);
      return own.length ? own.reduce((s, x) => s + x.seconds, 0) / own.length : base(k) * scale;
    };
  }
}

/** "3 min 20 s elapsed, about 12 min left" (left unknown: "time left not known yet"). */
export function formatRunTime(elapsed: number, left: number | null): string {
  return `${formatDuration(elapsed)} elapsed, ${left === null ? "time left not known yet" : `about ${formatDuration(left)} left`}`;
}
