// Pixel shortcut markers (docs/method.md, "Datasets and shortcut markers"): a solid square of 4x4 cells,
// cell size min(H, W) // 32 (1 px at 32 px, 7 px at 224 px), so a square of side 4 * cell, in
// one colour per class. Variants:
//   pixel      class colour, random location per image (seeded)
//   pixel-loc  class colour at a fixed class-specific location
//   rand       a random colour per image, random location: the control (no class information)
// The rolled test set for excess agreement gives class c the WHOLE marker of class c - 1 (mod K):
// its colour and, for pixel-loc, its location; pixel keeps its seeded random locations and takes
// the previous class's colour. The direction follows the reference's Backdoor(shuffle=True)
// (athaioan/invariance-aware-stitching, dataloaders/shortcut_markers.py), which indexes the
// class markers and class locations with roll(arange(K), shifts=1) = [K-1, 0, ..., K-2].
//
// Markers are painted after augmentation (docs/method.md), so they are never cut or mirrored: the
// reference paints them after its crop/flip transform (dataloaders/cifar.py, imagenet.py,
// `joint_transform` after `transform`). Here a MarkerPlan fixes each dataset image's location
// and colour once (seeded), and data/loader.ts's `batches({markers})` paints the plan onto each
// batch after the crop and flip, before normalisation (paintBatchMarkers). applyShortcut paints a
// whole dataset at once: right for sets that are not augmented (test sets, IRI sources).
//
// Class colours: farthest-point sampling on the RGB grid {0, 51, 102, 153, 204, 255}^3 (216
// colours, enough for ImageNet-100), then permuted across classes with a fixed seed. Black counts
// as already taken and is never a class colour: zero padding (IDX padding, crop padding) and
// Fashion-MNIST's background are black, and a black marker there would be invisible. So the
// first colour is white, the farthest from black; ties go to the lowest grid index (r, then g,
// then b ascending), which makes the sequence deterministic.
import * as torch from "../torch/index.js";
import type { Dataset } from "./dataset.js";
import { Rng } from "./rng.js";

export type ShortcutKind = "pixel" | "pixel-loc" | "rand";
export const SHORTCUT_KINDS: readonly ShortcutKind[] = ["pixel", "pixel-loc", "rand"];

export const GRID_LEVELS = [0, 51, 102, 153, 204, 255];
/** The fixed seed of the permutation of colours over classes. */
export const COLOR_PERMUTATION_SEED = 0;

export type RGB = [number, number, number];

/** The first k colours of farthest-point sampling on the grid (black pre-occupied), in pick order. */
export function farthestPointColors(k: number): RGB[] {
  const grid: RGB[] = [];
  for (const r of GRID_LEVELS) for (const g of GRID_LEVELS) for (const b of GRID_LEVELS) grid.push([r, g, b]);
  if (!(Number.isInteger(k) && k >= 1 && k < grid.length))
    throw new RangeError(`marker colours: need 1..${grid.length - 1} classes, got ${k}`);
  // minD2[j]: squared distance from grid point j to the nearest taken colour (black to start).
  const minD2 = grid.map(([r, g, b]) => r * r + g * g + b * b);
  const picked: RGB[] = [];
  for (let n = 0; n < k; n++) {
    let best = -1;
    for (let j = 0; j < grid.length; j++) if (best < 0 || minD2[j] > minD2[best]) best = j;
    const c = grid[best];
    picked.push(c);
    for (let j = 0; j < grid.length; j++) {
      const d2 = (grid[j][0] - c[0]) ** 2 + (grid[j][1] - c[1]) ** 2 + (grid[j][2] - c[2]) ** 2;
      if (d2 < minD2[j]) minD2[j] = d2;
    }
  }
  return picked;
}

