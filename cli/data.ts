// `stitchlab data ...`: look at datasets. Parsing and writing only; the work is in data/.
import { resolve } from "node:path";
import type { Command } from "commander";
import {
  applyShortcut,
  DATASET_NAMES,
  disposeDataset,
  gridPng,
  loadDataset,
  SHORTCUT_KINDS,
  type ShortcutKind,
  type Split,
} from "../data/index.js";
import { writeFileAtomic } from "../io/files.js";
import { imageSide } from "./parse.js";

function positiveInt(name: string) {
  return (v: string) => {
    const n = Number(v);
    if (!(Number.isInteger(n) && n > 0)) throw new Error(`--${name} must be a positive integer, got '${v}'`);
    return n;
  };
}

interface PreviewOptions {
  shortcut?: string;
  rolled?: boolean;
  n: number;
  split: string;
  root?: string;
  seed: number;
  imageSize?: number;
  resize?: number;
  classList?: string;
  scale?: number;
  out: string;
}

export function registerDataCommands(program: Command): void {
  const data = program.command("data").description("inspect datasets and their shortcut markers");
  data
    .command("preview")
    .description("write a PNG grid of samples, optionally with shortcut markers, to look at")
    .argument("<dataset>", `dataset: ${DATASET_NAMES.join(", ")}`)
    .requiredOption("--out <file>", "PNG file to write")
    .option("--shortcut <kind>", `add markers: ${SHORTCUT_KINDS.join(", ")}`)
    .option("--rolled", "class c carries class c-1's whole marker (the rolled test set)")
    .option("--n <count>", "number of images (the first n of the split)", positiveInt("n"), 64)
    .option("--split <split>", "train or test", "test")
    .option("--root <path>", "where the dataset files are (cifar10: .tar.gz or folder; imagefolder: ImageNet layout)")
    .option("--seed <n>", "seed of marker locations (pixel, rand) and colours (rand)", Number, 0)
    .option("--image-size <px>", "imagefolder: output side in pixels (default 32)", imageSide)
    .option(
      "--resize <px>",
      "imagefolder: shorter side before the centre crop (default: 256 for 224, the image size itself up to 64 px)",
      positiveInt("resize"),
    )
    .option("--class-list <file>", "imagefolder: one wnid per line, in label order")
    .option("--scale <k>", "nearest-neighbour upscale (default 4 at 32 px)", positiveInt("scale"))
    .action(async (name: string, opts: PreviewOptions) => {
      if (opts.shortcut && !SHORTCUT_KINDS.includes(opts.shortcut as ShortcutKind))
        throw new Error(`--shortcut must be one of ${SHORTCUT_KINDS.join(", ")}, got '${opts.shortcut}'`);
      if (opts.rolled && !opts.shortcut) throw new Error("--rolled needs --shortcut pixel or pixel-loc");
      if (!Number.isFinite(opts.seed)) throw new Error("--seed must be a number");
      const ds = await loadDataset(name, {
        split: opts.split as Split,
        root: opts.root,
        limit: opts.n,
        imageSize: opts.imageSize,
        resize: opts.resize,
        classList: opts.classList,
      });
      const shown = opts.shortcut
        ? applyShortcut(ds, { kind: opts.shortcut as ShortcutKind, rolled: opts.rolled, seed: opts.seed })
        : ds;
      const png = await gridPng(shown.images, { scale: opts.scale });
      const out = resolve(opts.out);
      writeFileAtomic(out, [png]);
      console.log(`wrote ${out}: ${shown.labels.shape[0]} images of ${shown.name}`);
      if (shown !== ds) disposeDataset(shown);
      disposeDataset(ds);
    });
}
