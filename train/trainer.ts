// Base-model training as docs/method.md ("Base models") sets it: SGD with Nesterov momentum, weight decay, lr x0.1
// at 1/3 and 2/3 of training, random crop (pad 4) and horizontal flip; optionally a pixel shortcut
// in the training images and Madry adversarial training on a fraction of each batch. Writes a
// checkpoint (safetensors + JSON sidecar), the resolved config and per-epoch metrics into the run
// folder. The recipe is the reference's: train_base.py (step_scheduler at int(1/3 epochs) and
// int(2/3 epochs), training/schedulers.py) with configs/baselines/*/*/*/*.yaml (lr 0.1 for
// ResNet-18, 0.01 for VGG-16 and the ViTs; PGD 10 steps of 2/255 in 8/255, half of each batch,
// no random start).
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import {
  batches,
  datasetSize,
  disposeDataset,
  loadDataset,
  markerDraws,
  normalizationFor,
  numBatches,
  permuteLabels,
  standardAugment,
} from "../data/index.js";
import { robustEvalRandomStart } from "../eval/config.js";
import { evaluate, type RobustEvalRecord, robustEvaluation } from "../eval/evaluate.js";
import { scoreMarkedAndRolled } from "../eval/markers.js";
import { adversarialMix, pgdAttack } from "../eval/pgd.js";
import { writeFileAtomic } from "../io/files.js";
import { saveCheckpoint } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import { checkInputSize } from "../models/stitchable.js";
import { greyStem } from "../nn/init.js";
import { SGD } from "../nn/optim.js";
import { stepSchedule } from "../nn/schedule.js";
import * as torch from "../torch/index.js";
import type { TrainConfig } from "./config.js";
import { checkTrainingMemory } from "./memory.js";
import { pretrainSimclr } from "./simclr.js";

export type { AdversarialConfig } from "../eval/config.js";
export type { TrainConfig } from "./config.js";

export interface TrainProgress {
  epoch: number;
  epochs: number;
  step: number;
  steps: number;
  loss: number;
  accuracy: number;
  imagesPerSecond: number;
  etaSeconds: number;
  lr: number;
  /** "simclr" while a SimCLR model pre-trains (loss is NT-Xent, accuracy not measured), else absent. */
  phase?: "simclr";
}

export interface TrainResult {
  checkpoint: string;
  /** clean; marked and rolled with a shortcut; robust (and robust_<attack>) with a robust evaluation. */
  accuracies: Record<string, number>;
  /** The attacks and settings behind the robust accuracies (also in the checkpoint's sidecar). */
  robustEval?: RobustEvalRecord;
  seconds: number;
}

type Model = ReturnType<typeof createModel>;
type Data = Awaited<ReturnType<typeof loadDataset>>;
type Normalization = ReturnType<typeof normalizationFor>;

/** The model for the images it is trained on, seeded, on its device, in train mode. */
function buildModel(cfg: TrainConfig, trainSet: Data): Model {
  torch.manualSeed(cfg.seed);
  // Built for the images it is trained on (its recorded imageSize is checked against the data
  // wherever it is used later).
  const model = createModel(cfg.model, {
    numClasses: trainSet.classes.length,
    imageSize: trainSet.images.shape[2],
    ...cfg.modelOptions,
  });
  try {
    checkInputSize(model, trainSet.images.shape, "the");
    // Grey data replicated to 3 channels: the stem starts colour-blind (nn/init.ts greyStem).
    if (cfg.greyStem) greyStem(model);
    model.to(cfg.device);
    model.train();
    return model;
  } catch (e) {
    model.dispose();
    throw e;
  }
}

/**
 * SimCLR's first phase (train/simclr.ts), then the backbone frozen: the second phase trains the
 * classifier alone, its batch norms in train mode so their statistics follow the supervised
 * batches, as the reference's.
 */
