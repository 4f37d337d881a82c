// Image folders in ImageNet's layout: root/train/<wnid>/*.JPEG and root/val/<wnid>/*.JPEG,
// decoded and resized with sharp. A class-list file (one wnid per line, optionally followed by
// a readable name: "n01440764 tench") picks the classes and fixes their label order, which is
// how LS-ImageNet-10 (10 classes at 32 px) and ImageNet-100 (100 classes at 224 px) are cut
// from a full ImageNet folder; folders in a split that the list does not name are ignored (that
// is the selection), and a listed class without a folder in the split is an error.
//
// Without a class list the labels are fixed per root, not per split: the classes are the
// sub-folders of root/train, sorted by name (torchvision's ImageFolder rule), since the training
// split defines the label space, and every split (val, test, a splitDir) is read with that list,
// its images labelled by folder name. A split may lack classes (a val/ without n03 still labels
// its n04 as train's n04), but a split with a class folder that train/ lacks is refused before
// any image is decoded, naming the folder and the extra classes: the model has no output for
// them. With no train/ folder (an evaluation-only root), the label space is the sorted union of
// the sub-folders of val/, test/ and the split folder read, so that every split of the root
// still gets the same labels. A class folder without images is refused where a missing one would
// be (train/ without a list, every split with one), naming it: see readImageFolder.
//
// Resizing, as the reference's test transform Resize(resize) + CenterCrop(size)
// (athaioan/invariance-aware-stitching, dataloaders/dataset.py, the 'imagenet' configs): the
// shorter side goes to `resize` and the longer to floor(resize * long / short), as torchvision
// computes it, with a linear (triangle) filter widened with the reduction, which is what PIL's
// antialiased bilinear Resize does (sharp's JPEG shrink-on-load is off: it would box-filter
// first); then the centre size x size crop, offset round((H - size) / 2) half to even, as
// torchvision's CenterCrop. Default `resize`: size / 0.875 for sizes above 64 px (256 for 224:
// the reference's ImageNet-100 transform), `size` itself at 64 px and below (LS-ImageNet-10's
// images are stored at 32 px, nothing to cut).
//
// Everything is held in memory as uint8 [N, 3, size, size]: 3 KB per image at 32 px
// (LS-ImageNet-10's 13,000 images: 40 MB), 150 KB at 224 px (ImageNet-100's 126,689 training
// images: 19 GB). A split over `maxBytes` (default a quarter of the machine's memory, since a
// marked copy or a subset doubles it) is refused before decoding, with the number of images
// that would fit; pass `limit`, a smaller size, or a larger `maxBytes`.

import { existsSync, readdirSync, readFileSync } from "node:fs";
import { totalmem } from "node:os";
import { basename, extname, join } from "node:path";
import sharp from "sharp";
import * as torch from "../torch/index.js";
import { type Dataset, DEFAULT_IMAGE_SIZE, type Split } from "./dataset.js";
import { DataError, isDirectory } from "./files.js";
import { Rng } from "./rng.js";

const EXTENSIONS = new Set([".jpeg", ".jpg", ".png", ".webp", ".tif", ".tiff", ".bmp", ".gif"]);
export const IMAGEFOLDER_HOW_TO_GET =
  "Point the root (--root) at a folder in ImageNet's layout (train/<wnid>/*.JPEG, val/<wnid>/*.JPEG; " +
  "the validation images sorted into class folders) and give a class-list file of one wnid per line";

