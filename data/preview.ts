// A grid of sample images, as torchvision.utils.make_grid, upscaled with nearest neighbours so
// a person can see single-pixel markers; encoded as PNG with sharp. Returns bytes: the caller
// decides where they go.
import sharp from "sharp";
import type * as torch from "../torch/index.js";

export interface GridOptions {
  /** Images per row (default ceil(sqrt(n))). */
  nrow?: number;
  /** Integer nearest-neighbour upscale (default: 4 at 32 px, down to 1 for images of 128 px or more). */
  scale?: number;
  /** Pixels between images, in output pixels (default 2), filled with `padValue` (default 128, grey). */
  padding?: number;
  padValue?: number;
}

/** Lays uint8 [N, 3, H, W] images out as one RGB image (HWC bytes). */
export function makeGrid(
  images: torch.Tensor,
  opts: GridOptions = {},
): { data: Uint8Array; width: number; height: number } {
  const [n, c, h, w] = images.shape;
  if (images.dtype !== "uint8" || (c !== 3 && c !== 1))
    throw new Error(`makeGrid: expected uint8 [N, 3 or 1, H, W], got ${images.dtype} [${images.shape}]`);
  const scale = opts.scale ?? Math.max(1, Math.floor(128 / Math.max(h, w)));
  const pad = opts.padding ?? 2;
  const nrow = Math.min(n, opts.nrow ?? Math.ceil(Math.sqrt(n)));
  const ncol = Math.ceil(n / nrow);
  const tw = w * scale;
  const th = h * scale;
  const width = nrow * tw + (nrow + 1) * pad;
  const height = ncol * th + (ncol + 1) * pad;
  const out = new Uint8Array(width * height * 3).fill(opts.padValue ?? 128);
  const src = images.contiguous();
  const px = src.toTypedArray() as Uint8Array;
  src.dispose();
  for (let i = 0; i < n; i++) {
    const ox = pad + (i % nrow) * (tw + pad);
    const oy = pad + Math.floor(i / nrow) * (th + pad);
    for (let y = 0; y < th; y++) {
      const sy = Math.floor(y / scale);
      for (let x = 0; x < tw; x++) {
        const sx = Math.floor(x / scale);
        const o = ((oy + y) * width + ox + x) * 3;
        for (let ch = 0; ch < 3; ch++) out[o + ch] = px[((i * c + (c === 3 ? ch : 0)) * h + sy) * w + sx];
      }
    }
  }
  return { data: out, width, height };
}

/** PNG bytes of a grid of uint8 images. */
export async function gridPng(images: torch.Tensor, opts: GridOptions = {}): Promise<Buffer> {
  const g = makeGrid(images, opts);
  return sharp(g.data, { raw: { width: g.width, height: g.height, channels: 3 } })
    .png()
    .toBuffer();
}
