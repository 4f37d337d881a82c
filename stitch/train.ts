// Training the stitching layer (PROTOCOL.md defaults): Adam, lr 1e-3, weight decay 1e-4,
// batch 128, lr x0.1 at 1/3 and 2/3 of training; T initialised by least squares on real images.
// Standard mode trains on real images, invariance-aware mode on an IRI set: the same loop, fed
// different data (x' with the labels of x), which is exactly the mode rule of the paper.
import { batches, type Dataset, datasetSize, disposeDataset, type Normalization, subset } from "../data/index.js";
import type { StitchableModel } from "../models/stitchable.js";
import { BatchNorm2d } from "../nn/layers.js";
import { inEvalMode } from "../nn/module.js";
import { Adam } from "../nn/optim.js";
import { MultiStepLR } from "../nn/schedule.js";
import * as torch from "../torch/index.js";
import type { StitchInit } from "./layer.js";
import { type ObjectiveWeights, stitchLoss } from "./objectives.js";
import type { StitchedModel } from "./stitched.js";

/**
 * How the frozen networks' batch norm behaves while T trains. "batch": batch statistics, running
 * statistics untouched (the reference's standard runs); "eval": running statistics (its
 * invariance-aware runs). Recorded in results.
 */
export type BnMode = "batch" | "eval";

/** Freezes the model's weights and sets its batch norm as `mode` says (both modes are reversible: "eval" restores statistics updates for later training). */
export function setFrozenBnMode(model: StitchableModel, mode: BnMode): void {
  model.requiresGrad_(false);
  for (const [, m] of model.namedModules()) if (m instanceof BatchNorm2d) m.updateStats = mode === "eval";
  if (mode === "eval") model.eval();
  else model.train();
}

export interface StitchTrainOptions {
  objective: ObjectiveWeights;
  normalization: Normalization;
  epochs: number;
  batchSize?: number;
  lr?: number;
  weightDecay?: number;
  seed?: number;
  bnMode: BnMode;
  init?: StitchInit;
  /** Real training images for the least-squares initialisation (PROTOCOL: 500). */
  initImages?: number;
  /** Where the batches go (the models must already be there); default "cpu". */
  device?: string;
}

export interface StitchTrainProgress {
  epoch: number;
  epochs: number;
  step: number;
  steps: number;
  loss: number;
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
): { epochLosses: number[]; initResidual: number | null } {
  const batchSize = opts.batchSize ?? 128;
  setFrozenBnMode(s.front, opts.bnMode);
  setFrozenBnMode(s.back, opts.bnMode);
  let initResidual: number | null = null;
  const init = opts.init ?? "lstsq";
  if (init === "lstsq") {
    const k = Math.min(opts.initImages ?? 500, datasetSize(real));
    const part = subset(
      real,
      Array.from({ length: k }, (_, i) => i),
    );
    // Initialisation features are B's own, so batch norm there uses running statistics.
    inEvalMode([s.front, s.back], () => {
      for (const b of batches(part, { batchSize: k, normalization: opts.normalization, device: opts.device })) {
        initResidual = s.init("lstsq", b.x).residual ?? null;
        torch.dispose(b);
      }
    });
    disposeDataset(part);
  } else {
    s.init(init);
  }

  const params = s.layer.parameters();
  const opt = new Adam(params, { lr: opts.lr ?? 1e-3, weightDecay: opts.weightDecay ?? 1e-4 });
  const sched = new MultiStepLR(opt, [Math.round(opts.epochs / 3), Math.round((2 * opts.epochs) / 3)], 0.1);
  const epochLosses: number[] = [];
  const steps = Math.ceil(datasetSize(train) / batchSize);
  try {
    for (let epoch = 0; epoch < opts.epochs; epoch++) {
      let sum = 0;
      let n = 0;
      let step = 0;
      for (const b of batches(train, {
        batchSize,
        shuffle: true,
        seed: opts.seed ?? 0,
        epoch,
        normalization: opts.normalization,
        device: opts.device,
      })) {
        const value = torch.tidy(() => {
          const loss = stitchLoss(s, b.x, b.y, opts.objective);
          const v = loss.item();
          if (!Number.isFinite(v))
            throw new Error(`stitching diverged: loss is ${v} at epoch ${epoch + 1}, step ${step + 1}`);
          loss.backward();
          opt.step();
          opt.zeroGrad();
          return v;
        });
        sum += value * b.indices.length;
        n += b.indices.length;
        torch.dispose(b);
        step++;
        onProgress({ epoch: epoch + 1, epochs: opts.epochs, step, steps, loss: sum / n });
      }
      sched.step();
      epochLosses.push(sum / n);
    }
  } finally {
    opt.dispose();
  }
  return { epochLosses, initResidual };
}