export interface ImageFolderOptions {
  /** Output side in pixels: images are square, size x size (default 32). */
  size?: number;
  /** Shorter side after resizing, before the centre crop to `size` (default defaultResize(size): 256 for 224, size at 64 px and below). */
  resize?: number;
  /** Refuse a split whose uint8 images would need more bytes than this (default defaultMaxBytes()). */
  maxBytes?: number;
  /** Class-list file; default root/classes.txt when it exists, else the sub-folders of root/train, sorted (see the header). */
  classList?: string;
  /** Sub-folder of each split (defaults: train -> "train", test -> "val", or "test" when there is no "val"). */
  splitDir?: string;
  /** Read only `limit` images, drawn at random with a fixed seed from the whole split (kept in class order). */
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

/** The shorter side before the centre crop when none is given: size / 0.875 above 64 px (256 for 224), else size. */
export function defaultResize(size: number): number {
  return size > 64 ? Math.round(size / 0.875) : size;
}

/** The default memory limit of an in-memory image folder: a quarter of the machine's memory. */
export function defaultMaxBytes(): number {
  return Math.floor(totalmem() / 4);
}

/** Python's round(): halves go to the even neighbour (torchvision's CenterCrop offsets). */
function roundHalfEven(v: number): number {
  const f = Math.floor(v);
  if (v - f !== 0.5) return Math.round(v);
  return f % 2 === 0 ? f : f + 1;
}

/** Decodes one image to size x size RGB (resize the shorter side to `resize`, centre crop), HWC bytes. */
export async function decodeImage(path: string, size: number, resize = size): Promise<Buffer> {
  try {
    // Decode once (auto-oriented, RGB), then resize the raw pixels: the output size is known
    // only once the oriented input size is.
    const full = await sharp(path)
      .rotate()
      .removeAlpha()
      .toColourspace("srgb")
      .raw()
      .toBuffer({ resolveWithObject: true });
    const [w0, h0] = [full.info.width, full.info.height];
    const short = Math.min(w0, h0);
    const long = Math.floor((resize * Math.max(w0, h0)) / short);
    const [width, height] = w0 <= h0 ? [resize, long] : [long, resize];
    const left = roundHalfEven((width - size) / 2);
    const top = roundHalfEven((height - size) / 2);
    let img = sharp(full.data, { raw: { width: w0, height: h0, channels: full.info.channels } });
    // An image already at the target size is only cropped (as torchvision, which skips the resize).
    if (width !== w0 || height !== h0)
      img = img.resize({ width, height, fit: "fill", kernel: "linear", fastShrinkOnLoad: false });
    // extract after resize crops the resized image.
    const out = await img.extract({ left, top, width: size, height: size }).raw().toBuffer();
    return out;
  } catch (e) {
    throw new DataError(path, `cannot decode image (${(e as Error).message})`, IMAGEFOLDER_HOW_TO_GET);
  }
}

/** The names of a folder's sub-folders (symbolic links to folders included), sorted. */
function classFolders(dir: string): string[] {
  return readdirSync(dir)
    .filter((name) => isDirectory(join(dir, name)))
    .sort();
}

/**
 * The label space of a root without a class list: root/train's class folders, sorted; with no
 * train/, the sorted union of val/'s, test/'s and `dir`'s (the split folder being read). The same
 * for every split of a root, so a label means the same class in each.
 */
function rootClasses(root: string, dir: string): { wnids: string[]; names: string[] } {
  const train = join(root, "train");
  const dirs = isDirectory(train) ? [train] : [join(root, "val"), join(root, "test"), dir].filter(isDirectory);
  const wnids = [...new Set(dirs.flatMap(classFolders))].sort();
  return { wnids, names: wnids };
}

/**
 * How many classes a root's splits are labelled with (its class list, else rootClasses), without
 * decoding an image: what a back model's head must have, checked before any work.
 */
export function imageFolderClassCount(root: string, classList?: string): number {
  const list = classList ?? join(root, "classes.txt");
  if (existsSync(list)) return readClassList(list).wnids.length;
  return rootClasses(root, join(root, "train")).wnids.length;
}

/** Reads a split of an ImageNet-layout folder, resized to `size` px, into memory. */
export async function readImageFolder(root: string, split: Split, opts: ImageFolderOptions = {}): Promise<Dataset> {
  const size = opts.size ?? DEFAULT_IMAGE_SIZE;
  const resize = opts.resize ?? defaultResize(size);
  if (!(Number.isInteger(size) && size > 0 && Number.isInteger(resize) && resize >= size))
    throw new RangeError(`imagefolder: need integers size > 0 and resize >= size, got size ${size}, resize ${resize}`);
  if (!isDirectory(root)) throw new DataError(root, "image folder not found", IMAGEFOLDER_HOW_TO_GET);
  const sub = opts.splitDir ?? (split === "train" ? "train" : isDirectory(join(root, "val")) ? "val" : "test");
  const dir = join(root, sub);
  if (!isDirectory(dir)) throw new DataError(dir, `split folder for '${split}' not found`, IMAGEFOLDER_HOW_TO_GET);
  const listPath = opts.classList ?? (existsSync(join(root, "classes.txt")) ? join(root, "classes.txt") : null);
  const { wnids, names } = listPath ? readClassList(listPath) : rootClasses(root, dir);
  if (!listPath) {
    // Checked before anything is decoded: a class the label space lacks would otherwise be dropped
    // silently. (Only a root with train/ can fail here: otherwise this split is in the union.)
    const known = new Set(wnids);
    const extra = classFolders(dir).filter((w) => !known.has(w));
    if (extra.length)
      throw new DataError(
        dir,
        `class folder${extra.length > 1 ? "s" : ""} ${extra.map((w) => `'${w}'`).join(", ")} not among the ` +
          `${wnids.length} classes of ${join(root, "train")} ` +
          "(without a class list the labels come from train/'s class folders); add the class to train/, " +
          "remove the folder, or give a class-list file",
        IMAGEFOLDER_HOW_TO_GET,
      );
  }

  const files: { path: string; label: number }[] = [];
  const empty: string[] = [];
  wnids.forEach((wnid, label) => {
    const cdir = join(dir, wnid);
    if (!isDirectory(cdir)) {
      // Without a class list a split may lack classes: labels come from folder names, so the rest stay right.
      if (!listPath) return;
      throw new DataError(cdir, `folder of class '${wnid}' not found`, IMAGEFOLDER_HOW_TO_GET);
    }
    const before = files.length;
    for (const f of readdirSync(cdir).sort())
      if (EXTENSIONS.has(extname(f).toLowerCase())) files.push({ path: join(cdir, f), label });
    if (files.length === before) empty.push(cdir);
  });
  // A class of the label space without images is refused, not repaired, before anything is
  // decoded: kept, it is an output no image trains (a 5-class model learnt from 4 classes);
  // dropped, every later class's label would move, and train and val would no longer agree on
  // them. An empty folder is most often a copy that failed, which only the user can put right.
  // Refused where a missing folder is: in train/ (whose folders are the label space) without a
  // class list, in every split with one; an evaluation split may lack a class, and an empty folder
  // there is the same as none.
  const definesLabels = listPath !== null || dir === join(root, "train");
  if (definesLabels && empty.length) {
    const one = empty.length === 1;
    throw new DataError(
      one ? empty[0] : dir,
      `${one ? `class folder '${basename(empty[0])}' holds` : `class folders ${empty.join(", ")} hold`} no images ` +
        `(${[...EXTENSIONS].join(", ")}): a class without images would be an output that nothing trains. Add ${one ? "its" : "their"} images, remove the folder${one ? "" : "s"}, or give a class list without ${one ? "it" : "them"}`,
      IMAGEFOLDER_HOW_TO_GET,
    );
  }
  // A limit draws its images at random (fixed seed) from the whole split, kept in class order:
  // the first n of a class-ordered folder would hold only the first classes.
  if (opts.limit !== undefined && opts.limit < files.length) {
    const keep = new Rng(0, 0x11f0).sample(files.length, opts.limit);
    files.splice(0, files.length, ...keep.map((i) => files[i]));
  }
  const n = files.length;
  if (n === 0) throw new DataError(dir, "no images found in the class folders", IMAGEFOLDER_HOW_TO_GET);

  const plane = size * size * 3;
  const maxBytes = opts.maxBytes ?? defaultMaxBytes();
  if (n * plane > maxBytes) {
    const gb = (b: number) => (b >= 1e9 ? `${(b / 1e9).toFixed(1)} GB` : `${(b / 1e6).toFixed(1)} MB`);
    throw new DataError(
      dir,
      `${n} images at ${size} px need ${gb(n * plane)} in memory as uint8, over the ${gb(maxBytes)} limit of ` +
        `in-memory datasets (maxBytes; default a quarter of this machine's memory). Pass limit (at most ` +
        `${Math.floor(maxBytes / plane)} images fit; limit draws them at random from every class), a smaller ` +
        "image size, or a larger maxBytes",
    );
  }
  const labels = new BigInt64Array(n);
  for (let i = 0; i < n; i++) labels[i] = BigInt(files[i].label);
  // Decoded in chunks into one preallocated tensor: a JS typed array stops at 4 GiB, and the
  // peak memory stays one dataset plus one chunk.
  const chunk = Math.max(1, Math.floor(256e6 / plane));
  const images = torch.empty([n, 3, size, size], { dtype: "uint8" });
  try {
    for (let start = 0; start < n; start += chunk) {
      const len = Math.min(chunk, n - start);
      const hwc = new Uint8Array(len * plane);
      let next = 0;
      const worker = async () => {
        for (let i = next++; i < len; i = next++)
          hwc.set(await decodeImage(files[start + i].path, size, resize), i * plane);
      };
      await Promise.all(Array.from({ length: Math.max(1, opts.concurrency ?? 8) }, worker));
      // sharp gives HWC; a permute makes it channels first.
      torch.tidy(() => {
        images.narrow(0, start, len).copy_(torch.fromBytes(hwc, "uint8", [len, size, size, 3]).permute(0, 3, 1, 2));
      });
    }
  } catch (e) {
    images.dispose();
    throw e;
  }
  return { images, labels: torch.tensor(labels), classes: names, name: `imagefolder/${split}` };
}
