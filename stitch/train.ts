// Training the stitching layer (docs/method.md, "Training defaults"): Adam, lr 1e-3, weight decay 1e-4,
// batch 128, lr x0.1 at 1/3 and 2/3 of training; T initialised by least squares on real images.
// Every number of that recipe comes in with the options (stitch/config.ts, the schema that holds
// the defaults and puts them in the task's key): none is written here.
// Standard mode trains on real images, invariance-aware mode on an IRI set: the same loop, fed
// different data (x' with the labels of x), which is exactly the mode rule of the paper.
import {
  type AugmentOptions,
  batches,
  type Dataset,
  datasetSize,
  disposeDataset,
  epochOrder,
  type LoaderOptions,
  type MarkerDraws,
  type MarkerPlan,
  type Normalization,
  paintBatchMarkers,
  Rng,
  subset,
} from "../data/index.js";
import type { StitchableModel } from "../models/stitchable.js";
import { BatchNorm2d } from "../nn/layers.js";
import { inEvalMode } from "../nn/module.js";
import { Adam } from "../nn/optim.js";
import { stepSchedule, stepScheduleMilestones } from "../nn/schedule.js";
import * as torch from "../torch/index.js";

type Tensor = torch.Tensor;

import type { AdversarialConfig } from "../eval/config.js";
import type { BnMode, ObjectiveWeights, StitchInit } from "./config.js";
import { FrozenOutputs } from "./frozen.js";
import { stitchLoss, stitchLossFrom } from "./objectives.js";
import { adversarialBatch } from "./robust.js";
import type { StitchedModel } from "./stitched.js";

/**
 * Freezes the model's weights and sets its batch norm: train mode with statistics updated
 * (`updateStats`), train mode with batch statistics only, or eval mode.
 */
export function setFrozenBnMode(model: StitchableModel, mode: "eval" | "batch" | "update"): void {
  model.requiresGrad_(false);
  for (const [, m] of model.namedModules()) if (m instanceof BatchNorm2d) m.updateStats = mode !== "batch";
  if (mode === "eval") model.eval();
  else model.train();
}

/** Sets the stitched model's networks for training T in `mode` (stitch/config.ts BN_MODES says what each does). */
export function setStitchBnMode(s: StitchedModel, mode: BnMode): void {
  if (mode === "adapt" && s.tail === s.back)
    throw new Error("batch-norm mode 'adapt' needs the stitched model's own copy of B (StitchedModel's tail)");
  if (mode === "adapt" && s.front === s.back)
    throw new Error("batch-norm mode 'adapt' needs A and B as separate models (A's statistics adapt, B's must not)");
  const forTrain = mode === "adapt" ? "update" : mode;
  setFrozenBnMode(s.back, mode === "eval" ? "eval" : "batch");
  setFrozenBnMode(s.front, forTrain);
  if (s.tail !== s.back) setFrozenBnMode(s.tail, forTrain);
}

/**
 * Everything a stitching run is trained with, resolved by the caller (stitch/jobs.ts resolves the
 * stitching config and its defaults once; docs/method.md's are Adam, lr 1e-3, weight decay 1e-4,
 * batch 128, least squares on 500 images): no field is filled in here.
 */
export interface StitchTrainOptions {
  objective: ObjectiveWeights;
  normalization: Normalization;
  epochs: number;
  batchSize: number;
  /** The optimiser (Adam) and its settings; the lr is multiplied by lrDecay at each milestone (fractions of the epochs). */
  optimizer: "adam";
  lr: number;
  weightDecay: number;
  betas: readonly [number, number];
  adamEps: number;
  lrDecay: number;
  milestones: readonly number[];
  /** Seeds the least-squares draw and the loader's shuffle. */
  seed: number;
  bnMode: BnMode;
  init: StitchInit;
  /**
   * Real training images for the least-squares initialisation (docs/method.md: 500), drawn at random
   * (seeded by `seed`) from the whole of `real`: image folders are ordered by class.
   */
  initImages: number;
  /**
   * Augmentation of the training images (standard runs augment real images as base training
   * does, data/transforms.ts standardAugment; IRIs never are), or null.
   */
  augment: AugmentOptions | null;
  /**
   * Shortcut markers painted on each training batch after augmentation (standard runs on marked
   * data): drawn anew each epoch (markerDraws), as the reference's loader; or null.
   */
  markers: MarkerPlan | MarkerDraws | null;
  /** Markers of `real` (a plan for the whole set), painted on the least-squares images only, or null. */
  initMarkers: MarkerPlan | null;
  /** Where the batches go (the models must already be there). */
  device: NonNullable<LoaderOptions["device"]>;
  /**
   * Adversarial stitching: the first floor(fraction B) images of each batch are replaced by PGD
   * examples of the stitched model (stitch/robust.ts), and T trains on the mixed batch; or null.
   */
  adversarial: AdversarialConfig | null;
  // How to run, not what to compute: no stitching config carries these two, and they keep their
  // defaults here (the memory budget is the machine's).
  /**
   * Compute A's features and B's targets once per run when nothing T does not touch can change
   * between epochs (stitch/frozen.ts: batch norm "eval", no augmentation, no markers). Default
   * true; false runs every step's A and B again (the results agree within float rounding).
   */
  frozenOnce?: boolean;
  /** In-memory budget for those rows in bytes (default stitch/frozen.ts defaultFrozenBudget()). */
  frozenBudgetBytes?: number;
}