/** The colour of each class 0..k-1: the farthest-point colours permuted with a fixed seed. */
export function markerColors(k: number, seed = COLOR_PERMUTATION_SEED): RGB[] {
  const fps = farthestPointColors(k);
  const perm = new Rng(seed, 0xc0102).permutation(k);
  return Array.from(perm, (j) => fps[j]);
}

/**
 * Cell size min(H, W) // 32, at least 1 so that images under 32 px still get a marker, times
 * `scale`: the marker's strength (1, the protocol's; 2 doubles its side, 4x its area). Narrow
 * models trained briefly lean on a 4 px marker by chance, from seed to seed; a larger one makes
 * every one of them rely on it (docs/experiments.md, the demo).
 */
export function markerCell(h: number, w: number, scale = 1): number {
  if (!(Number.isInteger(scale) && scale >= 1))
    throw new RangeError(`marker scale must be a positive integer, got ${scale}`);
  return scale * Math.max(1, Math.floor(Math.min(h, w) / 32));
}

/** Side of the marker square: 4 cells. */
export function markerSide(h: number, w: number, scale = 1): number {
  return 4 * markerCell(h, w, scale);
}

/**
 * Pixel+Loc's fixed location of class k: the classes fill a grid of ceil(sqrt(K)) columns and
 * as many rows as needed, spread evenly from one border to the other, so markers of different
 * classes never overlap at 32 px with 10 classes (top-left corners 0, 9, 19, 28 across and
 * 0, 14, 28 down). Returns the top-left corner [y, x].
 */
export function classLocation(k: number, numClasses: number, h: number, w: number, scale = 1): [number, number] {
  const side = markerSide(h, w, scale);
  const cols = Math.ceil(Math.sqrt(numClasses));
  const rows = Math.ceil(numClasses / cols);
  const at = (i: number, n: number, span: number) => (n > 1 ? Math.round((i * span) / (n - 1)) : 0);
  return [at(Math.floor(k / cols), rows, h - side), at(k % cols, cols, w - side)];
}

export interface ShortcutOptions {
  kind: ShortcutKind;
  /** Seed of the random locations (pixel, rand) and colours (rand); default 0. */
  seed?: number;
  /** Give class c the marker of class c - 1 mod K: colour, and location for pixel-loc (the rolled test set); not for rand. */
  rolled?: boolean;
  /** Seed of the colour permutation over classes; default COLOR_PERMUTATION_SEED. */
  colorSeed?: number;
  /** The marker's strength: its cell size times this (default 1, the protocol's size; markerCell). */
  scale?: number;
  /**
   * The read of the data these markers are for (a training epoch): each read draws places (and
   * rand colours) anew from (seed, draw). Absent: one fixed draw (test sets, IRI sources).
   */
  draw?: number;
  /**
   * The fraction of images whose marker is their own class's (default 1, the protocol's Pixel
   * shortcut). The rest carry the marker of a class drawn uniformly from all K on every read, so
   * it agrees with the label by chance only (1/K), never against it: at 0 the marker carries no
   * information about the label. Which images agree is fixed by the seed alone, as "a fraction p
   * of the training images" says (issue 40's grounding study grades a front's reliance by it).
   * Pixel and pixel-loc only; a training-set setting (test sets are marked in full or rolled).
   */
  agreement?: number;
}

/** Where each image's marker goes and its colour. */
export interface MarkerPlan {
  /** Size of the images the plan is for (a batch must match it). */
  height: number;
  width: number;
  side: number;
  /** Top-left corners per image. */
  ys: Int32Array;
  xs: Int32Array;
  /** RGB per image, [N * 3]. */
  colors: Uint8Array;
}

