// Per-batch transforms, as torchvision's RandomCrop(32, padding=4), RandomResizedCrop(224),
// RandomHorizontalFlip() and Normalize(mean, std), but on whole uint8 batches [N, C, H, W] at once: crop and flip are one
// gather (advanced indexing) whose row and column indices encode each image's offset and
// flip, so the cost is one pass over the batch in libtorch, on whatever device it lives.
// The random draws come from our seeded Rng, not libtorch's generator (data/rng.ts says why).
import * as torch from "../torch/index.js";
import type { Rng } from "./rng.js";

/** Per-channel mean and std of pixel values in [0, 1]. */
export interface Normalization {
  mean: number[];
  std: number[];
}

/** The usual CIFAR-10 statistics (training set, per channel; the std is the true one, not the 0.2023 variant). */
export const CIFAR10_NORMALIZATION: Normalization = { mean: [0.4914, 0.4822, 0.4465], std: [0.247, 0.2435, 0.2616] };
/** Fashion-MNIST training-set statistics of the 28 px images, replicated over the 3 channels. */
export const FASHION_MNIST_NORMALIZATION: Normalization = { mean: [0.286, 0.286, 0.286], std: [0.353, 0.353, 0.353] };
export const MNIST_NORMALIZATION: Normalization = { mean: [0.1307, 0.1307, 0.1307], std: [0.3081, 0.3081, 0.3081] };
/** ImageNet statistics, for LS-ImageNet-10 and ImageNet-100. */
export const IMAGENET_NORMALIZATION: Normalization = { mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225] };

/**
 * No normalisation: the model takes [0, 1] pixels as they are, as the reference's 32 px models
 * were trained (so their checkpoints import as they are with `normalization: none`).
 */
export const NO_NORMALIZATION: Normalization = { mean: [0, 0, 0], std: [1, 1, 1] };

const PRESETS: Record<string, Normalization> = {
  cifar10: CIFAR10_NORMALIZATION,
  "fashion-mnist": FASHION_MNIST_NORMALIZATION,
  mnist: MNIST_NORMALIZATION,
  imagefolder: IMAGENET_NORMALIZATION,
  imagenet: IMAGENET_NORMALIZATION,
  none: NO_NORMALIZATION,
};

/** The names normalizationFor knows: datasets' statistics, and "none". */
export const NORMALIZATION_NAMES: readonly string[] = Object.keys(PRESETS);

/** Whether normalizationFor knows a name (a dataset name, with or without a "/..." suffix, or "none"). */
export const isNormalizationName = (name: string): boolean => Object.hasOwn(PRESETS, name.split("/")[0]);

/** The preset for a dataset name of loadDataset, or "none" (NO_NORMALIZATION). */
export function normalizationFor(dataset: string): Normalization {
  if (!isNormalizationName(dataset))
    throw new Error(`no normalisation preset for '${dataset}' (known: ${NORMALIZATION_NAMES.join(", ")})`);
  return PRESETS[dataset.split("/")[0]];
}

function channelTensor(values: number[], like: torch.Tensor): torch.Tensor {
  return torch.tensor(values, { device: like.device }).reshape(1, values.length, 1, 1);
}

/** (x / 255 - mean) / std per channel: uint8 [N, C, H, W] (or float in 0..255) to float32. */
export function normalize(x: torch.Tensor, norm: Normalization): torch.Tensor {
  return torch.tidy(() => normalizePixels(x.float().div(255), norm));
}

/** normalize for float pixels already in [0, 1] (what pixelScale batches give). */
export function normalizePixels(x: torch.Tensor, norm: Normalization): torch.Tensor {
  if (x.shape[1] !== norm.mean.length)
    throw new Error(`normalize: ${x.shape[1]} channels but ${norm.mean.length} means in the preset`);
  return torch.tidy(() => x.sub(channelTensor(norm.mean, x)).div(channelTensor(norm.std, x)));
}

/** The identity "normalisation" of C channels: batches of float pixels in [0, 1]. */
export function pixelScale(channels: number): Normalization {
  return { mean: Array(channels).fill(0), std: Array(channels).fill(1) };
}

/** Inverse of normalize, to float pixel values in [0, 1] (e.g. to save IRIs as uint8). */
export function denormalize(x: torch.Tensor, norm: Normalization): torch.Tensor {
  return torch.tidy(() => x.mul(channelTensor(norm.std, x)).add(channelTensor(norm.mean, x)));
}

/**
 * The valid input range per channel in normalised space, [(0 - mean)/std, (1 - mean)/std]:
 * what IRI generation clamps to (docs/method.md, "IRI generation"). Tensors [1, C, 1, 1] on the given device.
 */
