// The task cache: one home for what a key is, where an entry lives, when an entry counts as
// finished, and what a failed attempt leaves.
//
// Layout of a cache folder:
//   tasks/<key>.json        the task (written by the planner; `stitchlab task KEY` runs it)
//   <kind>/<key>/           a finished task's output, with manifest.json (each file's size and
//                           SHA-256, and the machine that made it)
//   <kind>/<key>.partial/   where it is made; renamed to <kind>/<key>/ only when everything in it
//                           is written, so a run killed at any moment (even kill -9) leaves a
//                           partial folder that is never taken for finished. IRI sets resume from
//                           their partial folder (finished batches are kept); other tasks restart.
//   <kind>/<key>.lock       the process making it (experiments/lock.ts)
//   <kind>/<key>.broken-*/  an entry whose files no longer match its manifest (size, or the
//                           SHA-256 of a file a run reads), moved aside
//   failed/<key>.json       the error of the last failed attempt, for `stitchlab status`
//
// What a key promises: the same key means the same task kind, format version, settings and
// inputs (the keys of the tasks it reads, or a checkpoint file's SHA-256). Where files live
// (dataset roots, checkpoint paths) and where it runs (the device) stay out of keys, so moving
// the data or switching to a GPU reuses the cache. Results are bit-reproducible for the same
// key on the same kind of CPU, thread count and libtorch; on another machine or thread count
// floating-point sums round differently and results can differ in the last bits (and, through
// training, further). Each entry's manifest records the device, thread count, libtorch and CPU
// it was made with, so a comparison can check them.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from "node:fs";
import { cpus, hostname } from "node:os";
import { join, relative } from "node:path";
import { canonical, readJsonFile, sha256File, writeFileAtomic } from "../io/files.js";
import * as torch from "../torch/index.js";
import type { Task } from "./plan.js";

/** Bumped when a task kind's output changes meaning, so old cache entries are not reused. */
// train 2: markers painted after augmentation, lr steps at 1/3 and 2/3; stitch 2: marked test
// sets, batch-norm "adapt", augmentation, dropped last batch, random init images, soft kappa;
// iris 2 (and all three): the ViT head point is the [N, D] class token, the ImageNet stem point
// precedes the max-pool, VGG-16-BN has torchvision's layout; iris 3: an IRI that starts from
// another image starts from a seeded derangement of its batch (was: the next image); train 3,
// iris 4, stitch 3: a task's spec is its job's fully resolved config (train/config.ts,
// stitch/config.ts), absent settings are null and every default is in the key (issue 24), and
// stitching's lr drops at floor(1/3) and floor(2/3) of its epochs (was: round); training
// images' Pixel markers take a place drawn anew every epoch, as the reference's loader (was: one
// place per image). train 4: the 32 px ResNet stem starts from PyTorch's default Conv2d
// initialisation, as the reference's (was: kaiming-normal fan_out), and greyStem and lrDecay are in
// every train config; stitch keys changed then too without a bump, since every config now holds
// stitching's whole recipe (optimizer, betas, adamEps, lrDecay, milestones: issue 36), so a change
// to a recipe value changes the key and never needs a bump. stitch 4: T's least-squares start
// takes singular values below 1e-6 of the largest as zero (stitch/layer.ts LSTSQ_RCOND), which
// changed the stitches whose start had fewer distinct samples than unknowns.
export const TASK_FORMAT = { train: 4, iris: 4, stitch: 4 } as const;
export type TaskKind = keyof typeof TASK_FORMAT;

/**
 * Fields that never enter a key, at any depth: where files live and where the task runs (see
 * the top of this file).
 */
export const KEY_EXCLUDED_FIELDS = ["root", "checkpoint", "device"] as const;

/** The key of a task: its kind, its format version and its spec without the excluded fields. */
export function taskKey(kind: TaskKind, spec: unknown): string {
  const excluded = new Set<string>(KEY_EXCLUDED_FIELDS);
  const strip = (o: unknown): unknown => {
    if (Array.isArray(o)) return o.map(strip);
    if (o && typeof o === "object")
      return Object.fromEntries(
        Object.entries(o)
          .filter(([k]) => !excluded.has(k))
          .map(([k, v]) => [k, strip(v)]),
      );
    return o;
  };
  const h = createHash("sha256").update(canonical({ kind, format: TASK_FORMAT[kind], spec: strip(spec) }));
  return `${kind}-${h.digest("hex").slice(0, 20)}`;
}

export const kindOf = (key: string): TaskKind => key.split("-")[0] as TaskKind;
export const taskDir = (cache: string, kind: TaskKind, key: string): string => join(cache, kind, key);
export const entryDir = (cache: string, key: string): string => taskDir(cache, kindOf(key), key);
export const lockPath = (cache: string, key: string): string => `${entryDir(cache, key)}.lock`;
const MANIFEST = "manifest.json";

export interface Manifest {
  key: string;
  files: { path: string; bytes: number; sha256: string }[];
  made: {
    at: string;
    host: string;
    device: torch.Device;
    threads: number;
    libtorch: string;
    cpu: string;
    /**
     * The instruction set oneDNN ran with and the convolutions' layout: like the thread count,
     * they change sums' order, and DNNL_MAX_CPU_ISA changes them on one CPU (torch/layout.ts).
     * Absent from entries made before issue 36.
     */
    onednnIsa?: string;
    layout?: torch.ConvLayout;
    node: string;
  };
}

function listFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...listFiles(p));
    else if (e.isFile()) out.push(p);
  }
  return out.sort();
}

/** Writes the manifest into a complete partial folder and renames it into place. */
export function finishEntry(cache: string, key: string, partial: string, device: torch.Device): void {
  const files = listFiles(partial)
    .filter((p) => relative(partial, p) !== MANIFEST)
    .map((p) => ({
      path: relative(partial, p),
      bytes: statSync(p).size,
      sha256: sha256File(p),
    }));
  const manifest: Manifest = {
    key,
    files,
    made: {
      at: new Date().toISOString(),
      host: hostname(),
      device,
      threads: torch.getNumThreads(),
      libtorch: torch.buildInfo().torch,
      cpu: cpus()[0]?.model ?? "unknown",
      onednnIsa: torch.onednnIsa(),
      layout: torch.convLayout(device),
      node: process.version,
    },
  };
  writeFileAtomic(join(partial, MANIFEST), [`${JSON.stringify(manifest, null, 2)}\n`]);
  renameSync(partial, entryDir(cache, key));
}

export function readManifest(cache: string, key: string): Manifest | null {
  const p = join(entryDir(cache, key), MANIFEST);
  return existsSync(p) ? readJsonFile<Manifest>(p, "a cache entry's manifest") : null;
}

/**
 * Why an entry cannot be trusted (a file missing or of another size than its manifest says; with
 * `check` "hashes", also a file whose SHA-256 is not its manifest's), or null. Planning checks
 * sizes only, so that it stays fast on a large cache; a run checks the hashes of the entries it
 * reads (verifyReads, runTask). Entries made before manifests existed are taken as they are.
 */
export function entryProblem(cache: string, key: string, check: "sizes" | "hashes" = "sizes"): string | null {
  const dir = entryDir(cache, key);
  let m: Manifest | null;
  try {
    m = readManifest(cache, key);
  } catch {
    return `${MANIFEST} is not valid JSON`;
  }
  if (!m) return null;
  for (const f of m.files) {
    const p = join(dir, f.path);
    if (!existsSync(p)) return `${f.path} is missing`;
    const size = statSync(p).size;
    if (size !== f.bytes) return `${f.path} has ${size} bytes, its manifest says ${f.bytes}`;
    if (check === "hashes") {
      const sha = sha256File(p);
      if (sha !== f.sha256)
        return `${f.path}'s SHA-256 is ${sha.slice(0, 16)}..., its manifest says ${f.sha256.slice(0, 16)}... (changed after it was made)`;
    }
  }
  return null;
}

/** Moves an entry aside (kept for inspection, never read again); returns where it went. */
export function setAside(cache: string, key: string): string {
  const dir = entryDir(cache, key);
  const to = `${dir}.broken-${Date.now()}`;
  renameSync(dir, to);
  return to;
}

/** A finished entry whose files match its manifest. */
export const isDone = (cache: string, key: string): boolean =>
  existsSync(entryDir(cache, key)) && entryProblem(cache, key) === null;

/**
 * Moves an entry whose files no longer match its manifest aside (kept for inspection, never
 * read again), so that the task is made anew; returns the problem, or null when it was sound.
 */
export function setAsideIfBroken(cache: string, key: string): string | null {
  if (!existsSync(entryDir(cache, key))) return null;
  const problem = entryProblem(cache, key);
  if (problem) setAside(cache, key);
  return problem;
}

/** Writes every task's description where `stitchlab task KEY` finds it. */
export function saveTasks(cache: string, tasks: Task[]): void {
  mkdirSync(join(cache, "tasks"), { recursive: true });
  for (const t of tasks) {
    const path = join(cache, "tasks", `${t.key}.json`);
    if (!existsSync(path)) writeFileAtomic(path, [`${JSON.stringify(t, null, 2)}\n`]);
  }
}

export function loadTask(cache: string, key: string): Task {
  const path = join(cache, "tasks", `${key}.json`);
  if (!existsSync(path)) throw new Error(`no task ${key} in the cache ${cache} (${path} not found)`);
  return readJsonFile<Task>(path, "a task's description");
}

/** Leftover partial folders (from killed runs), for `--dry-run` to mention. */
export function partials(cache: string): string[] {
  const out: string[] = [];
  for (const kind of Object.keys(TASK_FORMAT)) {
    const dir = join(cache, kind);
    if (existsSync(dir)) for (const f of readdirSync(dir)) if (f.endsWith(".partial")) out.push(join(kind, f));
  }
  return out;
}

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
  writeFileAtomic(failurePath(cache, key), [`${JSON.stringify(f, null, 2)}\n`]);
}

export function clearFailure(cache: string, key: string): void {
  rmSync(failurePath(cache, key), { force: true });
}

export function readFailure(cache: string, key: string): TaskFailure | null {
  const p = failurePath(cache, key);
  return existsSync(p) ? readJsonFile<TaskFailure>(p, "a task's failure record") : null;
}
