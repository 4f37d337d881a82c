// IDX files (MNIST, Fashion-MNIST), gzipped or not. Big-endian header: two zero bytes, a type
// byte (0x08 = uint8) and the number of dimensions, then one uint32 per dimension. Images are
// 0x00000803 [N, 28, 28], labels 0x00000801 [N]. The 28 px grey images are optionally padded
// to 32 px with zeros (2 each side, so the 32-px models and the marker rule apply unchanged)
// and replicated to 3 channels (so RGB models and RGB markers apply).
import { existsSync } from "node:fs";
import { join } from "node:path";
import * as torch from "../torch/index.js";
import { type Dataset, fromBytes, type Split } from "./dataset.js";
import { DataError, readDataFile } from "./files.js";

export const FASHION_MNIST_CLASSES = [
  "T-shirt/top",
  "Trouser",
  "Pullover",
  "Dress",
  "Coat",
  "Sandal",
  "Shirt",
  "Sneaker",
  "Bag",
  "Ankle boot",
];
export const MNIST_CLASSES = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];

/** Debian's dataset-fashion-mnist package installs the four gzipped IDX files here. */
export const FASHION_MNIST_ROOT = "/usr/share/datasets/fashion-mnist";
export const FASHION_MNIST_HOW_TO_GET =
  "Install it with `apt-get install dataset-fashion-mnist` (files in /usr/share/datasets/fashion-mnist), " +
  "or pass a folder holding train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, " +
  "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz as the root (--root)";
export const MNIST_HOW_TO_GET =
  "Download the four MNIST IDX files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, " +
  "t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz) and pass their folder as the root (--root)";

const IMAGES_MAGIC = 0x00000803;
const LABELS_MAGIC = 0x00000801;

const hex = (v: number) => `0x${v.toString(16).padStart(8, "0")}`;

/** Parses an IDX file: its dimensions and a view of its uint8 data (first `limit` items). */
export function parseIdx(
  buf: Uint8Array,
  path: string,
  expectedMagic: number,
  howToGet: string,
  limit?: number,
): { dims: number[]; data: Uint8Array } {
  const ndim = expectedMagic & 0xff;
  const headerLen = 4 + 4 * ndim;
  if (buf.length < headerLen)
    throw new DataError(path, `${buf.length} bytes, too short for an IDX header of ${headerLen} bytes`, howToGet);
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const magic = view.getUint32(0, false);
  if (magic !== expectedMagic)
    throw new DataError(path, `bad IDX magic ${hex(magic)}, expected ${hex(expectedMagic)}`, howToGet);
  const dims = Array.from({ length: ndim }, (_, i) => view.getUint32(4 + 4 * i, false));
  const itemSize = dims.slice(1).reduce((a, b) => a * b, 1);
  const expected = headerLen + dims[0] * itemSize;
  if (buf.length !== expected)
    throw new DataError(
      path,
      `${buf.length} bytes, expected ${expected} bytes (${dims[0]} items of ${itemSize} after a ${headerLen}-byte header)`,
      howToGet,
    );
  const n = Math.min(limit ?? dims[0], dims[0]);
  return { dims: [n, ...dims.slice(1)], data: buf.subarray(headerLen, headerLen + n * itemSize) };
}

function findFile(root: string, stem: string, howToGet: string): string {
  for (const name of [`${stem}.gz`, stem]) if (existsSync(join(root, name))) return join(root, name);
  throw new DataError(join(root, `${stem}.gz`), "file not found (nor without .gz)", howToGet);
}

export interface IdxOptions {
  /** Pad 28 px to 32 px with 2 zero pixels on each side (default true). */
  pad32?: boolean;
  /** Replicate the grey channel to 3 channels (default true). */
  rgb?: boolean;
  /** Read only the first `limit` images. */
  limit?: number;
}

/** Reads an MNIST-style split (train-* or t10k-* IDX files) from a folder. */
export function readIdxDataset(
  root: string,
  split: Split,
  meta: { name: string; classes: string[]; howToGet: string },
  opts: IdxOptions = {},
): Dataset {
  const prefix = split === "train" ? "train" : "t10k";
  const imgPath = findFile(root, `${prefix}-images-idx3-ubyte`, meta.howToGet);
  const lblPath = findFile(root, `${prefix}-labels-idx1-ubyte`, meta.howToGet);
  const img = parseIdx(readDataFile(imgPath, meta.howToGet), imgPath, IMAGES_MAGIC, meta.howToGet, opts.limit);
  const lbl = parseIdx(readDataFile(lblPath, meta.howToGet), lblPath, LABELS_MAGIC, meta.howToGet, opts.limit);
  const [n, h, w] = img.dims;
  if (lbl.dims[0] !== n)
    throw new DataError(lblPath, `${lbl.dims[0]} labels, expected ${n} to match ${imgPath}`, meta.howToGet);
  const raw = fromBytes(img.data, lbl.data, [n, 1, h, w], meta.classes, `${meta.name}/${split}`);
  const pad = opts.pad32 ?? true;
  const rgb = opts.rgb ?? true;
  if (!pad && !rgb) return raw;
  // Tensor ops (one pad, one expand) instead of a JS loop: this runs over 60,000 images.
  const images = torch.tidy(() => {
    let x = raw.images;
    if (pad && (h < 32 || w < 32)) {
      const dh = 32 - h;
      const dw = 32 - w;
      x = x.pad([dw >> 1, dw - (dw >> 1), dh >> 1, dh - (dh >> 1)]);
    }
    if (rgb) x = x.expand([n, 3, x.shape[2], x.shape[3]]);
    return x.contiguous();
  });
  raw.images.dispose();
  return { ...raw, images };
}
