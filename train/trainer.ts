// Base-model training as PROTOCOL.md sets it: SGD with Nesterov momentum, weight decay, a step
// schedule, random crop (pad 4) and horizontal flip; optionally a pixel shortcut in the training
// images and Madry adversarial training on a fraction of each batch. Writes a checkpoint
// (safetensors + JSON sidecar), the resolved config and per-epoch metrics into the run folder.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import {
  applyShortcut,
  batches,
  disposeDataset,
  loadDataset,
  normalizationFor,
  numBatches,
  type ShortcutKind,
} from "../data/index.js";
import { createModel, type ModelOptions } from "../models/registry.js";
import { saveCheckpoint } from "../nn/checkpoint.js";
import { SGD } from "../nn/optim.js";
import { MultiStepLR } from "../nn/schedule.js";
import * as torch from "../torch/index.js";
import { evaluate } from "./evaluate.js";
import { pgdAttack, robustAccuracy } from "./pgd.js";

export interface AdversarialConfig {
  /** L-inf radius in pixel units (PROTOCOL: 8/255 on CIFAR). */
  eps: number;
  step: number;
  steps: number;
  /** Share of each batch replaced by adversarial examples (PROTOCOL: one half). */
  fraction: number;
}

export interface TrainConfig {
  model: string;
  modelOptions: ModelOptions;
  dataset: string;
  root?: string;
  /** Use only the first `limit` training images (and `testLimit` test images): small runs. */
  limit?: number;
  testLimit?: number;
  shortcut: ShortcutKind | null;
  adversarial: AdversarialConfig | null;
  seed: number;
  epochs: number;
  batchSize: number;
  lr: number;
  momentum: number;
  nesterov: boolean;
  weightDecay: number;
  /** Epoch fractions at which the learning rate is multiplied by 0.1 (the step schedule). */
  milestones: number[];
  /** PGD iterations for the robust evaluation of adversarially trained models. */
  robustEvalSteps: number;
  device: string;
  /**
   * Mixed precision: "bf16" runs each step's forward pass and loss under bfloat16 autocast
   * (torch.autocast); backward, the optimiser (on float32 parameters), evaluation and the PGD
   * examples stay float32. Absent: float32 throughout (and absent from task keys, so it is never
   * set to null in TRAIN_DEFAULTS).
   */
  autocast?: torch.AutocastMode;
}

/** PROTOCOL.md's defaults for base models (epochs are the paper's; pass fewer for CPU runs). */
export const TRAIN_DEFAULTS: Omit<TrainConfig, "model" | "dataset"> = {
  modelOptions: {},
  shortcut: null,
  adversarial: null,
  seed: 0,
  epochs: 200,
  batchSize: 128,
  lr: 0.1,
  momentum: 0.9,
  nesterov: true,
  weightDecay: 1e-4,
  milestones: [0.5, 0.75],
  robustEvalSteps: 20,
  device: "cpu",
};

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
}

export interface TrainResult {
  checkpoint: string;
  accuracies: Record<string, number>;
  seconds: number;
}

