// An IRI set on disk: one folder per (front model, stitch point, images, settings).
//
//   settings.json       what the set is (written first; a rerun with other settings is refused)
//   parts/00012.safetensors
//                       batch 12, written atomically as soon as it is done: an interrupted run
//                       resumes by skipping the batches whose part exists
//   iris.safetensors    images (uint8 [N, C, H, W]), labels (int64, from x), indices (int64,
//                       positions in the source split), residuals (float32, per image)
//   preview.png         x, x' and |x - x'| for the first images, one row each
//   iris.json           settings + residual summary; written LAST, so it marks a finished set
//
// The front model is identified by a fingerprint of its weights (models/checkpoint.ts), not by a
// path, so a stitch run can check that an IRI set was made by its front model at its point.
import { existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { batches, type Dataset, datasetSize, gridPng, type Normalization, type ShortcutKind } from "../data/index.js";
import { readJsonFile, writeFileAtomic } from "../io/files.js";
import { loadSafetensors, saveSafetensors } from "../io/safetensors.js";
import type { StitchableModel } from "../models/stitchable.js";
import * as torch from "../torch/index.js";
import { type IriOptions, iriStepCap } from "./iri-options.js";
import { generateIriBatch, labelsOnlyIriBatch } from "./iris.js";
import { GOOD_IRI_RESIDUAL } from "./residuals.js";

/** Everything that decides an IRI set's content (compared on resume and by stitch runs). */
export interface IriSetSettings {
  front: { arch: string; options: Record<string, unknown>; fingerprint: string; checkpoint?: string };
  point: string;
  /** Source images: the training split of this dataset, with this shortcut, first `limit` images. */
  dataset: string;
  shortcut: ShortcutKind | null;
  /** The markers' strength when the sources are marked (absent: 1, the protocol's). */
  markerScale?: number;
  limit: number | null;
  count: number;
  classes: string[];
  imageShape: number[];
  normalization: Normalization;
  /**
   * The IRIs of the labels-only sender in the front's place (stitch/noise.ts): their starts, residual
   * 0 (stitch/iris.ts labelsOnlyIriBatch). Present only when set, so other sets keep their settings.
   */
  labelsOnly?: true;
  options: IriOptions;
}

export interface ResidualSummary {
  mean: number;
  median: number;
  p90: number;
  min: number;
  max: number;
  /** Share of images with a residual of at most GOOD_IRI_RESIDUAL (a good IRI). */
  below01: number;
}

/** How long the descent ran (stitch/iri-tight.ts): per image, its steps over all its starts. */
export interface DescentSummary {
  meanSteps: number;
  maxSteps: number;
  /** Images that had every step the cap allows and are still above the target (0 without a target). */
  capped: number;
}

export interface IriSetInfo extends IriSetSettings {
  residuals: ResidualSummary;
  /** The descent's steps (absent in sets made before it was recorded). */
  descent?: DescentSummary;
  /** The relative residual of each image in preview.png, left to right (absent in sets made before). */
  previewResiduals?: number[];
  /**
   * The share of x' to which A's own head gives the class it gives x (stitch/iris.ts IriBatch
   * frontAgrees): whether A itself tells its IRIs from their sources. Absent in sets made before.
   */
  frontAgreement?: number;
  seconds: number;
  /** The thread count the set was made with (absent in sets made before it was recorded). */
  threads?: number;
  stitchlabFormat: 1;
}

export interface IriProgress {
  batch: number;
  batches: number;
  step: number;
  steps: number;
  /** Images finished so far (resumed ones included) and their mean residual. */
  images: number;
  meanResidual: number;
  /** Batch residual of the current iterate. */
  residual: number;
  resumed: number;
}

const PREVIEW_IMAGES = 8;

export function residualSummary(r: Float32Array): ResidualSummary {
  if (r.length === 0) throw new RangeError("residualSummary: no residuals");
  const s = Float64Array.from(r).sort();
  const q = (f: number) => s[Math.min(s.length - 1, Math.floor(f * (s.length - 1) + 0.5))];
  return {
    mean: s.reduce((a, b) => a + b, 0) / s.length,
    median: q(0.5),
    p90: q(0.9),
    min: s[0],
    max: s[s.length - 1],
    below01: s.filter((v) => v <= GOOD_IRI_RESIDUAL).length / s.length,
  };
}

export function descentSummary(steps: Int32Array, residuals: Float32Array, opts: IriOptions): DescentSummary {
  const cap = iriStepCap(opts);
  let capped = 0;
  for (let i = 0; i < steps.length; i++)
    if (opts.target !== undefined && steps[i] >= cap && (residuals[i] as number) > opts.target) capped++;
  return {
    meanSteps: steps.reduce((a, b) => a + b, 0) / steps.length,
    maxSteps: steps.reduce((a, b) => Math.max(a, b), 0),
    capped,
  };
}

/** The fields two settings must share to describe the same IRI set (the checkpoint path may move). */
function identity(s: IriSetSettings): string {
  const { checkpoint: _, ...front } = s.front;
  return JSON.stringify({ ...s, front });
}

function differences(a: IriSetSettings, b: IriSetSettings): string {
  const flat = (s: IriSetSettings) => {
    const { checkpoint: _, ...front } = s.front;
    return { ...s, front: JSON.stringify(front), normalization: JSON.stringify(s.normalization), ...s.options };
  };
  const fa = flat(a) as Record<string, unknown>;
  const fb = flat(b) as Record<string, unknown>;
  return Object.keys({ ...fa, ...fb })
    .filter((k) => k !== "options" && JSON.stringify(fa[k]) !== JSON.stringify(fb[k]))
    .map((k) => `${k}: ${JSON.stringify(fa[k])} there, ${JSON.stringify(fb[k])} here`)
    .join("; ");
}

const partName = (b: number) => `${String(b).padStart(5, "0")}.safetensors`;

/**
 * Makes (or finishes) the IRI set of `images` under `dir`. `images` are the source images,
 * already marked and limited as `settings` says. Batches already in dir/parts are kept, so an
 * interrupted run loses at most the batch in progress. Returns the finished set's info.
 */
export async function generateIriSet(
  front: StitchableModel,
  images: Dataset,
  dir: string,
  settings: IriSetSettings,
  run: { device?: torch.Device; onProgress?: (p: IriProgress) => void } = {},
): Promise<IriSetInfo> {
  const onProgress = run.onProgress ?? (() => {});
  const n = datasetSize(images);
  if (n !== settings.count) throw new Error(`generateIriSet: ${n} images but settings.count is ${settings.count}`);
  front.stitchPoint(settings.point); // a point the model lacks fails here, before anything is written
  mkdirSync(join(dir, "parts"), { recursive: true });
  const settingsPath = join(dir, "settings.json");
  // Other settings are refused only where they guard finished work: a run that failed before its
  // first batch (a bad option) leaves settings and nothing else, and the corrected run replaces them.
  const finishedWork = existsSync(join(dir, "iris.json")) || readdirSync(join(dir, "parts")).length > 0;
  const old = existsSync(settingsPath) ? readSettings(settingsPath) : null;
  if (old && finishedWork && identity(old) !== identity(settings))
    throw new Error(
      `${dir} holds an IRI set with other settings (${differences(old, settings)}); use another --out or delete it`,
    );
  if (!old || identity(old) !== identity(settings))
    writeFileAtomic(settingsPath, [`${JSON.stringify(settings, null, 2)}\n`]);
  const done = join(dir, "iris.json");
  if (existsSync(done)) return readIriSetInfo(dir);

  const { options: opts } = settings;
  const count = Math.ceil(n / opts.batchSize);
  // With a target an image may run past `steps`, over restarts, up to the cap.
  const stepsShown = iriStepCap(opts);
  const residuals = new Float32Array(n);
  const steps = new Int32Array(n);
  // A's own answer on x' against x, per image (parts written before it was recorded: unknown).
  let agreed = 0;
  let judged = 0;
  let finished = 0;
  let sum = 0;
  let resumed = 0;
  const started = Date.now();
  for (const b of batches(images, { batchSize: opts.batchSize, device: run.device })) {
    const index = Math.floor(b.indices[0] / opts.batchSize);
    const part = join(dir, "parts", partName(index));
    let r: Float32Array | null = null;
    let used: Int32Array | null = null;
    let agrees: Uint8Array | null = null;
    if (existsSync(part)) {
      const saved = loadSafetensors(part).tensors;
      const ok = saved.residuals?.shape[0] === b.indices.length;
      if (ok) {
        r = Float32Array.from(saved.residuals.toTypedArray() as Float32Array);
        // Parts written before steps were recorded ran every step.
        used = saved.steps
          ? Int32Array.from(saved.steps.toTypedArray() as Int32Array)
          : new Int32Array(r.length).fill(opts.steps);
        agrees = saved.front_agrees ? Uint8Array.from(saved.front_agrees.toTypedArray() as Uint8Array) : null;
      }
      torch.dispose(Object.values(saved));
      if (r) resumed += b.indices.length;
    }
    if (!r) {
      const seed = opts.seed * 1_000_003 + index;
      const out = settings.labelsOnly
        ? labelsOnlyIriBatch(b.x, settings.normalization, opts, seed)
        : generateIriBatch(front, settings.point, b.x, settings.normalization, opts, seed, (step, residual) =>
            onProgress({
              batch: index + 1,
              batches: count,
              step: step + 1,
              steps: stepsShown,
              images: finished,
              meanResidual: finished ? sum / finished : Number.NaN,
              residual,
              resumed,
            }),
          );
      torch.tidy(() => {
        saveSafetensors(part, {
          images: out.images,
          labels: b.y,
          indices: torch.tensor(BigInt64Array.from(b.indices, (i) => BigInt(i))),
          residuals: torch.tensor(out.residuals),
          steps: torch.tensor(out.steps),
          front_agrees: torch.tensor(out.frontAgrees),
        });
      });
      out.images.dispose();
      r = out.residuals;
      used = out.steps;
      agrees = out.frontAgrees;
    }
    if (agrees) {
      for (const v of agrees) agreed += v;
      judged += agrees.length;
    }
    residuals.set(r, b.indices[0]);
    steps.set(used ?? new Int32Array(r.length).fill(opts.steps), b.indices[0]);
    for (const v of r) sum += v;
    finished += r.length;
    torch.dispose(b);
    // Lets a progress bar redraw and a signal handler run between batches.
    await new Promise((resolve) => setImmediate(resolve));
  }
  onProgress({
    batch: count,
    batches: count,
    step: stepsShown,
    steps: stepsShown,
    images: finished,
    meanResidual: sum / finished,
    residual: Number.NaN,
    resumed,
  });
  const elapsed = (Date.now() - started) / 1000;
  await assemble(dir, images, count);
  const info: IriSetInfo = {
    ...settings,
    residuals: residualSummary(residuals),
    descent: descentSummary(steps, residuals, opts),
    previewResiduals: Array.from(residuals.subarray(0, Math.min(PREVIEW_IMAGES, n)), (r) => Number(r.toFixed(4))),
    // Only where every image was judged (a resumed set whose older parts lack it has none).
    ...(judged === n ? { frontAgreement: agreed / n } : {}),
    seconds: elapsed,
    threads: torch.getNumThreads(),
    stitchlabFormat: 1,
  };
  writeFileAtomic(done, [`${JSON.stringify(info, null, 2)}\n`]);
  rmSync(join(dir, "parts"), { recursive: true, force: true });
  return info;
}

/** Joins the parts into iris.safetensors and draws preview.png (x, x', |x - x'|). */
async function assemble(dir: string, source: Dataset, count: number): Promise<void> {
  const parts = readdirSync(join(dir, "parts")).filter((f) => f.endsWith(".safetensors"));
  if (parts.length !== count) throw new Error(`${dir}/parts has ${parts.length} batches, expected ${count}`);
  const loaded = Array.from({ length: count }, (_, b) => loadSafetensors(join(dir, "parts", partName(b))).tensors);
  try {
    const joined = torch.tidy(() => {
      const cat = (k: string) => torch.cat(loaded.map((t) => t[k]));
      return {
        images: cat("images"),
        labels: cat("labels"),
        indices: cat("indices"),
        residuals: cat("residuals"),
        ...(loaded.every((t) => t.steps) ? { steps: cat("steps") } : {}),
      };
    });
    saveSafetensors(join(dir, "iris.safetensors"), joined);
    const grid = torch.tidy(() => {
      const k = Math.min(PREVIEW_IMAGES, joined.images.shape[0]);
      const x = source.images.slice(0, 0, k);
      const xp = joined.images.slice(0, 0, k);
      const diff = x.to("int16").sub(xp.to("int16")).abs().to("uint8");
      return torch.cat([x, xp, diff]);
    });
    const png = await gridPng(grid, { nrow: grid.shape[0] / 3 });
    grid.dispose();
    writeFileAtomic(join(dir, "preview.png"), [png]);
    torch.dispose(joined);
  } finally {
    for (const t of loaded) torch.dispose(Object.values(t));
  }
}

const readSettings = (path: string): IriSetSettings => readJsonFile<IriSetSettings>(path, "an IRI set's settings");

export function readIriSetInfo(dir: string): IriSetInfo {
  const path = join(dir, "iris.json");
  if (!existsSync(path)) {
    const partial = existsSync(join(dir, "settings.json"));
    throw new Error(
      partial
        ? `${dir} is an unfinished IRI set (no iris.json yet); rerun the same \`stitchlab iris\` command to finish it`
        : `${dir} is not an IRI set: ${path} not found (make one with \`stitchlab iris\`)`,
    );
  }
  return readJsonFile<IriSetInfo>(path, "an IRI set's record");
}

export interface IriSet {
  info: IriSetInfo;
  /** x' with the labels of x: train T on this in invariance-aware mode. */
  dataset: Dataset;
  indices: torch.Tensor;
  residuals: Float32Array;
}

/** Loads a finished IRI set; the caller owns its tensors (disposeDataset + indices.dispose()). */
export function loadIriSet(dir: string): IriSet {
  const info = readIriSetInfo(dir);
  const { tensors } = loadSafetensors(join(dir, "iris.safetensors"));
  const { images, labels, indices, residuals } = tensors;
  if (!images || !labels || !indices || !residuals || images.shape[0] !== info.count) {
    torch.dispose(Object.values(tensors));
    throw new Error(`${dir}/iris.safetensors does not hold the ${info.count} IRIs iris.json describes`);
  }
  const r = Float32Array.from(residuals.toTypedArray() as Float32Array);
  residuals.dispose();
  return {
    info,
    dataset: { images, labels, classes: info.classes, name: `iris(${info.front.arch}@${info.point})` },
    indices,
    residuals: r,
  };
}

/** Throws unless the IRI set was made by this front model (same weights) at this point, from this dataset. */
export function checkIriSetFor(
  info: IriSetInfo,
  want: { fingerprint: string; point: string; dataset: string; labelsOnly?: boolean },
  dir: string,
): void {
  const problems: string[] = [];
  if ((info.labelsOnly ?? false) !== (want.labelsOnly ?? false))
    problems.push(
      info.labelsOnly
        ? "it holds the labels-only sender's IRIs (their starts), not the front's"
        : "it holds the front's IRIs, and this stitch has the labels-only sender in the front's place",
    );
  if (info.front.fingerprint !== want.fingerprint)
    problems.push(
      `it was made by another front model (${info.front.arch}${info.front.checkpoint ? ` from ${info.front.checkpoint}` : ""}, weights ${info.front.fingerprint.slice(0, 12)}; this front's are ${want.fingerprint.slice(0, 12)})`,
    );
  if (info.point !== want.point) problems.push(`it was made at point '${info.point}', not '${want.point}'`);
  if (info.dataset !== want.dataset) problems.push(`it was made from ${info.dataset}, not ${want.dataset}`);
  if (problems.length) throw new Error(`IRI set ${dir} does not fit this stitch: ${problems.join("; ")}`);
}
