// Running one task of the graph against the cache (its layout, keys and entries:
// experiments/cache.ts).
import { existsSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ModelSourceLike } from "../models/checkpoint.js";
import type { IrisConfig } from "../stitch/config.js";
import { runIris, runStitch } from "../stitch/jobs.js";
import { type Device, requireDevice } from "../torch/index.js";
import { trainModel } from "../train/trainer.js";
import {
  clearFailure,
  entryProblem,
  finishEntry,
  isDone,
  loadTask,
  lockPath,
  readFailure,
  recordFailure,
  setAside,
  setAsideIfBroken,
  taskDir,
} from "./cache.js";
import { describeHolder, withLock } from "./lock.js";
import type { IrisTask, ModelRef, Task } from "./plan.js";

/** Where a task input's model is: a train task's checkpoint, or the file (and how to read it) the experiment names. */
export function modelSource(cache: string, ref: ModelRef): ModelSourceLike {
  if ("task" in ref) return join(taskDir(cache, "train", ref.task), "model.safetensors");
  const { sha256: _, ...source } = ref;
  return Object.keys(source).length === 1 ? source.checkpoint : source;
}

/**
 * Node's arguments that run one of stitchlab's entry scripts (`entry`: its path from the
 * repository root, without extension) with `args`: the built .js, or the sources through tsx
 * (resolved to a path, so the command works from any directory, as a Slurm job's does).
 */
function nodeCommand(entry: string, args: string[]): string[] {
  const here = fileURLToPath(import.meta.url);
  const fromSource = here.endsWith(".ts");
  const script = join(here, "..", "..", `${entry}.${fromSource ? "ts" : "js"}`);
  return [...(fromSource ? ["--import", import.meta.resolve("tsx")] : []), script, ...args];
}

/** Node's arguments that run the stitchlab CLI with `args` (the tests, the benchmarks). */
export const cliCommand = (...args: string[]): string[] => nodeCommand("cli/main", args);

/**
 * Node's arguments that run one task in its own process (a local worker or a Slurm job): the
 * worker script of this folder (experiments/worker.ts), not the CLI, so that experiments/ starts
 * nothing above itself. Add `--device D`.
 */
export const taskCommand = (cache: string, key: string): string[] =>
  nodeCommand("experiments/worker", [key, "--cache", cache]);

/**
 * Node's arguments that report the run in folder `out` from the cache (a Slurm run's report job):
 * the worker script in its report mode, as `stitchlab report OUT` does it.
 */
export const reportCommand = (out: string): string[] => nodeCommand("experiments/worker", ["--report", out]);

export type TaskEvent = { key: string; progress: Record<string, number | string> };

/**
 * One task of the cache, as a worker process runs it (experiments/worker.ts; `stitchlab task`):
 * its progress fields as a JSON line on `write` at most once a second, then
 * `{"event":"done","key":...,"state":"cached"|"ran"}`; the runner reads these lines from the
 * worker's stdout (experiments/runner.ts). Throws on failure, having recorded it in the cache
 * for `stitchlab status` (runTask records a task's own failure; this adds the others: a missing
 * input, a device this process cannot use). The thread count is STITCHLAB_THREADS's (set
 * when libtorch starts: torch/native.ts), the share of the cores the runner gave this process.
 */
export async function runTaskOfCache(
  cache: string,
  key: string,
  device: Device,
  write: (line: string) => void = (line) => console.log(line),
): Promise<void> {
  let last = 0;
  let state: "cached" | "ran";
  try {
    requireDevice(device);
    state = await runTask(
      cache,
      loadTask(cache, key),
      (fields) => {
        if (Date.now() - last > 1000) {
          last = Date.now();
          write(JSON.stringify(fields));
        }
      },
      device,
    );
  } catch (e) {
    if (!readFailure(cache, key)) recordFailure(cache, key, (e as Error).message);
    throw e;
  }
  write(JSON.stringify({ event: "done", key, state }));
}

/**
 * Runs a task unless its output exists; returns "cached" or "ran". Throws the task's error.
 * The device is the runner's choice, not the task's: it stays out of the key, so a model
 * trained on a GPU serves a CPU run and the other way round.
 */
export async function runTask(
  cache: string,
  task: Task,
  onProgress: (fields: Record<string, number | string>) => void,
  device: Device,
): Promise<"cached" | "ran"> {
  const final = taskDir(cache, task.kind, task.key);
  if (isDone(cache, task.key)) return "cached";
  for (const dep of task.deps)
    if (!isDone(cache, dep)) throw new Error(`task ${task.key} needs ${dep}, which has not finished`);
  // What this task reads must be what was made: a file changed in place keeps its size (issue 25:
  // a negated weight tensor changed agreement from 0.899 to 0.535, with exit 0).
  for (const dep of task.deps) {
    const problem = entryProblem(cache, dep, "hashes");
    if (problem) {
      const aside = setAside(cache, dep);
      throw new Error(
        `task ${task.key} (${task.label}) needs ${dep}, whose cache entry is corrupt: ${problem}. It was moved to ${aside}; run again to make it anew`,
      );
    }
  }
  return withLock(
    lockPath(cache, task.key),
    async () => {
      // The holder we waited for may have finished it. An entry whose files no longer match
      // its manifest (a truncated copy, a full disk) is set aside and made anew.
      const broken = setAsideIfBroken(cache, task.key);
      if (broken)
        console.error(`task ${task.key} (${task.label}): its cache entry is broken (${broken}); making it again`);
      else if (existsSync(final)) return "cached";
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

/**
 * An IRI task's spec as runIris's config: every field of the spec (what the task's key hashes),
 * with its front read from the cache and the device the runner chose. Built from the spec itself,
 * so a field added to the IRI config cannot be dropped on the way (test/noise.test.ts).
 */
export function irisConfigOf(cache: string, spec: IrisTask, device: Device): IrisConfig {
  const { kind: _k, front, ...config } = spec;
  return { ...config, front: modelSource(cache, front), device };
}

async function makeTask(
  cache: string,
  task: Task,
  final: string,
  onProgress: (fields: Record<string, number | string>) => void,
  device: Device,
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
    await runIris(irisConfigOf(cache, spec, device), partial, (p) =>
      onProgress({
        batch: p.batch,
        batches: p.batches,
        step: p.step,
        // No mean before the first batch has finished: left out rather than NaN (or null in JSON).
        ...(Number.isFinite(p.meanResidual) ? { meanResidual: Number(p.meanResidual.toFixed(4)) } : {}),
      }),
    );
  } else {
    await runStitch(
      {
        ...spec.config,
        front: modelSource(cache, spec.front),
        back: modelSource(cache, spec.back),
        iris: spec.iris ? taskDir(cache, "iris", spec.iris) : null,
        device,
      },
      partial,
      (p) => onProgress({ epoch: p.epoch, epochs: p.epochs, loss: Number(p.loss.toFixed(4)) }),
    );
  }
  finishEntry(cache, task.key, partial, device);
}
