// Base-model training as PROTOCOL.md sets it: SGD with Nesterov momentum, weight decay, lr x0.1
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
  standardAugment,
} from "../data/index.js";
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
    const test = await load("test", cfg.testLimit);
    own({ dispose: () => disposeDataset(test) });
    // The shortcut: each training image's marker takes its class's colour and a place drawn anew
    // every epoch, as the reference's loader draws one on every read
    // (dataloaders/shortcut_markers.py), seeded by (seed, epoch); it is painted onto the batch
    // after the crop and flip, so it is never cut or mirrored (PROTOCOL.md).
    const markers = cfg.shortcut
      ? markerDraws(trainSet, { kind: cfg.shortcut, seed: cfg.seed, scale: cfg.markerScale })
      : null;

    torch.manualSeed(cfg.seed);
    // The model is built for the images it is trained on (its recorded imageSize is checked
    // against the data wherever it is used later).
    const model = own(
      createModel(cfg.model, {
        numClasses: trainSet.classes.length,
        imageSize: trainSet.images.shape[2],
        ...cfg.modelOptions,
      }),
    );
    checkInputSize(model, trainSet.images.shape, "the");
    // Grey data replicated to 3 channels: the stem starts colour-blind (nn/init.ts greyStem).
    if (cfg.greyStem) greyStem(model);
    model.to(cfg.device);
    model.train();
    if (cfg.simclr) {
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
      // The second phase trains the classifier alone; the backbone's weights stay as pre-trained
      // (in train mode, so its batch-norm statistics follow the supervised batches, as the reference's).
      const classifier = new Set(model.head.parameters());
      for (const p of model.parameters()) if (!classifier.has(p)) p.requiresGrad_(false);
    }
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
    const adversarial = cfg.adversarial;
    const start = performance.now();
    const metrics: string[] = [];
    let seen = 0;
    for (let epoch = 0; epoch < cfg.epochs; epoch++) {
      let lossSum = 0;
      let correct = 0;
      let count = 0;
      let step = 0;
      const epochLr = opt.lr;
      for (const b of batches(trainSet, {
        batchSize: cfg.batchSize,
        shuffle: true,
        dropLast: true,
        seed: cfg.seed,
        epoch,
        // Crop (pad 4) and flip at 32 px, random resized crop and flip at 224 (PROTOCOL.md).
        augment: standardAugment(trainSet.images.shape[2]),
        markers,
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
            lossSum += value * b.indices.length;
            correct += torch.noGrad(() => logits.argmax(1).eq(b.y).sum().item());
          });
        } finally {
          torch.dispose(b);
        }
        count += b.indices.length;
        seen += b.indices.length;
        step++;
        const elapsed = (performance.now() - start) / 1000;
        const total = steps * cfg.epochs;
        const done = epoch * steps + step;
        onProgress({
          epoch: epoch + 1,
          epochs: cfg.epochs,
          step,
          steps,
          loss: lossSum / count,
          accuracy: correct / count,
          imagesPerSecond: seen / elapsed,
          etaSeconds: (elapsed / done) * (total - done),
          lr: opt.lr,
        });
      }
      sched.step();
      const test1 = evaluate(model, test, { normalization: norm, device: cfg.device });
      metrics.push(
        JSON.stringify({
          epoch: epoch + 1,
          lr: epochLr,
          train_loss: lossSum / count,
          train_accuracy: correct / count,
          test_accuracy: test1.accuracy,
          test_loss: test1.loss,
        }),
      );
      writeFileAtomic(join(outDir, "metrics.jsonl"), [`${metrics.join("\n")}\n`]);
    }
    opt.dispose();
    disposeDataset(trainSet);

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
    // As resolved (train/config.ts resolveTrainRobustEval): the adversarial models' own radius and
    // AutoAttack's budget unless other settings are named. APGD starts at a random point
    // (AutoAttack); PGD as in training.
    let robustEval: RobustEvalRecord | undefined;
    if (cfg.robustEval) {
      const r = robustEvaluation(model, test, {
        ...cfg.robustEval,
        ...(cfg.robustEval.attack === "pgd" ? { randomStart: cfg.adversarial?.randomStart ?? false } : {}),
        normalization: norm,
        device: cfg.device,
      });
      Object.assign(accuracies, r.accuracies);
      robustEval = r.record;
    }
    disposeDataset(test);

    const checkpoint = join(outDir, "model.safetensors");
    saveCheckpoint(checkpoint, model, {
      dataset: cfg.dataset,
      shortcut: cfg.shortcut,
      ...(cfg.shortcut ? { markerScale: cfg.markerScale } : {}),
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
    model.dispose();
    return {
      checkpoint,
      accuracies,
      ...(robustEval ? { robustEval } : {}),
      seconds: (performance.now() - start) / 1000,
    };
  } finally {
    for (const o of owned.reverse()) o.dispose();
  }
}
