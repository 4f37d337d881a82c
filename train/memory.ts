// How much memory training a model needs, estimated before the model is built, and the refusal
// of what cannot fit (issue 25, case 13: `train --width 64` allocated for half a minute, printing
// nothing, until it was killed at 9.6 GB). The model's size is counted from its recipe
// (models/registry.ts modelSize): float32 weights, their gradients and SGD's momentum buffer
// (three copies of the parameters), the batch-norm buffers, and the activations of a batch (every
// intermediate output of the forward pass, most of which autograd keeps for the backward pass;
// twice the batch for SimCLR's two views). Measured on a CPU, the estimate comes within 0.6-1.0 of
// the resident memory training adds (test/memory.test.ts); what it leaves out is libtorch's
// working memory, tens of MB. The data are not in it (image folders check their own size:
// data/registry.ts maxBytes).
//
// Where the model trains on a GPU it is still built in this process's memory first, so there
// only the weights are checked against the machine's memory; the GPU's own memory is libtorch's
// to refuse ("CUDA out of memory").
import { freemem, totalmem } from "node:os";
import { datasetImageSize } from "../data/index.js";
import { type ModelOptions, modelSize } from "../models/registry.js";
import { isCuda } from "../torch/index.js";
import type { TrainConfig } from "./config.js";

const FLOAT = 4;

export interface TrainingMemory {
  /** Everything below, in bytes. */
  bytes: number;
  parameters: number;
  /** Weights and buffers: what building the model takes. */
  model: number;
  /** The parameters' gradients and SGD's momentum buffers. */
  training: number;
  /** One batch's forward pass (both views for SimCLR). */
  activations: number;
}

/** The memory that training `model` with `options` at `batchSize` images a step needs (estimated). */
export function trainingMemory(model: string, options: ModelOptions, batchSize: number, views = 1): TrainingMemory {
  const s = modelSize(model, options);
  const weights = FLOAT * (s.parameters + s.buffers);
  const training = 2 * FLOAT * s.parameters;
  const activations = FLOAT * batchSize * views * s.activations;
  return { bytes: weights + training + activations, parameters: s.parameters, model: weights, training, activations };
}

/** The machine's memory: in all, and free now (both within a cgroup's limit, where Node sees one). */
export function machineMemory(): { total: number; available: number } {
  const limit = process.constrainedMemory?.() ?? 0;
  const total = limit > 0 ? Math.min(limit, totalmem()) : totalmem();
  // Node's availableMemory (20.13) heeds a cgroup's limit; freemem is the kernel's MemAvailable.
  const available = (process as { availableMemory?: () => number }).availableMemory?.() ?? freemem();
  return { total, available: Math.min(available, total) };
}

const GB = (b: number) => `${(b / 2 ** 30).toFixed(b < 10 * 2 ** 30 ? 1 : 0)} GB`;
const count = (n: number) =>
  n >= 1e9 ? `${(n / 1e9).toFixed(1)} billion` : n >= 1e6 ? `${(n / 1e6).toFixed(1)} million` : `${n}`;

/** The model, its options and its data, as a base-training task has them. */
export type TrainingShape = Pick<
  TrainConfig,
  "model" | "modelOptions" | "batchSize" | "dataset" | "imageSize" | "simclr" | "device"
>;

/**
 * The training memory of a resolved config, before any data are read: the images' side is the
 * dataset's (as the trainer pads and resizes them), and the class count 1000 at most (a
 * classifier's share is small either way).
 */
export function configMemory(cfg: TrainingShape): TrainingMemory {
  const imageSize = datasetImageSize(cfg.dataset, { imageSize: cfg.imageSize ?? undefined, pad32: true });
  const numClasses = cfg.dataset === "imagefolder" ? 1000 : 10;
  return trainingMemory(cfg.model, { numClasses, imageSize, ...cfg.modelOptions }, cfg.batchSize, cfg.simclr ? 2 : 1);
}

/**
 * Why a training run cannot fit this machine's free memory (its estimate, and what there is), or
 * null; `fix` says what to lower ("--width or --batch-size").
 */
export function trainingMemoryProblem(
  cfg: TrainingShape,
  fix: string,
  machine: { total: number; available: number } = machineMemory(),
): string | null {
  const m = configMemory(cfg);
  const onGpu = isCuda(cfg.device);
  // On a GPU, this process holds the weights while it builds the model; the rest is the GPU's.
  if ((onGpu ? m.model : m.bytes) <= machine.available) return null;
  const what = onGpu
    ? `about ${GB(m.model)} to be built (${count(m.parameters)} parameters) before it moves to ${cfg.device}`
    : `about ${GB(m.bytes)} to train with batch size ${cfg.batchSize} (${count(m.parameters)} parameters: ` +
      `${GB(m.model)} of weights, ${GB(m.training)} of gradients and SGD momentum; ${GB(m.activations)} of ` +
      `activations for a batch${cfg.simclr ? " of two views" : ""})`;
  return `${cfg.model}${widthText(cfg.modelOptions)} needs ${what}; ${machineText(machine)}: lower ${fix}`;
}

const widthText = (o: ModelOptions) => (o.width !== undefined ? ` at width ${o.width}` : "");
const machineText = (m: { total: number; available: number }) =>
  `this machine has ${GB(m.available)} free of ${GB(m.total)}`;

/**
 * Refuses, before the model is built, a training run whose estimated memory exceeds what this
 * machine has free, with the estimate in the message; `where` names the model ("--model
 * resnet18") and `fix` what to lower ("--width or --batch-size").
 */
export function checkTrainingMemory(
  cfg: TrainingShape,
  where: string,
  fix: string,
  machine: { total: number; available: number } = machineMemory(),
): void {
  const problem = trainingMemoryProblem(cfg, fix, machine);
  if (problem) throw new Error(`${where}: ${problem}`);
}

/**
 * Refuses to build a model whose weights alone exceed this machine's free memory (the planner
 * builds each model once to list its stitch points); `fix` says what to lower.
 */
export function checkBuildMemory(
  model: string,
  options: ModelOptions,
  fix: string,
  machine: { total: number; available: number } = machineMemory(),
): void {
  const s = modelSize(model, options);
  const bytes = FLOAT * (s.parameters + s.buffers);
  // Built is not enough: any use holds the weights and at least as much again (gradients in
  // training; front, back and a batch-norm copy in stitching). A model whose weights take more
  // than half the free memory is refused before seconds of allocation, not at the edge of it
  // (ResNet-50 at width 16, 22 GB, was built or refused by a few hundred MB of free memory).
  if (2 * bytes > machine.available)
    throw new Error(
      `${model}${widthText(options)} needs about ${GB(bytes)} for its weights alone (${count(s.parameters)} parameters), and any use at least twice that; ${machineText(machine)}: lower ${fix}`,
    );
}