/** Plans the markers of images with these labels (numbers 0..K-1) and size H x W. */
export function planMarkers(
  labels: ArrayLike<number>,
  numClasses: number,
  h: number,
  w: number,
  opts: ShortcutOptions,
): MarkerPlan {
  if (!SHORTCUT_KINDS.includes(opts.kind))
    throw new Error(`unknown shortcut '${opts.kind}' (known: ${SHORTCUT_KINDS.join(", ")})`);
  if (opts.rolled && opts.kind === "rand")
    throw new Error("a rolled set shifts class colours (pixel, pixel-loc); rand markers have none to roll");
  const n = labels.length;
  const side = markerSide(h, w, opts.scale);
  if (side > h || side > w) throw new RangeError(`a ${side}px marker does not fit in ${h}x${w} images`);
  const agreement = opts.agreement ?? 1;
  if (!(agreement >= 0 && agreement <= 1)) throw new RangeError(`marker agreement ${agreement} is not in [0, 1]`);
  if (agreement < 1 && (opts.kind === "rand" || opts.rolled))
    throw new Error("a marker agreement below 1 is for pixel and pixel-loc training markers, not rand or rolled ones");
  const seed = opts.seed ?? 0;
  // Separate streams: locations are the same for pixel and rand with the same seed, so the
  // control differs from the shortcut in colour only.
  const reads = opts.draw === undefined ? [] : [opts.draw];
  const locRng = new Rng(seed, 0x10c, ...reads);
  const colRng = new Rng(seed, 0xc01, ...reads);
  const classColors = markerColors(numClasses, opts.colorSeed);
  // Agreement's streams are drawn only below 1, so the protocol's markers stay as they were.
  const agreeRng = agreement < 1 ? new Rng(seed, 0xa9e) : null;
  const otherRng = agreement < 1 ? new Rng(seed, 0xc1a, ...reads) : null;
  const ys = new Int32Array(n);
  const xs = new Int32Array(n);
  const colors = new Uint8Array(3 * n);
  for (let i = 0; i < n; i++) {
    const label = labels[i];
    if (!(Number.isInteger(label) && label >= 0 && label < numClasses))
      throw new RangeError(`marker plan: label ${label} of image ${i} is outside 0..${numClasses - 1}`);
    // The class whose marker this image carries: its own, or the previous one when rolled.
    // Below full agreement, an image outside the agreeing fraction carries a class drawn at random.
    const own = agreeRng && otherRng && agreeRng.random() >= agreement ? otherRng.int(numClasses) : label;
    const k = opts.rolled ? (label + numClasses - 1) % numClasses : own;
    if (opts.kind === "pixel-loc") [ys[i], xs[i]] = classLocation(k, numClasses, h, w, opts.scale);
    else {
      ys[i] = locRng.int(h - side + 1);
      xs[i] = locRng.int(w - side + 1);
    }
    const c: RGB = opts.kind === "rand" ? [colRng.int(256), colRng.int(256), colRng.int(256)] : classColors[k];
    colors.set(c, 3 * i);
  }
  return { height: h, width: w, side, ys, xs, colors };
}

/** The marker plan of a whole dataset (labels, class count and image size read from it). */
export function planDatasetMarkers(ds: Dataset, opts: ShortcutOptions): MarkerPlan {
  const [, , h, w] = ds.images.shape;
  const labels = Array.from(ds.labels.toTypedArray() as BigInt64Array, Number);
  return planMarkers(labels, ds.classes.length, h, w, opts);
}

/**
 * Markers drawn anew on every read of a training set, as the reference's loader draws a Pixel
 * marker's place on every read (dataloaders/shortcut_markers.py): epoch e's plan is drawn from
 * (seed, e), so runs stay reproducible. The colour stays the class's.
 */
export type MarkerDraws = (epoch: number) => MarkerPlan;

export function markerDraws(ds: Dataset, opts: ShortcutOptions): MarkerDraws {
  const [, , h, w] = ds.images.shape;
  const labels = Array.from(ds.labels.toTypedArray() as BigInt64Array, Number);
  return (epoch) => planMarkers(labels, ds.classes.length, h, w, { ...opts, draw: epoch });
}

