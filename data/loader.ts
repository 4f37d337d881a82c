// Seeded shuffling and batching, as torch.utils.data.DataLoader over an in-memory dataset.
//
// Ownership: every batch is made of NEW tensors that the consumer owns. Either dispose them
// after use (`torch.dispose(batch)`), or draw and use each batch inside a `torch.tidy` that
// does not return it. Intermediate tensors made while building a batch are freed here.
// The dataset itself is only read.
//
// A batch is built in this order: select the images, move them to the device, augment (crop and
// flip, uint8), paint shortcut markers (uint8, after augmentation so they are never cut or
// mirrored: docs/method.md, "Datasets and shortcut markers"), normalise to float32.
import * as torch from "../torch/index.js";
import { type Dataset, datasetSize } from "./dataset.js";
import { Rng } from "./rng.js";
import { type MarkerDraws, type MarkerPlan, paintBatchMarkers } from "./shortcuts.js";
import { type AugmentOptions, augmentBatch, type Normalization, normalize } from "./transforms.js";

export interface Batch {
  /** float32 [B, C, H, W] normalised (or uint8 when `normalization` is null). */
  x: torch.Tensor;
  /** int64 [B]. */
  y: torch.Tensor;
  /** Positions of these images in the dataset (for per-image records such as IRI residuals). */
  indices: Int32Array;
}

export interface LoaderOptions {
  batchSize: number;
  /** Shuffle each epoch with a permutation drawn from (seed, epoch); default false. */
  shuffle?: boolean;
  seed?: number;
  /** The epoch number: with the same seed, each epoch has its own order and augmentation draws. */
  epoch?: number;
  /** Drop the last incomplete batch (default false). */
  dropLast?: boolean;
  /**
   * Training augmentation, default none: random crop with zero padding and horizontal flip
   * ({padding: 4, flip: true}), or random resized crop and flip ({resizedCrop: true, flip: true});
   * standardAugment(imageSize) gives the method's choice for an image size (docs/method.md, "Base models").
   */
  augment?: AugmentOptions | null;
  /**
   * Shortcut markers to paint after augmentation and before normalisation: a plan for the whole
   * dataset (planDatasetMarkers(ds, {kind, seed})), indexed by dataset position, or draws
   * (markerDraws: each epoch its own places, as the reference's loader). Default none.
   */
  markers?: MarkerPlan | MarkerDraws | null;
  /** Normalise to float32 with these statistics; null keeps uint8 (default null). */
  normalization?: Normalization | null;
  /** Device of the batches (cpu, cuda, cuda:N); the uint8 batch is moved before conversion. */
  device?: torch.Device;
}

/** The order in which images are visited in an epoch: identity, or a seeded permutation. */
export function epochOrder(n: number, opts: { shuffle?: boolean; seed?: number; epoch?: number }): Int32Array {
  if (!opts.shuffle) return Int32Array.from({ length: n }, (_, i) => i);
  return new Rng(opts.seed ?? 0, opts.epoch ?? 0, 0x5f1e).permutation(n);
}

/** Number of batches one epoch yields. */
export function numBatches(ds: Dataset, opts: Pick<LoaderOptions, "batchSize" | "dropLast">): number {
  const n = datasetSize(ds);
  return opts.dropLast ? Math.floor(n / opts.batchSize) : Math.ceil(n / opts.batchSize);
}

/** Yields the batches of one epoch (see the ownership note at the top of this file). */
export function* batches(ds: Dataset, opts: LoaderOptions): Generator<Batch> {
  const { batchSize } = opts;
  if (!(Number.isInteger(batchSize) && batchSize > 0))
    throw new RangeError(`batchSize must be a positive integer, got ${batchSize}`);
  const n = datasetSize(ds);
  const markers = typeof opts.markers === "function" ? opts.markers(opts.epoch ?? 0) : opts.markers;
  if (markers && markers.ys.length !== n)
    throw new Error(`${ds.name}: marker plan for ${markers.ys.length} images, dataset has ${n}`);
  const order = epochOrder(n, opts);
  // A separate stream for augmentation, so turning shuffling on or off does not change the crops.
  const augRng = new Rng(opts.seed ?? 0, opts.epoch ?? 0, 0xa06);
  const count = numBatches(ds, opts);
  for (let b = 0; b < count; b++) {
    const indices = order.subarray(b * batchSize, Math.min(n, (b + 1) * batchSize));
    const batch = torch.tidy(() => {
      const idx = torch.tensor(BigInt64Array.from(indices, (i) => BigInt(i)));
      let x = ds.images.indexSelect(0, idx);
      const y = ds.labels.indexSelect(0, idx);
      if (opts.device && opts.device !== x.device) x = x.to(opts.device);
      if (opts.augment) x = augmentBatch(x, augRng, opts.augment);
      if (markers) x = paintBatchMarkers(x, markers, indices);
      if (opts.normalization) x = normalize(x, opts.normalization);
      return { x, y: opts.device ? y.to(opts.device) : y };
    });
    yield { ...batch, indices: Int32Array.from(indices) };
  }
}
