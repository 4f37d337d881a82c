// One process at a time per task: `<kind>/<key>.lock` next to the task's folder, naming its
// holder, created whole by a hard link (which fails when the name exists, on NFS too). Two experiments that share
// a cache, a Slurm job and a hand-run `stitchlab task KEY`, or two local runs, would otherwise
// make the same task in one partial folder at once. A second process waits for the holder and
// then finds the task done (or runs it, if the holder failed). A lock whose holder is gone (a
// killed process, a cancelled or finished Slurm job) is taken over: a killed job never gets to
// remove its lock. On the holder's own machine its process decides, whatever its Slurm job says (a
// retried attempt runs in the job of the attempt that died), and the process must be the one that
// wrote the lock: the same pid and the same start time (a pid is reused once its process is gone);
// on another machine in the waiter's own job, which run of the job it was (Slurm requeues a job
// onto other nodes, and the lock records SLURM_RESTART_COUNT). An experiment's folder has a lock of its own (`<out>/run.lock`,
// experiments/outdir.ts), which a second run is refused rather than made to wait for.
import { linkSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { dirname } from "node:path";
import { jobStates, LIVE } from "./squeue.js";

export interface LockHolder {
  host: string;
  pid: number;
  /** The Slurm job the holder runs in, if any. */
  job: string | null;
  at: string;
  /**
   * The holder process's start time, in clock ticks since boot (field 22 of /proc/<pid>/stat):
   * with the pid, it names one process, where a pid alone may since belong to another. Absent in
   * locks of older stitchlabs and where there is no /proc.
   */
  started?: number;
  /**
   * SLURM_RESTART_COUNT of the holder's job when it wrote the lock (0 until Slurm requeues the
   * job): which run of its job it was. Absent in locks of older stitchlabs and outside Slurm.
   */
  restarts?: number;
}

/** This process's Slurm job, if any: its id and how often Slurm has requeued it (SLURM_RESTART_COUNT, default 0). */
function ownJob(env: NodeJS.ProcessEnv = process.env): { job: string; restarts: number } | null {
  const job = env.SLURM_JOB_ID;
  if (!job) return null;
  const restarts = Number(env.SLURM_RESTART_COUNT ?? 0);
  return { job, restarts: Number.isSafeInteger(restarts) && restarts >= 0 ? restarts : 0 };
}

/** Fields 3 on of /proc/<pid>/stat (field 3, the state, first), or undefined (no such process, no /proc). */
function procStat(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Field 2, the command name, is in parentheses and may itself hold spaces and ")": the
    // fields are counted from the last ")", which is followed by field 3.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  } catch {
    return undefined;
  }
}

/** The start time (field 22) in procStat's fields. */
function startOf(fields: string[] | undefined): number | undefined {
  const started = Number(fields?.[22 - 3]);
  return Number.isSafeInteger(started) ? started : undefined;
}

/** A process's start time in clock ticks since boot (/proc/<pid>/stat, field 22), or undefined (no such process, no /proc). */
export function processStart(pid: number): number | undefined {
  return startOf(procStat(pid));
}