/** The optimiser's recipe among the options: every one is a setting of stitch/config.ts, so in the task's key. */
export const STITCH_RECIPE_KEYS = [
  "optimizer",
  "lr",
  "weightDecay",
  "betas",
  "adamEps",
  "lrDecay",
  "milestones",
] as const;
export type StitchRecipe = Pick<StitchTrainOptions, (typeof STITCH_RECIPE_KEYS)[number]>;

/** The recipe's fields of a resolved stitching config (or of the stitching schema's defaults). */
export const recipeOf = (c: StitchRecipe): StitchRecipe =>
  Object.fromEntries(STITCH_RECIPE_KEYS.map((k) => [k, c[k]])) as unknown as StitchRecipe;

/** Whether A's features and B's targets are the same in every epoch (see StitchTrainOptions.frozenOnce). */
export const frozenOnceApplies = (opts: StitchTrainOptions): boolean =>
  opts.frozenOnce !== false && opts.bnMode === "eval" && !opts.augment && !opts.markers && !opts.adversarial;

export interface StitchTrainProgress {
  epoch: number;
  epochs: number;
  step: number;
  steps: number;
  loss: number;
  /** The epoch's learning rate (the step schedule's, as base training reports it). */
  lr: number;
}

/**
 * How far T's loss was still falling when its learning rate first fell: the relative fall of the
 * mean epoch loss from the third to the last quarter of the full-rate phase (the epochs before the
 * first milestone; every epoch where none falls inside training). The step schedule flattens the
 * loss after a milestone by construction (a tenth of the rate takes a tenth of each step), so a
 * flat tail says nothing of whether T had learnt; the full-rate phase's own slope does. Null with
 * fewer than 4 full-rate epochs (a quarter of none) or a loss that is not finite.
 */
export function fullRateLossFall(
  epochLosses: readonly number[],
  schedule: { milestones: readonly number[]; lrDecay: number },
): number | null {
  const epochs = epochLosses.length;
  const first =
    schedule.lrDecay === 1
      ? epochs
      : Math.min(epochs, ...stepScheduleMilestones(schedule.milestones, epochs).filter((m) => m > 0));
  const q = Math.floor(first / 4);
  if (q < 1) return null;
  const mean = (from: number, to: number) => epochLosses.slice(from, to).reduce((a, b) => a + b, 0) / (to - from);
  const third = mean(first - 2 * q, first - q);
  const last = mean(first - q, first);
  const fall = (third - last) / Math.abs(last);
  return Number.isFinite(fall) ? fall : null;
}

/**
 * Trains s.layer on `train` (real images or IRIs, uint8), after initialising it from the first
 * `initImages` of `real`. Returns the mean loss per epoch and the initialisation residual.
 */
