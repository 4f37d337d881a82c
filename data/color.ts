// SimCLR's colour distortion on float batches [N, 3, H, W] in [0, 1], per image, as the
// reference builds it (dataloaders/dataset.py, after dkobak/simclr-cifar10):
// RandomApply([ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.5), then RandomGrayscale(p=0.1). The four
// jitters follow torchvision's definitions (functional_tensor.py: brightness, contrast,
// saturation as blends, hue through HSV) and, as torchvision's ColorJitter, run in a random order
// drawn per image. Draws come from our seeded Rng (data/rng.ts).
import * as torch from "../torch/index.js";
import type { Rng } from "./rng.js";

type Tensor = torch.Tensor;

export interface ColorDistortOptions {
  /** Share of images jittered (the reference: 0.5). */
  p: number;
  brightness: number;
  contrast: number;
  saturation: number;
  hue: number;
  /** Share of images turned grey afterwards (the reference: 0.1). */
  grayscale: number;
}

export const SIMCLR_COLOR: ColorDistortOptions = {
  p: 0.5,
  brightness: 0.4,
  contrast: 0.4,
  saturation: 0.4,
  hue: 0.1,
  grayscale: 0.1,
};

/** torchvision's rgb_to_grayscale, kept at 3 channels: [N, 1, H, W] broadcast. */
function gray(x: Tensor): Tensor {
  return torch.tidy(() => {
    const [r, g, b] = [0, 1, 2].map((c) => x.narrow(1, c, 1));
    return (r as Tensor)
      .mul(0.2989)
      .add((g as Tensor).mul(0.587))
      .add((b as Tensor).mul(0.114));
  });
}

/** f * x + (1 - f) * y, clamped to [0, 1]; f per image [N, 1, 1, 1]. */
function blend(x: Tensor, y: Tensor, f: Tensor): Tensor {
  return torch.tidy(() =>
    x
      .mul(f)
      .add(y.mul(f.mul(-1).add(1)))
      .clamp(0, 1),
  );
}

/** torchvision's _rgb2hsv: h, s, v each [N, 1, H, W], h in [0, 1). */
function rgbToHsv(x: Tensor): [Tensor, Tensor, Tensor] {
  return torch.tidy(() => {
    const [r, g, b] = [0, 1, 2].map((c) => x.narrow(1, c, 1)) as [Tensor, Tensor, Tensor];
    const maxc = r.maximum(g).maximum(b);
    const minc = r.minimum(g).minimum(b);
    const eqc = maxc.eq(minc);
    const cr = maxc.sub(minc);
    const ones = torch.onesLike(maxc);
    const s = cr.div(torch.where(eqc, ones, maxc));
    const crDivisor = torch.where(eqc, ones, cr);
    const rc = maxc.sub(r).div(crDivisor);
    const gc = maxc.sub(g).div(crDivisor);
    const bc = maxc.sub(b).div(crDivisor);
    const isR = maxc.eq(r);
    const isG = maxc.eq(g).logicalAnd(isR.logicalNot());
    const isB = maxc.ne(g).logicalAnd(maxc.ne(r));
    const hr = isR.float().mul(bc.sub(gc));
    const hg = isG.float().mul(rc.sub(bc).add(2));
    const hb = isB.float().mul(gc.sub(rc).add(4));
    const h = hr.add(hg).add(hb).div(6).add(1).remainder(1);
    return [h, s, maxc];
  });
}

/** torchvision's _hsv2rgb. */
function hsvToRgb(h: Tensor, s: Tensor, v: Tensor): Tensor {
  return torch.tidy(() => {
    const h6 = h.mul(6);
    const i = h6.floor();
    const f = h6.sub(i);
    const k = i.remainder(6);
    const p = v.mul(s.mul(-1).add(1)).clamp(0, 1);
    const q = v.mul(s.mul(f).mul(-1).add(1)).clamp(0, 1);
    const t = v.mul(s.mul(f.mul(-1).add(1)).mul(-1).add(1)).clamp(0, 1);
    const pick = (vals: Tensor[]) => {
      let out = torch.zerosLike(v);
      for (let j = 0; j < 6; j++) out = torch.where(k.eq(j), vals[j] as Tensor, out);
      return out;
    };
    return torch.cat([pick([v, q, p, p, t, v]), pick([t, v, v, q, p, p]), pick([p, p, t, v, v, q])], 1);
  });
}

/** Hue shifted by hf (per image [N, 1, 1, 1], in [-0.5, 0.5] turns). */
function adjustHue(x: Tensor, hf: Tensor): Tensor {
  return torch.tidy(() => {
    const [h, s, v] = rgbToHsv(x);
    return hsvToRgb(h.add(hf).remainder(1), s, v);
  });
}

export const COLOR_JITTERS = ["brightness", "contrast", "saturation", "hue"] as const;
export type ColorJitter = (typeof COLOR_JITTERS)[number];

/**
 * One of torchvision's jitters with a factor per image ([N, 1, 1, 1]): adjust_brightness,
 * adjust_contrast, adjust_saturation (factors around 1) or adjust_hue (a shift in turns).
 */
export function colorJitter(x: Tensor, jitter: ColorJitter, f: Tensor): Tensor {
  if (jitter === "brightness") return blend(x, torch.zerosLike(x), f);
  if (jitter === "contrast") return torch.tidy(() => blend(x, gray(x).mean([1, 2, 3], true), f));
  if (jitter === "saturation") return torch.tidy(() => blend(x, gray(x), f));
  return adjustHue(x, f);
}

/** A per-image column [N, 1, 1, 1] of values on the device of `like`. */
function perImage(values: number[], like: Tensor): Tensor {
  return torch.tensor(values, { device: like.device }).reshape(values.length, 1, 1, 1);
}

/** Colour distortion of a float batch in [0, 1] (see the top of this file). */
export function colorDistort(x: Tensor, rng: Rng, o: ColorDistortOptions = SIMCLR_COLOR): Tensor {
  const n = x.shape[0] as number;
  const uniform = (lo: number, hi: number) => Array.from({ length: n }, () => lo + (hi - lo) * rng.random());
  const apply = Array.from({ length: n }, () => (rng.random() < o.p ? 1 : 0));
  const factors = {
    brightness: uniform(Math.max(0, 1 - o.brightness), 1 + o.brightness),
    contrast: uniform(Math.max(0, 1 - o.contrast), 1 + o.contrast),
    saturation: uniform(Math.max(0, 1 - o.saturation), 1 + o.saturation),
    hue: uniform(-o.hue, o.hue),
  };
  // torchvision draws the order of the four jitters per call, i.e. per image here.
  const orders = Array.from({ length: n }, () => Array.from(rng.permutation(4)));
  const greyed = Array.from({ length: n }, () => (rng.random() < o.grayscale ? 1 : 0));
  return torch.tidy(() => {
    const ops = COLOR_JITTERS.map((j) => (t: Tensor) => colorJitter(t, j, perImage(factors[j], t)));
    let out = x;
    for (let pos = 0; pos < 4; pos++) {
      // Each image takes the jitter its order puts at this position.
      let next = out;
      for (let op = 0; op < 4; op++) {
        const mask = perImage(
          orders.map((ord, i) => (apply[i] && ord[pos] === op ? 1 : 0)),
          out,
        ).gt(0);
        if (!mask.any().item()) continue;
        next = torch.where(mask, (ops[op] as (t: Tensor) => Tensor)(out), next);
      }
      out = next;
    }
    const g = perImage(greyed, out).gt(0);
    return torch.where(g, gray(out).expand(out.shape), out);
  });
}
