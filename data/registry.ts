// loadDataset(name, options): one entry point for every dataset stitchlab reads.
//
// Names and options:
//   "fashion-mnist"  IDX files; root defaults to Debian's /usr/share/datasets/fashion-mnist
//                    (apt-get install dataset-fashion-mnist). 28 px padded to 32 (or kept at 28:
//                    imageSize 28), 3 channels.
//   "mnist"          IDX files; root required (no Debian package). Same padding as above.
//   "cifar10"        official binary format; root required: cifar-10-binary.tar.gz, the
//                    cifar-10-batches-bin/ folder, or a folder holding either.
//   "imagefolder"    ImageNet layout (root/train/<wnid>/..., root/val/<wnid>/...); root required.
// Options:
//   root       where the files are (see above)
//   split      "train" or "test" (imagefolder: test reads val/, or test/ when there is no val/)
//   limit      read only the first `limit` images of the split, in file order (for quick runs)
//   pad32      IDX only: pad 28 px to 32 px with zeros (default true)
//   rgb        IDX only: replicate grey to 3 channels (default true)
//   imageSize  output side in px. imagefolder: images are resized to it (default 32, as
//              LS-ImageNet-10; ImageNet-100 needs 224); CIFAR-10 is 32 px and accepts only
//              32. IDX sets accept 32 (padded, the default) or 28 (their own size, unpadded;
//              the zero border is blank, and a model at 28 px costs about 0.78x as much a
//              step): a given imageSize decides the padding, over pad32.
//   resize     imagefolder only: shorter side before the centre crop (default 256 for 224,
//              imageSize / 0.875 above 64 px, imageSize itself at 64 px and below)
//   maxBytes   imagefolder only: refuse a split whose uint8 images need more memory than
//              this (default a quarter of the machine's memory; ImageNet-100's training
//              split at 224 px is 19 GB); the error says how many images would fit
//   size       deprecated spelling of imageSize
//   classList  imagefolder only: class-list file, one wnid per line in label order
//              (default root/classes.txt when present, else every class folder sorted)
// The caller owns the returned tensors (dispose them, or call inside torch.tidy and return them).
// It is async because image folders decode on sharp's thread pool; the CIFAR-10 and IDX
// readers (readCifar10, readIdxDataset) are synchronous and exported for direct use.
import { existsSync } from "node:fs";
import { CIFAR10_CLASSES, CIFAR10_HOW_TO_GET, readCifar10 } from "./cifar10.js";
import { checkSplit, type Dataset, DEFAULT_IMAGE_SIZE, type Split } from "./dataset.js";
import {
  FASHION_MNIST_CLASSES,
  FASHION_MNIST_HOW_TO_GET,
  FASHION_MNIST_ROOT,
  MNIST_CLASSES,
  MNIST_HOW_TO_GET,
  readIdxDataset,
} from "./idx.js";
import { imageFolderClassCount, readImageFolder } from "./imagefolder.js";

export const DATASET_NAMES = ["fashion-mnist", "mnist", "cifar10", "imagefolder"] as const;
export type DatasetName = (typeof DATASET_NAMES)[number];

export interface LoadOptions {
  root?: string;
  split: Split;
  limit?: number;
  pad32?: boolean;
  rgb?: boolean;
  /** Output side in px (imagefolder: default 32; other datasets: must equal their own size). */
  imageSize?: number;
  /** @deprecated use imageSize (the same option under its old name). */
  size?: number;
  resize?: number;
  classList?: string;
  maxBytes?: number;
}

/**
 * Whether a dataset's images are grey, replicated to 3 channels as it is read (the IDX sets): a
 * model trained on them gets no colour in its data but what markers paint (train/config.ts greyStem).
 */
export function greyDataset(name: string): boolean {
  return name === "fashion-mnist" || name === "mnist";
}

/** The side of the images loadDataset(name, opts) returns (without reading any file). */
export function datasetImageSize(name: string, opts: Pick<LoadOptions, "imageSize" | "size" | "pad32">): number {
  if (opts.imageSize !== undefined && opts.size !== undefined && opts.imageSize !== opts.size)
    throw new Error(`imageSize ${opts.imageSize} and size ${opts.size} disagree (size is the old name of imageSize)`);
  const asked = opts.imageSize ?? opts.size;
  if (asked !== undefined && !(Number.isInteger(asked) && asked > 0))
    throw new RangeError(`imageSize must be a positive integer, got ${asked}`);
  if (name === "fashion-mnist" || name === "mnist") {
    if (asked === undefined) return opts.pad32 === false ? 28 : 32;
    if (asked !== 28 && asked !== 32)
      throw new Error(`${name} images are 28 px, or 32 px padded; imageSize ${asked} applies to image folders only`);
    return asked;
  }
  const fixed = name === "cifar10" ? 32 : null;
  if (fixed === null) return asked ?? DEFAULT_IMAGE_SIZE;
  if (asked !== undefined && asked !== fixed)
    throw new Error(`${name} images are ${fixed} px; imageSize ${asked} applies to image folders only`);
  return fixed;
}

/**
 * The number of classes a dataset's labels range over, without reading its images; null where it
 * cannot be told (an image folder whose root is not there: loading it says why).
 */
export function datasetClassCount(name: string, opts: { root?: string | null; classList?: string }): number | null {
  switch (name) {
    case "fashion-mnist":
      return FASHION_MNIST_CLASSES.length;
    case "mnist":
      return MNIST_CLASSES.length;
    case "cifar10":
      return CIFAR10_CLASSES.length;
    case "imagefolder":
      return opts.root && existsSync(opts.root) ? imageFolderClassCount(opts.root, opts.classList) : null;
    default:
      return null;
  }
}

function requireRoot(name: string, root: string | undefined, howToGet: string): string {
  if (!root) throw new Error(`dataset '${name}' needs a root (--root). ${howToGet}`);
  return root;
}

export async function loadDataset(name: string, opts: LoadOptions): Promise<Dataset> {
  const split = checkSplit(opts.split);
  if (opts.limit !== undefined && !(Number.isInteger(opts.limit) && opts.limit > 0))
    throw new RangeError(`limit must be a positive integer, got ${opts.limit}`);
  const imageSize = DATASET_NAMES.includes(name as DatasetName) ? datasetImageSize(name, opts) : undefined;
  // An IDX set is padded exactly when its side is 32 (datasetImageSize: a given imageSize wins
  // over pad32, so callers that pass pad32: true still get 28 px where imageSize asks for it).
  const idx = { pad32: imageSize === 32, rgb: opts.rgb, limit: opts.limit };
  switch (name) {
    case "fashion-mnist":
      return readIdxDataset(
        opts.root ?? FASHION_MNIST_ROOT,
        split,
        { name, classes: FASHION_MNIST_CLASSES, howToGet: FASHION_MNIST_HOW_TO_GET },
        idx,
      );
    case "mnist":
      return readIdxDataset(
        requireRoot(name, opts.root, MNIST_HOW_TO_GET),
        split,
        { name, classes: MNIST_CLASSES, howToGet: MNIST_HOW_TO_GET },
        idx,
      );
    case "cifar10":
      return readCifar10(requireRoot(name, opts.root, CIFAR10_HOW_TO_GET), split, opts.limit);
    case "imagefolder":
      return readImageFolder(requireRoot(name, opts.root, "Point it at an ImageNet-layout folder"), split, {
        size: imageSize,
        resize: opts.resize,
        classList: opts.classList,
        limit: opts.limit,
        maxBytes: opts.maxBytes,
      });
    default:
      throw new Error(`unknown dataset '${name}' (known: ${DATASET_NAMES.join(", ")})`);
  }
}
