// One process at a time per task: `<kind>/<key>.lock` next to the task's folder, naming its
// holder, created whole by a hard link (which fails when the name exists, on NFS too). Two experiments that share
// a cache, a Slurm job and a hand-run `stitchlab task KEY`, or two local runs, would otherwise
// make the same task in one partial folder at once. A second process waits for the holder and
// then finds the task done (or runs it, if the holder failed). A lock whose holder is gone (a
// killed process, a cancelled or finished Slurm job) is taken over: a killed job never gets to
// remove its lock. An experiment's folder has a lock of its own (`<out>/run.lock`,
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

/** Whether the holder may still be working: its job is live, or its process runs on this machine. */
export function holderAlive(h: LockHolder): boolean {
  if (h.job) {
    try {
      const s = jobStates([h.job]).get(h.job);
      if (s) return LIVE.has(s.state);
    } catch {
      // no Slurm commands here: decide by the process below
    }
  }
  if (h.host !== hostname()) return true; // another machine, no job to ask: assume it works
  try {
    process.kill(h.pid, 0);
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
  // A live pid; make sure it was not reused by something else since.
  try {
    return readFileSync(`/proc/${h.pid}/cmdline`, "utf8").includes("node");
  } catch {
    return true;
  }
}

export function describeHolder(h: LockHolder): string {
  return `${h.host} pid ${h.pid}${h.job ? ` (Slurm job ${h.job})` : ""} since ${h.at}`;
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