/** Milliseconds since the file at path was last changed (0 when it is gone). */
function unreadableFor(path: string): number {
  try {
    return Date.now() - statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}

export function readHolder(path: string): LockHolder | null {
  try {
    return JSON.parse(readFileSync(path, "utf8")) as LockHolder;
  } catch {
    return null; // gone, or not yet written: look again
  }
}

/**
 * Whether the holder may still be working. On this machine its process decides: alive, and the
 * same process (its start time, where the lock records one; else a Node process, as locks of older
 * stitchlabs are read). Its Slurm job is not asked there: a task retried within one job (Slurm's
 * own requeue, or the executor's next attempt) would otherwise wait forever for the attempt that
 * died, since the job, the waiter's own, is alive. On another machine its Slurm job decides, and
 * without one (or without Slurm's commands here) it is assumed to work; but where that job is the
 * waiter's own, asking Slurm says nothing (it runs: the waiter is in it), and the runs of the job
 * decide (ownJobHolderAlive).
 */
export function holderAlive(h: LockHolder): boolean {
  if (h.host === hostname()) return processAlive(h);
  if (h.job) {
    const own = ownJob();
    if (own && h.job === own.job) return ownJobHolderAlive(h, own.restarts);
    try {
      const s = jobStates([h.job]).get(h.job);
      if (s) return LIVE.has(s.state);
    } catch {
      // no Slurm commands here: nothing to ask
    }
  }
  return true; // another machine, and no job to ask: assume it works
}

/**
 * A holder on another machine in the waiter's own Slurm job. Slurm requeued the job (a node
 * failed, a preemption, scontrol requeue) and it now runs on another node: Slurm stops all of a
 * run's processes before it requeues the job, and counts the runs (SLURM_RESTART_COUNT), so a
 * holder of an earlier run (a lower count) is gone. A holder of this same run on another machine
 * is alive: it is a process of this job on another of its nodes (a multi-node allocation, as
 * `srun -N2 stitchlab task KEY` or steps spread over its nodes make), working now, and its pid
 * cannot be asked from here. Had it died, the waiter waits until the job ends (its time limit;
 * the next job then asks Slurm, which says this one ended): the safe side, since taking over a
 * lock whose holder works would have two processes make one task at once. A holder of a later run than ours (we are what is
 * left of an earlier run, about to be stopped) is alive too. A lock of an older stitchlab, without
 * the count, is read as before: the job, alive, holds it.
 */
function ownJobHolderAlive(h: LockHolder, restarts: number): boolean {
  if (h.restarts === undefined) return true;
  return h.restarts >= restarts;
}

/** Whether the holder's process (on this machine) still runs: its pid lives and was not reused since. */
function processAlive(h: LockHolder): boolean {
  try {
    process.kill(h.pid, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EPERM") return false; // EPERM: alive, another user's
  }
  const fields = procStat(h.pid);
  // Ended but not yet reaped (state Z or X): it still answers kill(pid, 0) and keeps its /proc
  // entry and start time. Where nobody reaps orphans (a container's first process), a worker of a
  // killed run stays so.
  if (fields?.[0] === "Z" || fields?.[0] === "X") return false;
  const started = startOf(fields);
  if (h.started !== undefined && started !== undefined) return started === h.started;
  // A lock without the start time (an older stitchlab's), or no /proc: a reused pid is told by
  // its command line at least.
  try {
    return readFileSync(`/proc/${h.pid}/cmdline`, "utf8").includes("node");
  } catch {
    return true;
  }
}

export function describeHolder(h: LockHolder): string {
  const run = h.restarts ? `, requeued ${h.restarts} time${h.restarts === 1 ? "" : "s"}` : "";
  return `${h.host} pid ${h.pid}${h.job ? ` (Slurm job ${h.job}${run})` : ""} since ${h.at}`;
}

/**
 * Runs fn holding the lock at `path`, waiting while a live holder has it (polling every
 * `pollMs`; onWait hears of each holder once, and may throw instead of waiting: that error is
 * withLock's, and the holder's lock is left alone). The lock is removed when fn ends, thrown or not.
 */
export async function withLock<T>(
  path: string,
  fn: () => Promise<T>,
  onWait: (holder: LockHolder) => void = () => {},
  pollMs = 5000,
): Promise<T> {
  mkdirSync(dirname(path), { recursive: true });
  const me: LockHolder = {
    host: hostname(),
    pid: process.pid,
    job: process.env.SLURM_JOB_ID ?? null,
    at: new Date().toISOString(),
  };
  const own = ownJob();
  if (own) me.restarts = own.restarts;
  const started = processStart(process.pid);
  if (started !== undefined) me.started = started;
  const heard = new Set<string>();
  // The lock appears with its content in one step: written to a file of our own, then hard-linked
  // to its name (link fails if the name exists, on NFS too). Created empty and then written, a
  // process killed in between would leave a lock naming nobody.
  const mine = `${path}.${me.host}.${me.pid}`;
  try {
    writeFileSync(mine, `${JSON.stringify(me)}\n`);
  } catch (e) {
    // Node names the syscall, not the file ("ENOSPC: no space left on device, write").
    rmSync(mine, { force: true });
    const code = (e as NodeJS.ErrnoException).code;
    throw Object.assign(new Error(`cannot write ${mine}: ${(e as Error).message}`), code ? { code } : {});
  }
  for (;;) {
    try {
      linkSync(mine, path);
      rmSync(mine, { force: true });
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") {
        rmSync(mine, { force: true });
        throw e;
      }
    }
    const h = readHolder(path);
    if (!h && unreadableFor(path) > 30_000) {
      // Not ours to read after 30 s (a lock from an older stitchlab, or a damaged file): stale.
      rmSync(path, { force: true });
      continue;
    }
    if (h && !holderAlive(h)) {
      // Remove it only if it is still the same stale lock (another waiter may have taken over).
      const again = readHolder(path);
      if (again && again.pid === h.pid && again.at === h.at && again.host === h.host) rmSync(path, { force: true });
      continue;
    }
    if (h && !heard.has(h.at + h.pid)) {
      heard.add(h.at + h.pid);
      try {
        onWait(h);
      } catch (e) {
        // A taker that will not wait (an experiment's --out is refused, not waited for).
        rmSync(mine, { force: true });
        throw e;
      }
    }
    await new Promise((r) => setTimeout(r, h ? pollMs : 50));
  }
  // Ours unless it was broken as stale meanwhile (then whoever holds it now keeps it).
  const release = () => {
    const h = readHolder(path);
    if (h && h.pid === me.pid && h.at === me.at && h.host === me.host) rmSync(path, { force: true });
  };
  // A process that exits while fn runs (process.exit after Ctrl-C) lets go too; only one killed
  // outright leaves its lock, which then says that its work was cut short (`stitchlab status`).
  process.on("exit", release);
  try {
    return await fn();
  } finally {
    process.removeListener("exit", release);
    release();
  }
}
