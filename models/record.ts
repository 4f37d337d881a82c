// A model's facts in one typed record, as timm's PretrainedCfg keeps them: the architecture, the
// side and statistics of its inputs, its classes, its stem and its recipe's learning rate. Built
// once per loaded model source (loadCheckpoint) from the weights, the sidecar and the zoo's
// ArchRecord; the jobs read it instead of guessing (issue 24).
import { type Normalization, normalizationFor } from "../data/transforms.js";
import type { CheckpointMeta } from "./checkpoint.js";
import { ONNX_ARCH } from "./onnx/model.js";
import { archRecord } from "./registry.js";
import type { StitchableModel } from "./stitchable.js";

export interface ModelRecord {
  arch: string;
  /** The side of the images the model was built (trained) for. */
  imageSize: number;
  /**
   * The statistics its inputs are normalised with: recorded with the model, or those of the dataset
   * it was trained on; null when neither is known (requireNormalization says what to give).
   */
  normalization: Normalization | null;
  numClasses: number;
  /** ResNets: "cifar" or "imagenet"; null for other architectures. */
  stem: string | null;
  /** The dataset it was trained on, when recorded. */
  dataset: string | null;
  /** The base learning rate of the base-training recipe for its architecture (docs/method.md, "Base models"). */
  defaultLr: number;
}

/** The record of a built model and what its checkpoint says. */
export function modelRecord(model: StitchableModel, meta: CheckpointMeta): ModelRecord {
  const recorded = meta.normalization as Normalization | undefined;
  const config = model.config as { imageSize: number; numClasses: number; stem?: string };
  return {
    arch: meta.arch,
    imageSize: config.imageSize,
    normalization:
      recorded && Array.isArray(recorded.mean) && Array.isArray(recorded.std)
        ? recorded
        : meta.dataset
          ? normalizationFor(meta.dataset)
          : null,
    numClasses: config.numClasses,
    stem: config.stem ?? null,
    dataset: meta.dataset ?? null,
    // An ONNX graph is never trained by stitchlab (only T is): no recipe of its own.
    defaultLr: meta.arch === ONNX_ARCH ? Number.NaN : archRecord(meta.arch).defaultLr,
  };
}

/**
 * The statistics a model's inputs are normalised with: the ones it was trained with. A front from
 * LS-ImageNet-10 and a back from CIFAR-10 each get their own (docs/method.md, "Training defaults",
 * its last sentence).
 */
export function requireNormalization(r: ModelRecord, what: string): Normalization {
  if (r.normalization) return r.normalization;
  throw new Error(
    `${what} checkpoint records neither its input normalisation nor the dataset it was trained on: give its normalization (a dataset name such as cifar10 or imagenet, or {mean, std})`,
  );
}