function simclrPhase(
  model: Model,
  trainSet: Data,
  cfg: TrainConfig & { simclr: NonNullable<TrainConfig["simclr"]> },
  norm: Normalization,
  onProgress: (p: TrainProgress) => void,
): void {
  const t0 = performance.now();
  pretrainSimclr(
    model,
    trainSet,
    {
      ...cfg.simclr,
      batchSize: cfg.batchSize,
      lr: cfg.lr,
      momentum: cfg.momentum,
      nesterov: cfg.nesterov,
      weightDecay: cfg.weightDecay,
      milestones: cfg.milestones,
      lrDecay: cfg.lrDecay,
      seed: cfg.seed,
      normalization: norm,
      device: cfg.device,
    },
    (p) => {
      const elapsed = (performance.now() - t0) / 1000;
      const done = (p.epoch - 1) * p.steps + p.step;
      onProgress({
        ...p,
        accuracy: Number.NaN,
        imagesPerSecond: (done * cfg.batchSize) / elapsed,
        etaSeconds: (elapsed / done) * (p.epochs * p.steps - done),
        lr: Number.NaN,
        phase: "simclr",
      });
    },
  );
  const classifier = new Set(model.head.parameters());
  for (const p of model.parameters()) if (!classifier.has(p)) p.requiresGrad_(false);
}

/** What an epoch leaves for its metrics line, and the images seen so far (for the rate). */
interface EpochTotals {
  lossSum: number;
  correct: number;
  count: number;
}

/**
 * One epoch of SGD over the training images (crop and flip, markers painted after them, Madry's
 * PGD examples on a fraction of each batch as configured), with a progress report per step.
 * `clock` carries the run's start and images seen across epochs.
 */
function trainEpoch(
  model: Model,
  opt: SGD,
  trainSet: Data,
  cfg: TrainConfig,
  epoch: number,
  ctx: { steps: number; norm: Normalization; markers: ReturnType<typeof markerDraws> | null },
  clock: { start: number; seen: number },
  onProgress: (p: TrainProgress) => void,
): EpochTotals {
  const adversarial = cfg.adversarial;
  const { steps, norm } = ctx;
  const t: EpochTotals = { lossSum: 0, correct: 0, count: 0 };
  let step = 0;
  for (const b of batches(trainSet, {
    batchSize: cfg.batchSize,
    shuffle: true,
    dropLast: true,
    seed: cfg.seed,
    epoch,
    // Crop (pad 4) and flip at 32 px, random resized crop and flip at 224 (docs/method.md, "Base models").
    augment: standardAugment(trainSet.images.shape[2]),
    markers: ctx.markers,
    normalization: norm,
    device: cfg.device,
  })) {
    try {
      torch.tidy(() => {
        // Madry training on a fraction of the batch: its first images replaced by PGD examples.
        const x = adversarial
          ? adversarialMix(b.x, b.y, adversarial.fraction, (xs, ys) =>
              pgdAttack(model, xs, ys, { ...adversarial, normalization: norm }),
            )
          : b.x;
        // PyTorch's mixed-precision recipe: forward and loss under autocast, backward outside.
        const { logits, loss } = torch.withAutocast(cfg.autocast ?? undefined, cfg.device, () => {
          const out = model.forward(x);
          return { logits: out, loss: torch.crossEntropy(out, b.y) };
        });
        const value = loss.item();
        if (!Number.isFinite(value))
          throw new Error(
            `training diverged: loss is ${value} at epoch ${epoch + 1}, step ${step + 1} (try a smaller --lr)`,
          );
        loss.backward();
        opt.step();
        opt.zeroGrad();
        t.lossSum += value * b.indices.length;
        t.correct += torch.noGrad(() => logits.argmax(1).eq(b.y).sum().item());
      });
    } finally {
      torch.dispose(b);
    }
    t.count += b.indices.length;
    clock.seen += b.indices.length;
    step++;
    const elapsed = (performance.now() - clock.start) / 1000;
    const total = steps * cfg.epochs;
    const done = epoch * steps + step;
    onProgress({
      epoch: epoch + 1,
      epochs: cfg.epochs,
      step,
      steps,
      loss: t.lossSum / t.count,
      accuracy: t.correct / t.count,
      imagesPerSecond: clock.seen / elapsed,
      etaSeconds: (elapsed / done) * (total - done),
      lr: opt.lr,
    });
  }
  return t;
}

