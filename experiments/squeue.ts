// Asking Slurm about jobs: squeue for what it still holds, sacct (where accounting is on) for
// older ones. Used by the executor (experiments/slurm.ts) and by the task lock
// (experiments/lock.ts), which asks whether a lock's job is still alive.
import { spawnSync } from "node:child_process";

/** Slurm's job states in which a job may still run (or is still running) its task. */
export const LIVE = new Set([
  "PENDING",
  "CONFIGURING",
  "RUNNING",
  "COMPLETING",
  "REQUEUED",
  "REQUEUE_HOLD",
  "REQUEUE_FED",
  "RESIZING",
  "SUSPENDED",
  "STOPPED",
  "SIGNALING",
  "STAGE_OUT",
]);

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
