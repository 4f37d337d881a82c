// Image folders in ImageNet's layout: root/train/<wnid>/*.JPEG and root/val/<wnid>/*.JPEG,
// decoded and resized with sharp. A class-list file (one wnid per line, optionally followed by
// a readable name: "n01440764 tench") picks the classes and fixes their label order, which is
// how LS-ImageNet-10 (10 classes at 32 px) and ImageNet-100 (100 classes at 224 px) are cut
// from a full ImageNet folder. Without one, every sub-folder is a class, sorted by name
// (torchvision's ImageFolder rule).
//
// Everything is held in memory as uint8: fine for LS-ImageNet-10 (13,000 images at 32 px is
// 40 MB), but ImageNet-100's train split at 224 px would be about 19 GB; use `limit` or a
// smaller `size` until a streaming reader exists.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { extname, join } from "node:path";
import sharp from "sharp";
import * as torch from "../torch/index.js";
import type { Dataset, Split } from "./dataset.js";
import { DataError, isDirectory } from "./files.js";

const EXTENSIONS = new Set([".jpeg", ".jpg", ".png", ".webp", ".tif", ".tiff", ".bmp", ".gif"]);
export const IMAGEFOLDER_HOW_TO_GET =
  "Point the root (--root) at a folder in ImageNet's layout (train/<wnid>/*.JPEG, val/<wnid>/*.JPEG; " +
  "the validation images sorted into class folders) and give a class-list file of one wnid per line";

export interface ImageFolderOptions {
  /** Output side in pixels: images are square, size x size (default 32). */
  size?: number;
  /** Shorter side after resizing, before the centre crop to `size` (default: size, i.e. no margin; 256 for the usual 224 crop). */
  resize?: number;
  /** Class-list file; default root/classes.txt when it exists, else every sub-folder sorted. */
  classList?: string;
  /** Sub-folder of each split (defaults: train -> "train", test -> "val", or "test" when there is no "val"). */
  splitDir?: string;
  /** Read only the first `limit` images (in class order, then file-name order). */
  limit?: number;
  /** Images decoded at once (sharp decodes on its own thread pool). */
  concurrency?: number;
}

/** The class list: wnids (folder names) and display names, in label order. */
export function readClassList(path: string): { wnids: string[]; names: string[] } {
  if (!existsSync(path)) throw new DataError(path, "class-list file not found", IMAGEFOLDER_HOW_TO_GET);
  const wnids: string[] = [];
  const names: string[] = [];
  for (const line of readFileSync(path, "utf8").split(/\r?\n/)) {
    const t = line.trim();
    if (!t || t.startsWith("#")) continue;
    const [wnid, ...rest] = t.split(/\s+/);
    if (wnids.includes(wnid)) throw new DataError(path, `class '${wnid}' is listed twice`, IMAGEFOLDER_HOW_TO_GET);
    wnids.push(wnid);
    names.push(rest.length ? rest.join(" ") : wnid);
  }
  if (wnids.length === 0) throw new DataError(path, "class-list file names no class", IMAGEFOLDER_HOW_TO_GET);
  return { wnids, names };
}

/** Decodes one image to size x size RGB (resize the shorter side to `resize`, centre crop), HWC bytes. */
export async function decodeImage(path: string, size: number, resize = size): Promise<Buffer> {
  try {
    let img = sharp(path).rotate().removeAlpha().toColourspace("srgb");
    img = img.resize({ width: resize, height: resize, fit: "outside" });
    const resized = await img.raw().toBuffer({ resolveWithObject: true });
    const { width, height } = resized.info;
    // Centre crop of the resized image; a second pipeline keeps the crop offsets exact.
    const left = Math.floor((width - size) / 2);
    const top = Math.floor((height - size) / 2);
    const out = await sharp(resized.data, { raw: { width, height, channels: 3 } })
      .extract({ left, top, width: size, height: size })
      .raw()
      .toBuffer();
    return out;
  } catch (e) {
    throw new DataError(path, `cannot decode image (${(e as Error).message})`, IMAGEFOLDER_HOW_TO_GET);
  }
}

/** Reads a split of an ImageNet-layout folder, resized to `size` px, into memory. */
export async function readImageFolder(root: string, split: Split, opts: ImageFolderOptions = {}): Promise<Dataset> {
  const size = opts.size ?? 32;
  const resize = opts.resize ?? size;
  if (!(Number.isInteger(size) && size > 0 && Number.isInteger(resize) && resize >= size))
    throw new RangeError(`imagefolder: need integers size > 0 and resize >= size, got size ${size}, resize ${resize}`);
  if (!isDirectory(root)) throw new DataError(root, "image folder not found", IMAGEFOLDER_HOW_TO_GET);
  const sub = opts.splitDir ?? (split === "train" ? "train" : isDirectory(join(root, "val")) ? "val" : "test");
  const dir = join(root, sub);
  if (!isDirectory(dir)) throw new DataError(dir, `split folder for '${split}' not found`, IMAGEFOLDER_HOW_TO_GET);
  const listPath = opts.classList ?? (existsSync(join(root, "classes.txt")) ? join(root, "classes.txt") : null);
  const { wnids, names } = listPath
    ? readClassList(listPath)
    : (() => {
        const w = readdirSync(dir, { withFileTypes: true })
          .filter((d) => d.isDirectory())
          .map((d) => d.name)
          .sort();
        return { wnids: w, names: w };
      })();

  const files: { path: string; label: number }[] = [];
  wnids.forEach((wnid, label) => {
    const cdir = join(dir, wnid);
    if (!isDirectory(cdir)) throw new DataError(cdir, `folder of class '${wnid}' not found`, IMAGEFOLDER_HOW_TO_GET);
    for (const f of readdirSync(cdir).sort())
      if (EXTENSIONS.has(extname(f).toLowerCase())) files.push({ path: join(cdir, f), label });
  });
  const n = Math.min(opts.limit ?? files.length, files.length);
  if (n === 0) throw new DataError(dir, "no images found in the class folders", IMAGEFOLDER_HOW_TO_GET);

  const plane = size * size * 3;
  const hwc = new Uint8Array(n * plane);
  const labels = new BigInt64Array(n);
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < n; i = next++) {
      hwc.set(await decodeImage(files[i].path, size, resize), i * plane);
      labels[i] = BigInt(files[i].label);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, opts.concurrency ?? 8) }, worker));
  // sharp gives HWC; one permute over the whole set makes it channels first.
  const images = torch.tidy(() => torch.fromBytes(hwc, "uint8", [n, size, size, 3]).permute(0, 3, 1, 2).contiguous());
  return { images, labels: torch.tensor(labels), classes: names, name: `imagefolder/${split}` };
}