/**
 * The trained model's accuracies on the test set: clean; with a shortcut, on marked and rolled
 * images; with a robust evaluation, on adversarial ones (and what made them).
 */
function finalAccuracies(
  model: Model,
  test: Data,
  cfg: TrainConfig,
  norm: Normalization,
): { accuracies: Record<string, number>; robustEval?: RobustEvalRecord } {
  const accuracies: Record<string, number> = {
    clean: evaluate(model, test, { normalization: norm, device: cfg.device }).accuracy,
  };
  if (cfg.shortcut) {
    // The test markers' seed is the model's plus one; a rand shortcut has no rolled accuracy.
    const reliance = scoreMarkedAndRolled(
      test,
      { kind: cfg.shortcut, seed: cfg.seed + 1, scale: cfg.markerScale },
      (d) => evaluate(model, d, { normalization: norm, device: cfg.device }).accuracy,
    );
    accuracies.marked = reliance.marked;
    if (reliance.rolled !== null) accuracies.rolled = reliance.rolled;
  }
  if (!cfg.robustEval) return { accuracies };
  // As resolved (train/config.ts resolveTrainRobustEval): the adversarial models' own radius and
  // AutoAttack's budget unless other settings are named; the start by the attack's rule.
  const r = robustEvaluation(model, test, {
    ...cfg.robustEval,
    randomStart: robustEvalRandomStart(cfg.robustEval.attack, cfg.adversarial),
    normalization: norm,
    device: cfg.device,
  });
  Object.assign(accuracies, r.accuracies);
  return { accuracies, robustEval: r.record };
}

/** The checkpoint (safetensors and its sidecar, with what the model was trained on and scored). */
function saveTrained(
  checkpoint: string,
  model: Model,
  cfg: TrainConfig,
  { accuracies, robustEval }: ReturnType<typeof finalAccuracies>,
): void {
  saveCheckpoint(checkpoint, model, {
    dataset: cfg.dataset,
    shortcut: cfg.shortcut,
    ...(cfg.shortcut ? { markerScale: cfg.markerScale } : {}),
    ...(cfg.markerAgreement !== undefined ? { markerAgreement: cfg.markerAgreement } : {}),
    // randomStart is a boolean: CheckpointMeta types `adversarial` as numbers only.
    adversarial: cfg.adversarial ? { ...cfg.adversarial } : null,
    seed: cfg.seed,
    epochs: cfg.epochs,
    // Not in any cache key, recorded so it is seen (docs/experiments.md, "Threads").
    threads: torch.getNumThreads(),
    accuracies,
    ...(robustEval ? { robustEval } : {}),
    ...(cfg.simclr ? { method: "simclr", simclr: cfg.simclr } : {}),
  });
}

/**
 * Trains a base model and writes its run folder: config.json first, metrics.jsonl after each
 * epoch, model.safetensors and its sidecar last. Load (the splits, the markers), build
 * (buildModel, simclrPhase), train (trainEpoch per epoch), score (finalAccuracies), write
 * (saveTrained).
 */