/**
 * Paints the plan's markers onto a uint8 batch [B, 3, H, W] whose images are the dataset images
 * at `indices` (the positions the plan was made for, e.g. a Batch's `indices`): a new tensor on
 * the batch's device, one torch.where over the batch. Call it after augmentation and before
 * normalisation, so the marker is whole and unmirrored in every image.
 */
export function paintBatchMarkers(x: torch.Tensor, plan: MarkerPlan, indices: ArrayLike<number>): torch.Tensor {
  const [b, c, h, w] = x.shape;
  if (c !== 3) throw new Error(`markers need 3-channel images, got ${c} (load IDX data with rgb)`);
  if (x.dtype !== "uint8")
    throw new Error(`markers are painted on uint8 batches (before normalisation), got ${x.dtype}`);
  if (h !== plan.height || w !== plan.width)
    throw new Error(`marker plan made for ${plan.height}x${plan.width} images, batch images are ${h}x${w}`);
  if (indices.length !== b) throw new Error(`paintBatchMarkers: ${indices.length} indices for a batch of ${b}`);
  const ys = new BigInt64Array(b);
  const xs = new BigInt64Array(b);
  const colors = new Uint8Array(3 * b);
  for (let i = 0; i < b; i++) {
    const j = indices[i];
    if (!(Number.isInteger(j) && j >= 0 && j < plan.ys.length))
      throw new RangeError(`paintBatchMarkers: index ${j} outside the plan's 0..${plan.ys.length - 1}`);
    ys[i] = BigInt(plan.ys[j]);
    xs[i] = BigInt(plan.xs[j]);
    colors.set(plan.colors.subarray(3 * j, 3 * j + 3), 3 * i);
  }
  return torch.tidy(() => {
    const dev = { device: x.device };
    const y0 = torch.tensor(ys, { shape: [b, 1, 1, 1], ...dev });
    const x0 = torch.tensor(xs, { shape: [b, 1, 1, 1], ...dev });
    const rows = torch.arange(0, h, 1, dev).reshape(1, 1, h, 1);
    const cols = torch.arange(0, w, 1, dev).reshape(1, 1, 1, w);
    const inRows = rows.ge(y0).logicalAnd(rows.lt(y0.add(plan.side)));
    const inCols = cols.ge(x0).logicalAnd(cols.lt(x0.add(plan.side)));
    const fill = torch.tensor(colors, { shape: [b, 3, 1, 1], ...dev });
    return torch.where(inRows.logicalAnd(inCols), fill, x);
  });
}

/** A new dataset with the planned markers painted in (the input is not changed). */
export function paintMarkers(ds: Dataset, plan: MarkerPlan, name: string): Dataset {
  const [n, c] = ds.images.shape;
  if (c !== 3) throw new Error(`${ds.name}: markers need 3-channel images, got ${c} (load IDX data with rgb)`);
  if (plan.ys.length !== n) throw new Error(`${ds.name}: marker plan for ${plan.ys.length} images, dataset has ${n}`);
  // In chunks, so the temporary masks stay small next to the dataset.
  const chunk = 4096;
  const images = torch.tidy(() => {
    const parts: torch.Tensor[] = [];
    for (let s = 0; s < n; s += chunk) {
      const len = Math.min(chunk, n - s);
      const idx = Int32Array.from({ length: len }, (_, i) => s + i);
      parts.push(paintBatchMarkers(ds.images.narrow(0, s, len), plan, idx));
    }
    return parts.length === 1 ? parts[0] : torch.cat(parts);
  });
  return { images, labels: ds.labels.clone(), classes: ds.classes, name };
}

/** The dataset with shortcut markers (a new dataset; the caller owns its tensors). */
export function applyShortcut(ds: Dataset, opts: ShortcutOptions): Dataset {
  const plan = planDatasetMarkers(ds, opts);
  return paintMarkers(ds, plan, `${ds.name}+${opts.kind}${opts.rolled ? "-rolled" : ""}`);
}