export function validRange(
  norm: Normalization,
  device: torch.Device = torch.DEFAULT_DEVICE,
): { min: torch.Tensor; max: torch.Tensor } {
  const c = norm.mean.length;
  const lo = norm.mean.map((m, i) => -m / norm.std[i]);
  const hi = norm.mean.map((m, i) => (1 - m) / norm.std[i]);
  return {
    min: torch.tensor(lo, { device }).reshape(1, c, 1, 1),
    max: torch.tensor(hi, { device }).reshape(1, c, 1, 1),
  };
}

export interface CropFlipParams {
  /** Zero padding on each side before cropping back to H x W. */
  padding: number;
  /** Per image, the top-left corner of the crop in the padded image: [dy0, dx0, dy1, dx1, ...], each in 0..2*padding. */
  offsets: Int32Array;
  /** Per image, 1 to flip horizontally (after the crop, as torchvision's usual order). */
  flips: Uint8Array;
}

/** Crops each padded image at its offset and flips those marked: one gather over the batch. */
export function cropFlip(x: torch.Tensor, p: CropFlipParams): torch.Tensor {
  const [n, c, h, w] = x.shape;
  if (p.offsets.length !== 2 * n || p.flips.length !== n)
    throw new Error(`cropFlip: need ${2 * n} offsets and ${n} flips for a batch of ${n}`);
  const rows = new BigInt64Array(n * h);
  const cols = new BigInt64Array(n * w);
  for (let i = 0; i < n; i++) {
    const dy = p.offsets[2 * i];
    const dx = p.offsets[2 * i + 1];
    if (dy < 0 || dx < 0 || dy > 2 * p.padding || dx > 2 * p.padding)
      throw new RangeError(`cropFlip: offset (${dy}, ${dx}) of image ${i} outside 0..${2 * p.padding}`);
    for (let r = 0; r < h; r++) rows[i * h + r] = BigInt(dy + r);
    const flip = p.flips[i] !== 0;
    for (let q = 0; q < w; q++) cols[i * w + q] = BigInt(dx + (flip ? w - 1 - q : q));
  }
  return torch.tidy(() => {
    const dev = { device: x.device };
    const padded = p.padding > 0 ? x.pad([p.padding, p.padding, p.padding, p.padding]) : x;
    const ni = torch.arange(0, n, 1, dev).reshape(n, 1, 1, 1);
    const ci = torch.arange(0, c, 1, dev).reshape(1, c, 1, 1);
    const ri = torch.tensor(rows, { shape: [n, 1, h, 1], ...dev });
    const qi = torch.tensor(cols, { shape: [n, 1, 1, w], ...dev });
    return padded.index([ni, ci, ri, qi]);
  });
}

/** Draws crop offsets (uniform in 0..2*padding) and flips (probability 1/2) for n images. */
export function drawCropFlip(n: number, rng: Rng, opts: { padding?: number; flip?: boolean } = {}): CropFlipParams {
  const padding = opts.padding ?? 4;
  const offsets = new Int32Array(2 * n);
  const flips = new Uint8Array(n);
  for (let i = 0; i < n; i++) {
    offsets[2 * i] = rng.int(2 * padding + 1);
    offsets[2 * i + 1] = rng.int(2 * padding + 1);
    flips[i] = (opts.flip ?? true) && rng.random() < 0.5 ? 1 : 0;
  }
  return { padding, offsets, flips };
}

/** RandomCrop(H, padding) + RandomHorizontalFlip on a uint8 batch, with draws from rng. */
export function randomCropFlip(
  x: torch.Tensor,
  rng: Rng,
  opts: { padding?: number; flip?: boolean } = {},
): torch.Tensor {
  return cropFlip(x, drawCropFlip(x.shape[0], rng, opts));
}

// ---- random resized crop (docs/method.md, "Base models": random resized crop and flip at 224 px) ----

export interface ResizedCropOptions {
  /** Range of the crop's area as a share of the image's (torchvision's default [0.08, 1]). */
  scale?: [number, number];
  /** Range of the crop's aspect ratio w / h, drawn log-uniformly (default [3/4, 4/3]). */
  ratio?: [number, number];
}

export interface ResizedCropParams {
  /** Per image the crop box in the input, [top, left, height, width, ...]. */
  boxes: Int32Array;
  /** Per image, 1 to flip horizontally after resizing. */
  flips: Uint8Array;
}

/**
 * Draws one crop box per image as torchvision's RandomResizedCrop.get_params does: up to 10
 * tries of an area share uniform in `scale` and a log-uniform aspect ratio, the first box that
 * fits wins, at a uniform position; when none fits, the central crop with the ratio clamped to
 * `ratio`. Then a flip with probability 1/2 (when `flip` is not false).
 */