export async function trainModel(
  cfg: TrainConfig,
  outDir: string,
  onProgress: (p: TrainProgress) => void = () => {},
): Promise<TrainResult> {
  // Before anything is read, written or built: a model too large for this machine (train/memory.ts).
  checkTrainingMemory(cfg, `training ${cfg.model}`, "the width or the batch size");
  mkdirSync(outDir, { recursive: true });
  writeFileAtomic(join(outDir, "config.json"), [`${JSON.stringify(cfg, null, 2)}\n`]);
  const norm = normalizationFor(cfg.dataset);
  const load = (split: "train" | "test", limit: number | null) =>
    loadDataset(cfg.dataset, {
      root: cfg.root ?? undefined,
      split,
      limit: limit ?? undefined,
      imageSize: cfg.imageSize ?? undefined,
      pad32: true,
      rgb: true,
    });
  // Everything made here is freed on the way out, an error's way included (disposing twice is a no-op).
  const owned: { dispose(): void }[] = [];
  const own = <T extends { dispose(): void }>(x: T): T => {
    owned.push(x);
    return x;
  };
  try {
    const trainSet = await load("train", cfg.limit);
    own({ dispose: () => disposeDataset(trainSet) });
    if (cfg.labels === "permuted") permuteLabels(trainSet, cfg.seed);
    const test = await load("test", cfg.testLimit);
    own({ dispose: () => disposeDataset(test) });
    // The shortcut: each training image's marker takes its class's colour and a place drawn anew
    // every epoch, as the reference's loader draws one on every read
    // (dataloaders/shortcut_markers.py), seeded by (seed, epoch); it is painted onto the batch
    // after the crop and flip, so it is never cut or mirrored (docs/method.md, "Datasets and shortcut markers").
    const markers = cfg.shortcut
      ? markerDraws(trainSet, {
          kind: cfg.shortcut,
          seed: cfg.seed,
          scale: cfg.markerScale,
          ...(cfg.markerAgreement !== undefined ? { agreement: cfg.markerAgreement } : {}),
        })
      : null;
    const model = own(buildModel(cfg, trainSet));
    if (cfg.simclr) simclrPhase(model, trainSet, { ...cfg, simclr: cfg.simclr }, norm, onProgress);
    const trained = cfg.simclr ? model.head.parameters() : model.parameters();
    const opt = own(
      new SGD(trained, {
        lr: cfg.lr,
        momentum: cfg.momentum,
        nesterov: cfg.nesterov,
        weightDecay: cfg.weightDecay,
      }),
    );
    const sched = stepSchedule(opt, cfg.milestones, cfg.epochs, cfg.lrDecay);
    // The last partial batch is dropped, as the reference's training loader does
    // (dataloaders/dataset.py: drop_last=True).
    const steps = numBatches(trainSet, { batchSize: cfg.batchSize, dropLast: true });
    if (steps === 0)
      throw new Error(
        `${datasetSize(trainSet)} training images make no full batch of ${cfg.batchSize}: use more images or a smaller batch size`,
      );
    const clock = { start: performance.now(), seen: 0 };
    const metrics: string[] = [];
    for (let epoch = 0; epoch < cfg.epochs; epoch++) {
      const epochLr = opt.lr;
      const t = trainEpoch(model, opt, trainSet, cfg, epoch, { steps, norm, markers }, clock, onProgress);
      sched.step();
      const test1 = evaluate(model, test, { normalization: norm, device: cfg.device });
      metrics.push(
        JSON.stringify({
          epoch: epoch + 1,
          lr: epochLr,
          train_loss: t.lossSum / t.count,
          train_accuracy: t.correct / t.count,
          test_accuracy: test1.accuracy,
          test_loss: test1.loss,
        }),
      );
      writeFileAtomic(join(outDir, "metrics.jsonl"), [`${metrics.join("\n")}\n`]);
    }
    opt.dispose();
    disposeDataset(trainSet);
    const scored = finalAccuracies(model, test, cfg, norm);
    disposeDataset(test);
    const checkpoint = join(outDir, "model.safetensors");
    saveTrained(checkpoint, model, cfg, scored);
    model.dispose();
    return {
      checkpoint,
      accuracies: scored.accuracies,
      ...(scored.robustEval ? { robustEval: scored.robustEval } : {}),
      seconds: (performance.now() - clock.start) / 1000,
    };
  } finally {
    for (const o of owned.reverse()) o.dispose();
  }
}