export function trainStitch(
  s: StitchedModel,
  train: Dataset,
  real: Dataset,
  opts: StitchTrainOptions,
  onProgress: (p: StitchTrainProgress) => void = () => {},
): { epochLosses: number[]; initResidual: number | null; frozen: "memory" | "file" | null } {
  const batchSize = opts.batchSize;
  setStitchBnMode(s, opts.bnMode);
  let initResidual: number | null = null;
  if (opts.init === "lstsq") {
    const k = Math.min(opts.initImages, datasetSize(real));
    // A seeded random draw from the whole split, as the reference shuffles before taking its
    // K_init images (dataloaders/cifar.py); the first k of a class-ordered image folder would be one class.
    const picked = new Rng(opts.seed, 0x1a57).sample(datasetSize(real), k);
    const part = subset(real, picked);
    if (opts.initMarkers) {
      const marked = paintBatchMarkers(part.images, opts.initMarkers, picked);
      part.images.dispose();
      part.images = torch.keep(marked);
    }
    // Initialisation features are B's own, so batch norm there uses running statistics.
    inEvalMode(s.networks, () => {
      for (const b of batches(part, { batchSize: k, normalization: opts.normalization, device: opts.device })) {
        // A noise-cluster front sends each image's own noise: keyed by its place in the split.
        const indices = Int32Array.from(b.indices, (i) => picked[i] as number);
        initResidual = s.init("lstsq", b.x, { y: b.y, indices, split: "train" }).residual ?? null;
        torch.dispose(b);
      }
    });
    disposeDataset(part);
  } else {
    s.init(opts.init);
  }

  const params = s.layer.parameters();
  const opt = new Adam(params, {
    lr: opts.lr,
    weightDecay: opts.weightDecay,
    betas: [opts.betas[0], opts.betas[1]],
    eps: opts.adamEps,
  });
  // Base training's step schedule (floor, as the reference's int(); 4 epochs drop after 1 and 2).
  const sched = stepSchedule(opt, opts.milestones, opts.epochs, opts.lrDecay);
  const epochLosses: number[] = [];
  // The last partial batch is dropped, as the reference's loader does (drop_last=True).
  const steps = Math.floor(datasetSize(train) / batchSize);
  if (steps === 0)
    throw new Error(
      `stitching needs at least one full batch: ${datasetSize(train)} training images, batch size ${batchSize}`,
    );
  const frozen = frozenOnceApplies(opts)
    ? FrozenOutputs.build(s, train, {
        weights: opts.objective,
        normalization: opts.normalization,
        batchSize,
        device: opts.device,
        budgetBytes: opts.frozenBudgetBytes,
      })
    : null;
  const step = (x: Tensor | null, y: Tensor, indices: Int32Array, epoch: number, index: number): number =>
    torch.tidy(() => {
      const loss = frozen
        ? (() => {
            const rows = frozen.gather(indices);
            return stitchLossFrom(s, rows.front, rows.target, y, opts.objective);
          })()
        : stitchLoss(
            s,
            opts.adversarial
              ? adversarialBatch(s, x as Tensor, y, { ...opts.adversarial, normalization: opts.normalization })
              : (x as Tensor),
            y,
            opts.objective,
            indices,
          );
      const v = loss.item();
      if (!Number.isFinite(v))
        throw new Error(`stitching diverged: loss is ${v} at epoch ${epoch + 1}, step ${index + 1}`);
      loss.backward();
      opt.step();
      opt.zeroGrad();
      return v;
    });
  try {
    for (let epoch = 0; epoch < opts.epochs; epoch++) {
      let sum = 0;
      let n = 0;
      const lr = opt.lr;
      const done = (count: number, value: number, index: number) => {
        sum += value * count;
        n += count;
        onProgress({ epoch: epoch + 1, epochs: opts.epochs, step: index + 1, steps, loss: sum / n, lr });
      };
      if (frozen) {
        // The loader's order (same seed and epoch) and its dropped last batch, without the images.
        const order = epochOrder(datasetSize(train), { shuffle: true, seed: opts.seed, epoch });
        for (let b = 0; b < steps; b++) {
          const indices = order.slice(b * batchSize, (b + 1) * batchSize);
          const y = torch.keep(
            torch.tidy(() => {
              const labels = train.labels.indexSelect(0, torch.tensor(BigInt64Array.from(indices, (i) => BigInt(i))));
              return labels.to(opts.device);
            }),
          );
          try {
            done(indices.length, step(null, y, indices, epoch, b), b);
          } finally {
            y.dispose();
          }
        }
      } else {
        let b = 0;
        for (const batch of batches(train, {
          batchSize,
          shuffle: true,
          seed: opts.seed,
          epoch,
          dropLast: true,
          augment: opts.augment,
          markers: opts.markers,
          normalization: opts.normalization,
          device: opts.device,
        })) {
          try {
            done(batch.indices.length, step(batch.x, batch.y, batch.indices, epoch, b), b);
          } finally {
            torch.dispose(batch);
          }
          b++;
        }
      }
      sched.step();
      epochLosses.push(sum / n);
    }
  } finally {
    opt.dispose();
    frozen?.dispose();
  }
  return { epochLosses, initResidual, frozen: frozen?.where ?? null };
}
