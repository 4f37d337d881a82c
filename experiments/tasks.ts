// Running one task of the graph against the cache. Layout of a cache folder:
//   tasks/<key>.json      the task (written by the planner; `stitchlab task KEY` runs it)
//   <kind>/<key>/         a finished task's output, complete by construction:
//   <kind>/<key>.partial/ where it is made; renamed to <kind>/<key>/ only when everything in it
//                         is written, so a run killed at any moment (even kill -9) leaves a
//                         partial folder that is never taken for finished. IRI sets resume from
//                         their partial folder (finished batches are kept); other tasks restart.
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ModelSourceLike } from "../models/checkpoint.js";
import { runIris, runStitch } from "../stitch/jobs.js";
import * as torch from "../torch/index.js";
import { trainModel } from "../train/trainer.js";
import { describeHolder, withLock } from "./lock.js";
import type { ModelRef, Task, TaskKind } from "./plan.js";

export const taskDir = (cache: string, kind: TaskKind, key: string): string => join(cache, kind, key);
export const kindOf = (key: string): TaskKind => key.split("-")[0] as TaskKind;
export const isDone = (cache: string, key: string): boolean => existsSync(taskDir(cache, kindOf(key), key));

/** Writes every task's description where `stitchlab task KEY` finds it. */
export function saveTasks(cache: string, tasks: Task[]): void {
  mkdirSync(join(cache, "tasks"), { recursive: true });
  for (const t of tasks) {
    const path = join(cache, "tasks", `${t.key}.json`);
    if (!existsSync(path)) torch.writeFileAtomic(path, [`${JSON.stringify(t, null, 2)}\n`]);
  }
}

export function loadTask(cache: string, key: string): Task {
  const path = join(cache, "tasks", `${key}.json`);
  if (!existsSync(path)) throw new Error(`no task ${key} in the cache ${cache} (${path} not found)`);
  return JSON.parse(readFileSync(path, "utf8")) as Task;
}

/** Where a task input's model is: a train task's checkpoint, or the file (and how to read it) the experiment names. */
export function modelSource(cache: string, ref: ModelRef): ModelSourceLike {
  if ("task" in ref) return join(taskDir(cache, "train", ref.task), "model.safetensors");
  const { sha256: _, ...source } = ref;
  return Object.keys(source).length === 1 ? source.checkpoint : source;
}

/**
 * Node's arguments that run the stitchlab CLI with `args`: the built CLI, or the sources through
 * tsx (resolved to a path, so the command works from any directory, as a Slurm job's does).
 */
export function cliCommand(...args: string[]): string[] {
  const here = fileURLToPath(import.meta.url);
  const fromSource = here.endsWith(".ts");
  const main = join(here, "..", "..", "cli", fromSource ? "main.ts" : "main.js");
  return [...(fromSource ? ["--import", import.meta.resolve("tsx")] : []), main, ...args];
}

/** `stitchlab task KEY --cache CACHE`: one task, in its own process (a worker or a Slurm job). */
export const taskCommand = (cache: string, key: string): string[] => cliCommand("task", key, "--cache", cache);

/** What a failed attempt at a task left for `stitchlab status`: <cache>/failed/<key>.json. */
export interface TaskFailure {
  key: string;
  error: string;
  host: string;
  job: string | null;
  attempt: number;
  at: string;
}

const failurePath = (cache: string, key: string) => join(cache, "failed", `${key}.json`);

export function recordFailure(cache: string, key: string, error: string): void {
  mkdirSync(join(cache, "failed"), { recursive: true });
  const f: TaskFailure = {
    key,
    error,
    host: hostname(),
    job: process.env.SLURM_JOB_ID ?? null,
    attempt: Number(process.env.STITCHLAB_ATTEMPT ?? 1),
    at: new Date().toISOString(),
  };
  torch.writeFileAtomic(failurePath(cache, key), [`${JSON.stringify(f, null, 2)}\n`]);
}

export function clearFailure(cache: string, key: string): void {
  rmSync(failurePath(cache, key), { force: true });
}

export function readFailure(cache: string, key: string): TaskFailure | null {
  const p = failurePath(cache, key);
  return existsSync(p) ? (JSON.parse(readFileSync(p, "utf8")) as TaskFailure) : null;
}

export type TaskEvent = { key: string; progress: Record<string, number | string> };

/**
 * Runs a task unless its output exists; returns "cached" or "ran". Throws the task's error.
 * The device is the runner's choice, not the task's: it stays out of the key, so a model
 * trained on a GPU serves a CPU run and the other way round.
 */
export async function runTask(
  cache: string,
  task: Task,
  onProgress: (fields: Record<string, number | string>) => void = () => {},
  device = "cpu",
): Promise<"cached" | "ran"> {
  const final = taskDir(cache, task.kind, task.key);
  if (existsSync(final)) return "cached";
  for (const dep of task.deps)
    if (!isDone(cache, dep)) throw new Error(`task ${task.key} needs ${dep}, which has not finished`);
  return withLock(
    `${final}.lock`,
    async () => {
      // The holder we waited for may have finished it.
      if (existsSync(final)) return "cached";
      try {
        await makeTask(cache, task, final, onProgress, device);
      } catch (e) {
        // Kept in the cache for `stitchlab status` (local and Slurm runs alike).
        recordFailure(cache, task.key, (e as Error).message);
        throw e;
      }
      clearFailure(cache, task.key);
      return "ran";
    },
    (h) => console.error(`task ${task.key} (${task.label}) is being made by ${describeHolder(h)}: waiting for it`),
  );
}

async function makeTask(
  cache: string,
  task: Task,
  final: string,
  onProgress: (fields: Record<string, number | string>) => void,
  device: string,
): Promise<void> {
  const partial = `${final}.partial`;
  const spec = task.spec;
  if (spec.kind !== "iris") rmSync(partial, { recursive: true, force: true });
  mkdirSync(partial, { recursive: true });
  if (spec.kind === "train") {
    await trainModel({ ...spec.config, device }, partial, (p) =>
      onProgress({ epoch: p.epoch, epochs: p.epochs, step: p.step, steps: p.steps, loss: Number(p.loss.toFixed(4)) }),
    );
  } else if (spec.kind === "iris") {
    await runIris(
      {
        front: modelSource(cache, spec.front),
        point: spec.point,
        dataset: spec.dataset,
        root: spec.root,
        imageSize: spec.imageSize,
        shortcut: spec.shortcut,
        limit: spec.limit,
        options: spec.options,
        device,
      },
      partial,
      (p) =>
        onProgress({
          batch: p.batch,
          batches: p.batches,
          step: p.step,
          meanResidual: Number(p.meanResidual.toFixed(4)),
        }),
    );
  } else {
    await runStitch(
      {
        ...spec.config,
        front: modelSource(cache, spec.front),
        back: modelSource(cache, spec.back),
        iris: spec.iris ? taskDir(cache, "iris", spec.iris) : undefined,
        device,
      },
      partial,
      (p) => onProgress({ epoch: p.epoch, epochs: p.epochs, loss: Number(p.loss.toFixed(4)) }),
    );
  }
  renameSync(partial, final);
}

/** Leftover partial folders (from killed runs), for `--dry-run` to mention. */
export function partials(cache: string): string[] {
  const out: string[] = [];
  for (const kind of ["train", "iris", "stitch"]) {
    const dir = join(cache, kind);
    if (existsSync(dir)) for (const f of readdirSync(dir)) if (f.endsWith(".partial")) out.push(join(kind, f));
  }
  return out;
}