export async function trainModel(
  cfg: TrainConfig,
  outDir: string,
  onProgress: (p: TrainProgress) => void = () => {},
): Promise<TrainResult> {
  mkdirSync(outDir, { recursive: true });
  torch.writeFileAtomic(join(outDir, "config.json"), [`${JSON.stringify(cfg, null, 2)}\n`]);
  const norm = normalizationFor(cfg.dataset);
  const load = (split: "train" | "test", limit?: number) =>
    loadDataset(cfg.dataset, { root: cfg.root, split, limit, pad32: true, rgb: true });
  const clean = await load("train", cfg.limit);
  const test = await load("test", cfg.testLimit);
  const trainSet = cfg.shortcut ? applyShortcut(clean, { kind: cfg.shortcut, seed: cfg.seed }) : clean;
  if (trainSet !== clean) disposeDataset(clean);

  torch.manualSeed(cfg.seed);
  const model = createModel(cfg.model, { numClasses: trainSet.classes.length, ...cfg.modelOptions });
  if (cfg.device !== "cpu") model.to(cfg.device);
  model.train();
  const opt = new SGD(model.parameters(), {
    lr: cfg.lr,
    momentum: cfg.momentum,
    nesterov: cfg.nesterov,
    weightDecay: cfg.weightDecay,
  });
  const sched = new MultiStepLR(
    opt,
    cfg.milestones.map((f) => Math.round(f * cfg.epochs)),
    0.1,
  );
  const steps = numBatches(trainSet, { batchSize: cfg.batchSize, dropLast: false });
  const start = performance.now();
  const metrics: string[] = [];
  let seen = 0;
  for (let epoch = 0; epoch < cfg.epochs; epoch++) {
    let lossSum = 0;
    let correct = 0;
    let count = 0;
    let step = 0;
    for (const b of batches(trainSet, {
      batchSize: cfg.batchSize,
      shuffle: true,
      seed: cfg.seed,
      epoch,
      augment: { padding: 4, flip: true },
      normalization: norm,
      device: cfg.device,
    })) {
      torch.tidy(() => {
        let x = b.x;
        if (cfg.adversarial) {
          // Madry training on a fraction of the batch: its first k images are replaced by PGD examples.
          const k = Math.floor(cfg.adversarial.fraction * b.indices.length);
          if (k > 0) {
            const adv = pgdAttack(model, b.x.narrow(0, 0, k), b.y.narrow(0, 0, k), {
              ...cfg.adversarial,
              normalization: norm,
            });
            x = k === b.indices.length ? adv : torch.cat([adv, b.x.narrow(0, k, b.indices.length - k)]);
          }
        }
        // PyTorch's mixed-precision recipe: forward and loss under autocast, backward outside.
        const { logits, loss } = torch.withAutocast(cfg.autocast, cfg.device, () => {
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
      count += b.indices.length;
      seen += b.indices.length;
      torch.dispose(b);
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
        train_loss: lossSum / count,
        train_accuracy: correct / count,
        test_accuracy: test1.accuracy,
        test_loss: test1.loss,
      }),
    );
    torch.writeFileAtomic(join(outDir, "metrics.jsonl"), [`${metrics.join("\n")}\n`]);
  }
  opt.dispose();
  disposeDataset(trainSet);

  const accuracies: Record<string, number> = {
    clean: evaluate(model, test, { normalization: norm, device: cfg.device }).accuracy,
  };
  if (cfg.shortcut) {
    const marked = applyShortcut(test, { kind: cfg.shortcut, seed: cfg.seed + 1 });
    accuracies.marked = evaluate(model, marked, { normalization: norm, device: cfg.device }).accuracy;
    disposeDataset(marked);
    if (cfg.shortcut !== "rand") {
      const rolled = applyShortcut(test, { kind: cfg.shortcut, seed: cfg.seed + 1, rolled: true });
      accuracies.rolled = evaluate(model, rolled, { normalization: norm, device: cfg.device }).accuracy;
      disposeDataset(rolled);
    }
  }
  const attack = cfg.adversarial ?? { eps: 8 / 255, step: 2 / 255, steps: cfg.robustEvalSteps, fraction: 1 };
  if (cfg.adversarial || cfg.robustEvalSteps > 0)
    accuracies.robust = robustAccuracy(model, test, { ...attack, steps: cfg.robustEvalSteps, normalization: norm });
  disposeDataset(test);

  const checkpoint = join(outDir, "model.safetensors");
  saveCheckpoint(checkpoint, model, {
    dataset: cfg.dataset,
    shortcut: cfg.shortcut,
    adversarial: cfg.adversarial ? { ...cfg.adversarial } : null,
    seed: cfg.seed,
    epochs: cfg.epochs,
    accuracies,
  });
  model.dispose();
  return { checkpoint, accuracies, seconds: (performance.now() - start) / 1000 };
}
