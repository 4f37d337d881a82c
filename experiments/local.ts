// A local run's record, so that `stitchlab status DIR` and `stitchlab report DIR` work on local
// runs as on Slurm ones: `stitchlab run` writes <out>/local/run.json (the plan, the cache, the
// scale, the device) before any task starts, and every task's state is then read from the cache:
// done (its folder), running (a live holder of its lock), failed (the failure it recorded, or a
// lock whose holder was killed under way), or missing (not run: the run was stopped, or a task it
// needs failed).
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { readJsonFile, writeFileAtomic } from "../io/files.js";
import type { Device } from "../torch/index.js";
import { isDone, lockPath, readFailure } from "./cache.js";
import { describeHolder, holderAlive, readHolder } from "./lock.js";
import type { Plan } from "./plan.js";

export interface LocalRun {
  plan: Plan;
  cache: string;
  scale: string;
  device: Device;
  started: string;
}

export const localRunPath = (out: string): string => join(out, "local", "run.json");

export function recordLocalRun(out: string, run: Omit<LocalRun, "started">): void {
  mkdirSync(join(out, "local"), { recursive: true });
  writeFileAtomic(localRunPath(out), [`${JSON.stringify({ ...run, started: new Date().toISOString() }, null, 2)}\n`]);
}

export function readLocalRun(out: string): LocalRun | null {
  const p = localRunPath(out);
  return existsSync(p) ? readJsonFile<LocalRun>(p, "a local run's record") : null;
}

export type LocalTaskStatus = "done" | "running" | "failed" | "missing";

export interface LocalTaskReport {
  key: string;
  label: string;
  status: LocalTaskStatus;
  /** The recorded error (failed), or who runs it (running). */
  detail: string | null;
}

/** Every task of a local run, from the cache. */
export function localStatus(run: LocalRun): LocalTaskReport[] {
  return run.plan.tasks.map((t) => {
    const base = { key: t.key, label: t.label };
    if (isDone(run.cache, t.key)) return { ...base, status: "done", detail: null };
    const holder = readHolder(lockPath(run.cache, t.key));
    if (holder && holderAlive(holder)) return { ...base, status: "running", detail: describeHolder(holder) };
    const failure = readFailure(run.cache, t.key);
    if (failure) return { ...base, status: "failed", detail: failure.error };
    // A lock whose holder is gone: the task was under way when its process was killed outright
    // (a process that ends otherwise removes its lock, or records its error).
    if (holder)
      return {
        ...base,
        status: "failed",
        detail: `its process (${describeHolder(holder)}) ended without finishing it or recording an error: killed (SIGKILL, or the kernel's out-of-memory killer)`,
      };
    return { ...base, status: "missing", detail: null };
  });
}

export function formatLocalStatus(run: LocalRun, tasks: LocalTaskReport[], out: string): string {
  const order: LocalTaskStatus[] = ["done", "running", "failed", "missing"];
  const count = (k: LocalTaskStatus) => tasks.filter((t) => t.status === k).length;
  const lines = [
    `${run.plan.experiment.name} (${run.scale}, local, started ${run.started}): ${tasks.length} tasks: ${order.map((k) => `${count(k)} ${k}`).join(", ")}`,
    `cache: ${run.cache}`,
  ];
  for (const k of order.slice(1)) {
    const ts = tasks.filter((t) => t.status === k);
    if (!ts.length) continue;
    lines.push(`${k}:`);
    for (const t of ts) lines.push(`  ${t.label}${t.detail ? `: ${t.detail}` : ""}`);
  }
  const report = join(out, "report.html");
  lines.push(
    existsSync(report)
      ? `report: ${report}`
      : `report: not written yet (stitchlab report ${out} writes it from what is done)`,
  );
  if (count("missing") + count("failed") > 0 && count("running") === 0)
    lines.push(`to finish it: stitchlab run <the experiment file> --out ${out} (done tasks are reused)`);
  return lines.join("\n");
}
