// Running one task of the graph against the cache. Layout of a cache folder:
//   tasks/<key>.json      the task (written by the planner; `stitchlab task KEY` runs it)
//   <kind>/<key>/         a finished task's output, complete by construction:
//   <kind>/<key>.partial/ where it is made; renamed to <kind>/<key>/ only when everything in it
//                         is written, so a run killed at any moment (even kill -9) leaves a
//                         partial folder that is never taken for finished. IRI sets resume from
//                         their partial folder (finished batches are kept); other tasks restart.
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { runIris, runStitch } from "../stitch/jobs.js";
import * as torch from "../torch/index.js";
import { trainModel } from "../train/trainer.js";
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

export function modelPath(cache: string, ref: ModelRef): string {
  return "task" in ref ? join(taskDir(cache, "train", ref.task), "model.safetensors") : ref.checkpoint;
}

export type TaskEvent = { key: string; progress: Record<string, number | string> };

/** Runs a task unless its output exists; returns "cached" or "ran". Throws the task's error. */
export async function runTask(
  cache: string,
  task: Task,
  onProgress: (fields: Record<string, number | string>) => void = () => {},
): Promise<"cached" | "ran"> {
  const final = taskDir(cache, task.kind, task.key);
  if (existsSync(final)) return "cached";
  for (const dep of task.deps)
    if (!isDone(cache, dep)) throw new Error(`task ${task.key} needs ${dep}, which has not finished`);
  const partial = `${final}.partial`;
  const spec = task.spec;
  if (spec.kind !== "iris") rmSync(partial, { recursive: true, force: true });
  mkdirSync(partial, { recursive: true });
  if (spec.kind === "train") {
    await trainModel(spec.config, partial, (p) =>
      onProgress({ epoch: p.epoch, epochs: p.epochs, step: p.step, steps: p.steps, loss: Number(p.loss.toFixed(4)) }),
    );
  } else if (spec.kind === "iris") {
    await runIris(
      {
        front: modelPath(cache, spec.front),
        point: spec.point,
        dataset: spec.dataset,
        root: spec.root,
        shortcut: spec.shortcut,
        limit: spec.limit,
        options: spec.options,
        device: "cpu",
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
        front: modelPath(cache, spec.front),
        back: modelPath(cache, spec.back),
        iris: spec.iris ? taskDir(cache, "iris", spec.iris) : undefined,
        device: "cpu",
      },
      partial,
      (p) => onProgress({ epoch: p.epoch, epochs: p.epochs, loss: Number(p.loss.toFixed(4)) }),
    );
  }
  renameSync(partial, final);
  return "ran";
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
