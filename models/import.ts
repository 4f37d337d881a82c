// `stitchlab import`: weights made elsewhere become a stitchlab checkpoint (safetensors with its
// sidecar), after a check against a forward pass on real images: the test images of the dataset
// named, normalised as the model's inputs were. The logits must be finite, of the right shape and
// of a sane scale (LOGIT_SPREAD_LIMIT), the model must have the dataset's classes, the accuracy is
// printed and recorded, and the checkpoint written must give the same logits when read back.
// Nothing is written before the check on the images has passed.
import { existsSync, mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { batches, type Dataset, disposeDataset, loadDataset, normalizationFor, normalize } from "../data/index.js";
import { sha256File } from "../io/files.js";
import { inEvalMode } from "../nn/module.js";
import * as torch from "../torch/index.js";
import { type CheckpointMeta, type LoadNotes, loadCheckpoint, type ModelSource, saveCheckpoint } from "./checkpoint.js";
import { OnnxModel } from "./onnx/model.js";
import { checkInputSize, type StitchableModel } from "./stitchable.js";

/**
 * The widest spread (largest minus smallest logit) one real image may give a model being imported.
 * Softmax reads only differences of logits, and a trained classifier's stay far below 100: cross-
 * entropy stops widening a margin once the runner-up's probability e^-margin is negligible (its
 * gradient is e^-margin: below 2e-9 past 20), so on their own test images the models trained here
 * spread over 20 to 28 (12 narrow Fashion-MNIST ResNet-18s, 256 test images each; their largest
 * logit 12 to 17). At a spread of 100 the runner-up's probability is e^-100 = 4e-44, beyond what
 * float32 holds as a normal number (1.2e-38): every prediction is exactly one-hot and the soft
 * labels stitching fits carry nothing. A wider spread means damaged weights (4 KB of flipped
 * bytes gave weights up to 7e4) or inputs normalised another way than in training (0-255 pixels),
 * not a model to stitch. The bound holds for real images only: on uniform noise the same models
 * spread up to 116, which is why the check needs a dataset.
 */
export const LOGIT_SPREAD_LIMIT = 100;

/** Test images the forward check runs by default. */
export const CHECK_IMAGES = 256;

/** What the forward check found, printed, and recorded in the sidecar (importedFrom.check, all but readBackMaxDiff). */
export interface ImportCheck {
  /** The images: "<dataset> test". */
  data: string;
  images: number;
  /** The logits' shape over all the images: [images, classes]. */
  logits: number[];
  /** The widest spread of one image's logits (at most LOGIT_SPREAD_LIMIT). */
  logitSpread: number;
  /** Top-1 accuracy on those images (the model's classes are the dataset's: another count is refused). */
  accuracy: number;
  /** The dataset's class count (accuracy's chance level is its inverse). */
  classes: number;
  /** The largest difference of the logits after reading the checkpoint back (0 expected). */
  readBackMaxDiff: number;
}

export interface ImportResult {
  checkpoint: string;
  arch: string;
  options: Record<string, unknown>;
  notes: LoadNotes;
  check: ImportCheck;
}

export interface ImportOptions {
  /** The dataset whose test images the check runs on; recorded as the one it was trained on. */
  dataset: string;
  /** Where the dataset's files are (required for all but Fashion-MNIST in its Debian place). */
  root?: string;
  /** Test images for the check (default CHECK_IMAGES). */
  checkImages?: number;
}

const fmt = (x: number) => (Math.abs(x) >= 1e4 ? x.toExponential(2) : x.toFixed(2));

/**
 * The forward check's numbers over every image of `ds` (eval mode, no gradients): the logits
 * must be finite and of the model's class count, each image's spread at most LOGIT_SPREAD_LIMIT.
 */
function forwardCheck(
  model: StitchableModel,
  ds: Dataset,
  what: string,
  numClasses: number,
  norm: ReturnType<typeof normalizationFor>,
): Omit<ImportCheck, "readBackMaxDiff" | "data" | "classes"> {
  let correct = 0;
  let spread = 0;
  let n = 0;
  let shape: number[] = [];
  inEvalMode([model], () => {
    for (const b of batches(ds, { batchSize: 64, normalization: norm })) {
      try {
        torch.tidy(() =>
          torch.noGrad(() => {
            const logits = model.forward(b.x);
            shape = logits.shape;
            if (shape.length !== 2 || shape[1] !== numClasses)
              throw new Error(
                `forward check: logits of shape [${shape.join(", ")}], expected [${b.indices.length}, ${numClasses}]`,
              );
            const finite = torch.call("isfinite", logits) as torch.Tensor;
            if (!finite.all().item()) {
              const rows = (torch.call("amin", finite.float(), [1], false) as torch.Tensor).tolist() as number[];
              const row = rows.indexOf(0);
              throw new Error(
                `forward check: on ${what} the logits of image ${b.indices[row]} are not finite (are the weights?)`,
              );
            }
            const s = (torch.call("amax", logits, [1], false) as torch.Tensor).sub(
              torch.call("amin", logits, [1], false) as torch.Tensor,
            );
            spread = Math.max(spread, s.max().item());
            correct += logits.argmax(1).eq(b.y).sum().item();
            n += b.indices.length;
          }),
        );
      } finally {
        torch.dispose(b);
      }
    }
  });
  if (spread > LOGIT_SPREAD_LIMIT)
    throw new Error(
      `forward check: on ${what} the logits of one image spread over ${fmt(spread)} (the limit is ${LOGIT_SPREAD_LIMIT}). ` +
        "A trained classifier's spread over 20 to 30 on its test images: are the weights damaged, or were its " +
        "inputs normalised another way (--normalization)?",
    );
  return { images: n, logits: [n, shape[1] ?? numClasses], logitSpread: spread, accuracy: correct / n };
}

/** Logits of the model on fixed images (eval mode, no gradients). */
function probe(model: StitchableModel, x: torch.Tensor): torch.Tensor {
  return inEvalMode([model], () => torch.noGrad(() => model.forward(x)));
}

/**
 * Reads `source` (weights made elsewhere, or a stitchlab checkpoint to copy), checks it on the test
 * images of `opts.dataset`, and writes outDir/model.safetensors and model.json. The dataset is
 * recorded as the one it was trained on, so that stitch and iris default to it. outDir must be
 * empty or absent. Every refusal comes before anything is written.
 */
export async function importModel(source: ModelSource, outDir: string, opts: ImportOptions): Promise<ImportResult> {
  if (existsSync(outDir) && readdirSync(outDir).length > 0)
    throw new Error(`--out ${outDir} is not empty: give a new folder`);
  const limit = opts.checkImages ?? CHECK_IMAGES;
  if (!(Number.isInteger(limit) && limit > 0))
    throw new RangeError(`--check-images must be a positive integer, got ${limit}`);
  const { model, notes, record, file: local } = loadCheckpoint(source);
  let ds: Dataset | undefined;
  let x: torch.Tensor | undefined;
  let before: torch.Tensor | undefined;
  const file = source.checkpoint;
  try {
    // An ONNX model is imported as its graph (model.onnx) with the sidecar beside it; one whose
    // weights lie in external files would need them copied too: it is used where it is instead.
    if (model instanceof OnnxModel && model.externalData)
      throw new Error(
        `${file} keeps its weights in external data files: import copies one file, so give the model where it is (stitch --front ${file} --front-normalization ..., or checkpoint: with normalization: in an experiment file)`,
      );
    ds = await loadDataset(opts.dataset, {
      split: "test",
      limit,
      ...(opts.root !== undefined ? { root: opts.root } : {}),
      ...(opts.dataset === "imagefolder" ? { imageSize: record.imageSize } : {}),
    });
    checkInputSize(model, ds.images.shape, "the imported");
    // --dataset is recorded as the data the model was trained on (stitch and iris default to it),
    // so a head of another class count is a wrong record, not a model to check there (issue 25).
    if (record.numClasses !== ds.classes.length)
      throw new Error(
        `${file} has ${record.numClasses} classes, but --dataset ${opts.dataset} has ${ds.classes.length}: --dataset is recorded as the data the model was trained on, so give that data (weights of another class count can still be a stitch's front without importing: stitch --front-arch)`,
      );
    const norm = record.normalization ?? normalizationFor(opts.dataset);
    const what = `${ds.labels.shape[0]} ${opts.dataset} test images`;
    let found: ReturnType<typeof forwardCheck>;
    try {
      found = forwardCheck(model, ds, what, record.numClasses, norm);
    } catch (e) {
      throw new Error(`${file}: ${(e as Error).message}`);
    }
    const classes = ds.classes.length;
    const check: Omit<ImportCheck, "readBackMaxDiff"> = {
      data: `${opts.dataset} test`,
      ...found,
      accuracy: found.accuracy,
      classes,
    };
    // The read-back check: the first images again, through the model and through the checkpoint written.
    const k = Math.min(16, ds.labels.shape[0]);
    const images = ds.images;
    x = torch.keep(torch.tidy(() => normalize(images.narrow(0, 0, k), norm)));
    before = torch.keep(probe(model, x));
    mkdirSync(outDir, { recursive: true });
    const path = join(outDir, model instanceof OnnxModel ? "model.onnx" : "model.safetensors");
    const extra: Omit<CheckpointMeta, "arch" | "options"> = {
      dataset: opts.dataset,
      ...(record.normalization ? { normalization: record.normalization } : {}),
      importedFrom: {
        file,
        sha256: sha256File(local),
        unwrapped: notes.unwrapped,
        inferredOptions: notes.inferred,
        check,
      },
    };
    saveCheckpoint(path, model, extra);
    const back = loadCheckpoint(path).model;
    let diff: number;
    try {
      const after = probe(back, x);
      const b4 = before;
      diff = torch.tidy(() => after.sub(b4).abs().max().item());
      after.dispose();
    } finally {
      back.dispose();
    }
    if (diff !== 0)
      throw new Error(`forward check: the written checkpoint ${path} gives other logits (max difference ${diff})`);
    return {
      checkpoint: path,
      arch: model.arch,
      options: model.config,
      notes,
      check: { ...check, readBackMaxDiff: diff },
    };
  } finally {
    if (ds) disposeDataset(ds);
    torch.dispose([x, before].filter((t): t is torch.Tensor => t !== undefined));
    model.dispose();
  }
}