export function drawResizedCrop(
  n: number,
  h: number,
  w: number,
  rng: Rng,
  opts: ResizedCropOptions & { flip?: boolean } = {},
): ResizedCropParams {
  const [smin, smax] = opts.scale ?? [0.08, 1];
  const [rmin, rmax] = opts.ratio ?? [3 / 4, 4 / 3];
  if (!(smin > 0 && smin <= smax && smax <= 1 && rmin > 0 && rmin <= rmax))
    throw new RangeError(`random resized crop: need 0 < scale[0] <= scale[1] <= 1 and 0 < ratio[0] <= ratio[1]`);
  const boxes = new Int32Array(4 * n);
  const flips = new Uint8Array(n);
  const area = h * w;
  const [lmin, lmax] = [Math.log(rmin), Math.log(rmax)];
  for (let i = 0; i < n; i++) {
    let box: [number, number, number, number] | null = null;
    for (let t = 0; t < 10 && !box; t++) {
      const target = area * (smin + (smax - smin) * rng.random());
      const aspect = Math.exp(lmin + (lmax - lmin) * rng.random());
      const cw = Math.round(Math.sqrt(target * aspect));
      const ch = Math.round(Math.sqrt(target / aspect));
      if (cw > 0 && cw <= w && ch > 0 && ch <= h) box = [rng.int(h - ch + 1), rng.int(w - cw + 1), ch, cw];
    }
    if (!box) {
      const r = w / h;
      const [ch, cw] = r < rmin ? [Math.round(w / rmin), w] : r > rmax ? [h, Math.round(h * rmax)] : [h, w];
      box = [Math.floor((h - ch) / 2), Math.floor((w - cw) / 2), ch, cw];
    }
    boxes.set(box, 4 * i);
    flips[i] = (opts.flip ?? true) && rng.random() < 0.5 ? 1 : 0;
  }
  return { boxes, flips };
}

/**
 * Crops each image to its box and resizes it back to the input's H x W (bilinear, as
 * torchvision's resized_crop on tensors; crops are never larger than the input, so this only
 * upsamples and antialiasing would change nothing), then flips those marked. uint8 in, uint8
 * out (rounded), on the input's device. One small interpolation per image: the boxes differ.
 */
export function resizedCropFlip(x: torch.Tensor, p: ResizedCropParams): torch.Tensor {
  const [n, , h, w] = x.shape;
  if (p.boxes.length !== 4 * n || p.flips.length !== n)
    throw new Error(`resizedCropFlip: need ${4 * n} box numbers and ${n} flips for a batch of ${n}`);
  return torch.tidy(() => {
    const parts: torch.Tensor[] = [];
    for (let i = 0; i < n; i++) {
      const [top, left, ch, cw] = p.boxes.subarray(4 * i, 4 * i + 4);
      if (top < 0 || left < 0 || ch < 1 || cw < 1 || top + ch > h || left + cw > w)
        throw new RangeError(`resizedCropFlip: box (${top}, ${left}, ${ch}, ${cw}) of image ${i} outside ${h}x${w}`);
      const crop = x.narrow(0, i, 1).narrow(2, top, ch).narrow(3, left, cw).float();
      parts.push(ch === h && cw === w ? crop : torch.interpolateBilinear(crop, [h, w]));
    }
    const resized = torch.cat(parts).round().clamp(0, 255).to(x.dtype);
    // The flips as a crop with no padding and no offset: one gather.
    return cropFlip(resized, { padding: 0, offsets: new Int32Array(2 * n), flips: p.flips });
  });
}

/** RandomResizedCrop(H) + RandomHorizontalFlip on a uint8 batch, with draws from rng. */
export function randomResizedCropFlip(
  x: torch.Tensor,
  rng: Rng,
  opts: ResizedCropOptions & { flip?: boolean } = {},
): torch.Tensor {
  const [n, , h, w] = x.shape;
  return resizedCropFlip(x, drawResizedCrop(n, h, w, rng, opts));
}

/** Training augmentation of a batch: a padded random crop (default), or a random resized crop; and flips. */
export interface AugmentOptions {
  /** Zero padding of the random crop (default 4); not used with `resizedCrop`. */
  padding?: number;
  /** Random resized crop instead of the padded crop (true: torchvision's default scale and ratio). */
  resizedCrop?: ResizedCropOptions | boolean;
  /** Horizontal flip with probability 1/2 (default true). */
  flip?: boolean;
}

/** Applies `augment` to a uint8 batch with draws from rng (the output keeps the input's size). */
export function augmentBatch(x: torch.Tensor, rng: Rng, augment: AugmentOptions): torch.Tensor {
  if (augment.resizedCrop) {
    const rc = augment.resizedCrop === true ? {} : augment.resizedCrop;
    return randomResizedCropFlip(x, rng, { ...rc, flip: augment.flip });
  }
  return randomCropFlip(x, rng, augment);
}

/**
 * The method's training augmentation (docs/method.md, "Base models") for images of this side:
 * random crop with 4 px padding and flip at 32 px (CIFAR-10, LS-ImageNet-10, the IDX sets), random
 * resized crop and flip at 224 px (ImageNet-100). The line is drawn at 64 px: larger images get the resized crop.
 */
export function standardAugment(imageSize: number): AugmentOptions {
  return imageSize > 64 ? { resizedCrop: true, flip: true } : { padding: 4, flip: true };
}
