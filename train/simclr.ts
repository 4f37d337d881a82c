// SimCLR pre-training, as the reference trains its cross-supervision fronts (train_base.py
// train_simclr_baseline; training/base/trainer.py train_one_epoch_simclr; training/losses.py
// infoNCE_loss; configs/baselines/*/simclr: SGD with Nesterov momentum, lr 0.1 and its step
// schedule, temperature 0.5): each image gives two views (a random resized crop of scale
// [0.2, 1] and a flip, then SimCLR's colour distortion, data/color.ts); the backbone's
// penultimate features go through a projector Linear(D, 1024)-ReLU-Linear(1024, 128) and the
// NT-Xent loss pulls the two views of an image together against every other view in the batch.
// Afterwards train/trainer.ts trains the classifier alone on the frozen backbone's features
// (the reference's second phase), which gives the model its accuracy and its logits.

import { colorDistort } from "../data/color.js";
import { batches, type Dataset, type Normalization, normalizePixels, Rng } from "../data/index.js";
import { augmentBatch } from "../data/transforms.js";
import { HEAD_POINT, type StitchableModel } from "../models/stitchable.js";
import { Linear, ReLU, Sequential } from "../nn/layers.js";
import { SGD } from "../nn/optim.js";
import { MultiStepLR } from "../nn/schedule.js";
import * as torch from "../torch/index.js";
import type { TrainConfig } from "./trainer.js";

type Tensor = torch.Tensor;

/**
 * The NT-Xent (InfoNCE) loss of 2N embeddings whose rows i and i + N are two views of one image:
 * cosine similarities over the temperature, an image's own similarity left out, cross-entropy
 * towards its other view (the reference's infoNCE_loss).
 */
export function ntXentLoss(z: Tensor, temperature: number): Tensor {
  const n2 = z.shape[0] as number;
  if (n2 % 2 !== 0 || n2 < 4) throw new Error(`NT-Xent needs two views of at least 2 images, got ${n2} rows`);
  const n = n2 / 2;
  return torch.tidy(() => {
    const x = z.div(z.norm(2, 1, true).clamp(1e-12));
    const eye = torch.eye(n2, { device: z.device }).gt(0);
    const sim = torch.where(
      eye,
      torch.full([n2, n2], Number.NEGATIVE_INFINITY, { device: z.device }),
      x.matmul(x.t()).div(temperature),
    );
    const targets = torch.tensor(
      BigInt64Array.from({ length: n2 }, (_, i) => BigInt(i < n ? i + n : i - n)),
      { device: z.device },
    );
    return torch.crossEntropy(sim, targets);
  });
}

/**
 * Pre-training's settings: the base recipe's optimiser, batch and seed (TrainConfig's fields,
 * milestones as fractions of pre-training), SimCLR's epochs and temperature, the inputs' statistics.
 */
export type SimclrOptions = Pick<
  TrainConfig,
  "batchSize" | "lr" | "momentum" | "nesterov" | "weightDecay" | "milestones" | "lrDecay" | "seed" | "device"
> & {
  /** Pre-training epochs (the reference's ss_epochs). */
  epochs: number;
  temperature: number;
  normalization: Normalization;
};

export interface SimclrProgress {
  epoch: number;
  epochs: number;
  step: number;
  steps: number;
  loss: number;
}

/**
 * Pre-trains `model`'s backbone with SimCLR on `train` (uint8 images); its classifier is left
 * as it was. Returns the mean loss per epoch.
 */
export function pretrainSimclr(
  model: StitchableModel,
  train: Dataset,
  o: SimclrOptions,
  onProgress: (p: SimclrProgress) => void = () => {},
): number[] {
  if (!(o.temperature > 0)) throw new Error(`SimCLR temperature must be positive, got ${o.temperature}`);
  // The projector reads the penultimate features: the width of the model's head point.
  const d = model.stitchPoint(HEAD_POINT).channels;
  torch.manualSeed(o.seed + 7919);
  const projector = new Sequential(new Linear(d, 1024), new ReLU(), new Linear(1024, 128));
  projector.to(o.device);
  const classifier = new Set(model.head.parameters());
  const params = [...model.parameters().filter((p) => !classifier.has(p)), ...projector.parameters()];
  const opt = new SGD(params, { lr: o.lr, momentum: o.momentum, nesterov: o.nesterov, weightDecay: o.weightDecay });
  const sched = new MultiStepLR(
    opt,
    o.milestones.map((f) => Math.floor(f * o.epochs)),
    o.lrDecay,
  );
  const steps = Math.floor((train.images.shape[0] as number) / o.batchSize);
  if (steps === 0) throw new Error(`SimCLR needs a full batch of ${o.batchSize} images; the training set has fewer`);
  const losses: number[] = [];
  model.train();
  projector.train();
  try {
    for (let epoch = 0; epoch < o.epochs; epoch++) {
      const rng = new Rng(o.seed, epoch, 0x51c1);
      let sum = 0;
      let step = 0;
      for (const b of batches(train, {
        batchSize: o.batchSize,
        shuffle: true,
        seed: o.seed,
        epoch,
        dropLast: true,
        device: o.device,
      })) {
        const value = torch.tidy(() => {
          const view = () =>
            normalizePixels(
              colorDistort(
                augmentBatch(b.x, rng, { resizedCrop: { scale: [0.2, 1] }, flip: true })
                  .float()
                  .div(255),
                rng,
              ),
              o.normalization,
            );
          const x = torch.cat([view(), view()], 0);
          const loss = ntXentLoss(projector.forward(model.embed(x)), o.temperature);
          const v = loss.item();
          if (!Number.isFinite(v))
            throw new Error(`SimCLR diverged: loss ${v} at epoch ${epoch + 1}, step ${step + 1}`);
          loss.backward();
          opt.step();
          opt.zeroGrad();
          return v;
        });
        torch.dispose(b);
        sum += value;
        step++;
        onProgress({ epoch: epoch + 1, epochs: o.epochs, step, steps, loss: sum / step });
      }
      sched.step();
      losses.push(sum / step);
    }
  } finally {
    opt.dispose();
    projector.dispose();
  }
  return losses;
}
