// The in-memory dataset every reader returns: uint8 images, channels first (as torchvision's
// tensors), int64 labels, and the class names in label order. Keeping uint8 costs a quarter of
// float32's memory and lets markers and augmentation work on exact pixel values; batches become
// float32 only when they are drawn (data/loader.ts).
import * as torch from "../torch/index.js";
import { Rng } from "./rng.js";

export interface Dataset {
  /** uint8 [N, C, H, W], values 0..255. */
  images: torch.Tensor;
  /** int64 [N], values in 0..classes.length-1. */
  labels: torch.Tensor;
  /** Class names in label order. */
  classes: string[];
  /** What this is, e.g. "cifar10/test" or "cifar10/test+pixel-loc". */
  name: string;
}

export type Split = "train" | "test";

export function checkSplit(split: string): Split {
  if (split !== "train" && split !== "test") throw new Error(`unknown split '${split}': expected 'train' or 'test'`);
  return split;
}

/** Number of images. */
export function datasetSize(ds: Dataset): number {
  return ds.labels.shape[0];
}

/** The images at the given indices (a new dataset; the caller owns its tensors). */
export function subset(ds: Dataset, indices: ArrayLike<number>, name = ds.name): Dataset {
  return torch.tidy(() => {
    const idx = torch.tensor(BigInt64Array.from(Array.from(indices, BigInt)));
    return {
      images: ds.images.indexSelect(0, idx),
      labels: ds.labels.indexSelect(0, idx),
      classes: ds.classes,
      name,
    };
  });
}

/**
 * Shuffles the labels across the images once, by a seeded permutation (in place: the old label
 * tensor is freed): each image keeps one wrong-for-the-task label for every epoch, so the task is
 * learnable only by memorising (Zhang et al. 2017's random labels) and shares nothing with the
 * true one but the images and the class frequencies. The another-task null front (issue 40).
 */
export function permuteLabels(ds: Dataset, seed: number): void {
  const perm = new Rng(seed, 0x1abe1).permutation(datasetSize(ds));
  const old = ds.labels;
  ds.labels = torch.keep(torch.tidy(() => old.indexSelect(0, torch.tensor(BigInt64Array.from(perm, BigInt)))));
  old.dispose();
  ds.name = `${ds.name}+permuted-labels`;
}

/**
 * Splits off n images chosen by a seeded permutation as a held-out validation set; the rest
 * is the training set. Both keep the original order among themselves, so the same seed gives
 * the same split whatever else the process did. The caller owns the four new tensors.
 */
export function holdOut(ds: Dataset, n: number, seed: number): { train: Dataset; val: Dataset } {
  const total = datasetSize(ds);
  if (!(Number.isInteger(n) && n > 0 && n < total))
    throw new RangeError(`holdOut: n must be an integer in 1..${total - 1} for ${ds.name}, got ${n}`);
  const perm = new Rng(seed, 0x401d).permutation(total);
  const val = Array.from(perm.subarray(0, n)).sort((a, b) => a - b);
  const inVal = new Uint8Array(total);
  for (const i of val) inVal[i] = 1;
  const train: number[] = [];
  for (let i = 0; i < total; i++) if (!inVal[i]) train.push(i);
  return { train: subset(ds, train, `${ds.name}[train]`), val: subset(ds, val, `${ds.name}[val]`) };
}

/** Frees a dataset's tensors now. */
export function disposeDataset(ds: Dataset): void {
  ds.images.dispose();
  ds.labels.dispose();
}

/** Builds a dataset from raw uint8 CHW pixel bytes and label bytes, checking the shapes agree. */
export function fromBytes(
  pixels: Uint8Array,
  labels: Uint8Array | BigInt64Array,
  shape: [number, number, number, number],
  classes: string[],
  name: string,
): Dataset {
  const [n, c, h, w] = shape;
  if (pixels.length !== n * c * h * w) throw new Error(`${name}: ${pixels.length} pixel bytes for shape [${shape}]`);
  if (labels.length !== n) throw new Error(`${name}: ${labels.length} labels for ${n} images`);
  const l64 = labels instanceof BigInt64Array ? labels : BigInt64Array.from(labels, (v) => BigInt(v));
  for (let i = 0; i < n; i++) {
    const v = Number(l64[i]);
    if (v < 0 || v >= classes.length)
      throw new Error(`${name}: label ${v} of image ${i} is outside 0..${classes.length - 1}`);
  }
  return {
    images: torch.fromBytes(pixels, "uint8", shape),
    labels: torch.tensor(l64),
    classes,
    name,
  };
}

/**
 * The side image folders are resized to unless told otherwise: 32 px, as LS-ImageNet-10 (ImageNet-100
 * asks for 224). CIFAR-10 and the padded MNISTs are 32 px by nature. The one place it is written.
 */
export const DEFAULT_IMAGE_SIZE = 32;
