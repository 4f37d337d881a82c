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
 * share done and end. A kind's tasks are costed at the mean time of those of that kind that have
 * ended; a kind none of whose tasks has ended yet, at its weight times the seconds per weight of
 * the tasks that have (or, before any has, of the running tasks' projections: time so far over
 * their share done; or of `prior`, seconds per task by kind, where the caller has an estimate).
 * The work left (tasks not started, and what is left of the running ones) is shared by the
 * workers. Null while nothing is known.
 */
export class TimeLeft {
  private readonly started: number;
  private readonly pending = new Map<string, string>();
  private readonly running = new Map<string, { kind: string; since: number; fraction: number }>();
  private readonly ended: { kind: string; seconds: number }[] = [];

  constructor(
    todo: { key: string; kind: string }[],
    private readonly opts: {
      workers: number;
      /** Relative cost of a task by kind (cli/run-progress.ts TASK_WEIGHT); 1 for a kind not named. */
      weight: Record<string, number>;
      /** Seconds per task by kind, estimated before the run (the demo's): used until tasks end. */
      prior?: Record<string, number>;
      /** Seconds (performance.now() / 1000 by default). */
      now?: () => number;
    },
  ) {
    this.started = this.now();
    for (const t of todo) this.pending.set(t.key, t.kind);
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
    if (kind !== undefined && seconds !== null && Number.isFinite(seconds)) this.ended.push({ kind, seconds });
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
    const weight = (k: string) => this.opts.weight[k] ?? 1;
    const now = this.now();
    // Samples: ended tasks, else the running tasks' projections (a tenth done or more).
    let samples = this.ended;
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
    const cost = (k: string) => {
      const own = this.ended.filter((x) => x.kind === k);
      return own.length ? own.reduce((s, x) => s + x.seconds, 0) / own.length : base(k) * scale;
    };
    let work = 0;
    for (const k of this.pending.values()) work += cost(k);
    for (const r of this.running.values()) {
      const c = cost(r.kind);
      work += r.fraction > 0 ? c * (1 - r.fraction) : Math.max(0, c - (now - r.since));
    }
    return work / Math.max(1, Math.min(this.opts.workers, this.remaining()));
  }
}

/** "3 min 20 s elapsed, about 12 min left" (left unknown: "time left not known yet"). */
export function formatRunTime(elapsed: number, left: number | null): string {
  return `${formatDuration(elapsed)} elapsed, ${left === null ? "time left not known yet" : `about ${formatDuration(left)} left`}`;
}
