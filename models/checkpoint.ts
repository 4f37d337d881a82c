// Checkpoints: the state dict as safetensors with PyTorch parameter names, and a JSON sidecar
// that says how to rebuild the model and where it came from. Both written atomically; the
// sidecar last, so a checkpoint with a sidecar is complete.
import { createHash } from "node:crypto";
import { copyFileSync, existsSync } from "node:fs";
import { z } from "zod";
import { isNormalizationName, NORMALIZATION_NAMES, type Normalization, normalizationFor } from "../data/transforms.js";
import { readJsonFile, stitchlabVersion, writeFileAtomic } from "../io/files.js";
import { loadSafetensors, saveSafetensors } from "../io/safetensors.js";
import { torchLoad } from "../io/torchsave.js";
import * as torch from "../torch/index.js";
import { describeMismatch, inferOptions, recogniseStateDict, type StateDict, unwrapStateDict } from "./foreign.js";
import { isHubName, parseHubName, resolveModelSource } from "./hub.js";
import { ONNX_ARCH, OnnxModel } from "./onnx/model.js";
import { checkModelOptions, modelOptionsIssue } from "./options.js";
import { type ModelRecord, modelRecord } from "./record.js";
import { createModel, type ModelOptions, modelNames } from "./registry.js";
import type { StitchableModel } from "./stitchable.js";

export interface CheckpointMeta {
  arch: string;
  options: ModelOptions;
  dataset?: string;
  shortcut?: string | null;
  adversarial?: Record<string, number | boolean> | null;
  seed?: number;
  epochs?: number;
  accuracies?: Record<string, number>;
  stitchlabVersion?: string;
  [key: string]: unknown;
}

const UNIT_RANGE = "normalisation statistics are in [0, 1] pixel units (divide 0-255 values by 255)";

/** What a normalization may be, in words: the end of every message about one. */
export const NORMALIZATION_EXPECTED = `expected a dataset's statistics (${NORMALIZATION_NAMES.filter((x) => x !== "none").join(", ")}), none, or {mean: [...], std: [...]} in [0, 1] pixel units`;

/** A checkpoint's sidecar: model.json beside model.safetensors (or beside an imported model.onnx). */
export const sidecarPath = (path: string): string => `${path.replace(/\.(safetensors|onnx)$/i, "")}.json`;

/**
 * The dataset a source's model was trained on, from a stitchlab checkpoint's sidecar alone (no
 * weights read): what a command defaults --dataset to. Null for weights made elsewhere.
 */
export function checkpointDataset(source: ModelSourceLike): string | null {
  const path = asModelSource(source).checkpoint;
  if (!isStitchlabCheckpoint(path)) return null;
  return readJsonFile<CheckpointMeta>(sidecarPath(path), "a checkpoint's sidecar").dataset ?? null;
}

/**
 * Writes model weights to `path` (.safetensors) and `meta` beside it (.json). An ONNX model is its
 * graph: `path` ends in .onnx, the graph file is copied there as it is, and the sidecar beside it.
 */
export function saveCheckpoint(
  path: string,
  model: StitchableModel,
  meta: Omit<CheckpointMeta, "arch" | "options">,
): void {
  const onnx = model instanceof OnnxModel;
  if (onnx !== isOnnxFile(path) || (!onnx && !path.endsWith(".safetensors")))
    throw new Error(
      `checkpoint path must end in ${onnx ? ".onnx (an ONNX model is its graph)" : ".safetensors"}: ${path}`,
    );
  const full: CheckpointMeta = {
    arch: model.arch,
    options: (onnx ? onnxOptions(model) : model.config) as ModelOptions,
    stitchlabVersion,
    ...meta,
  };
  if (onnx) copyFileSync(model.file, path);
  else saveSafetensors(path, model.stateDict(), { arch: full.arch, options: JSON.stringify(full.options) });
  writeFileAtomic(sidecarPath(path), [`${JSON.stringify(full, null, 2)}\n`]);
}

/** What a checkpoint records of an ONNX model's options: what the graph fixes. */
const onnxOptions = (model: OnnxModel) => ({
  imageSize: model.config.imageSize as number,
  numClasses: model.config.numClasses as number,
});

/**
 * Where a model comes from: a stitchlab checkpoint (its sidecar says everything), or weights
 * made elsewhere (a torch.save file or a safetensors file) with what the file cannot say: the
 * zoo architecture they fit, options the shapes do not show, and the input statistics the
 * model was trained with. One schema for experiment files and the command line.
 */
export const modelSourceSchema = z
  .object({
    checkpoint: z
      .string()
      .min(1)
      .describe(
        "a stitchlab checkpoint (.safetensors with its .json sidecar), a torch.save file, a safetensors file, or a model by hub: hf-hub:ORG/NAME[@REVISION] (timm's, e.g. hf-hub:timm/resnet18.a1_in1k) or torchvision:ARCH[.WEIGHTS] (models/hub.ts)",
      ),
    arch: z.string().optional().describe("the zoo architecture the weights fit (required for files made elsewhere)"),
    options: z
      .record(z.string(), z.unknown())
      .optional()
      .describe(
        "createModel options; those the weights' shapes show (classes, width, stem, ViT sizes) are read from them",
      ),
    normalization: z
      .union(
        [
          z.string(),
          z
            .object({
              // In [0, 1] pixel units, as the images are: 0-255 values (mean 125.3) would normalise
              // every input to nonsense without a word. Both are required; a missing one is named
              // by the refinement below (zod's own word for it would be "Invalid input").
              mean: z.array(z.number().min(0, UNIT_RANGE).max(1, UNIT_RANGE)).min(1).optional(),
              std: z.array(z.number().positive().max(1, UNIT_RANGE)).min(1).optional(),
            })
            .strict(),
        ],
        { error: () => NORMALIZATION_EXPECTED },
      )
      .optional()
      .describe(
        "the statistics its inputs were normalised with: a dataset name (cifar10, imagenet, ...) or {mean, std} in [0, 1] pixel units",
      ),
    imageSize: z.number().int().min(1).optional().describe("the side of the images it was trained on (pixels)"),
    inputChannels: z
      .number()
      .int()
      .min(1)
      .optional()
      .describe("input channels (3; grey data are fed as 3 equal channels)"),
  })
  .strict()
  .superRefine((s, ctx) => {
    // A hub name's form, checked before anything is downloaded.
    if (isHubName(s.checkpoint)) {
      try {
        parseHubName(s.checkpoint);
      } catch (e) {
        ctx.addIssue({ code: "custom", path: ["checkpoint"], message: (e as Error).message });
      }
    }
    const n = s.normalization;
    const problem = (path: string[], message: string) =>
      ctx.addIssue({ code: "custom", path: ["normalization", ...path], message });
    if (n === "") problem([], `it is empty: ${NORMALIZATION_EXPECTED}`);
    else if (typeof n === "string" && !isNormalizationName(n))
      problem([], `no normalisation preset for '${n}': ${NORMALIZATION_EXPECTED}`);
    else if (typeof n === "object" && !n.mean) problem(["mean"], `mean is missing: ${NORMALIZATION_EXPECTED}`);
    else if (typeof n === "object" && !n.std) problem(["std"], `std is missing: ${NORMALIZATION_EXPECTED}`);
    else if (typeof n === "object" && n.mean?.length !== n.std?.length)
      problem([], `mean has ${n.mean?.length} values and std ${n.std?.length}: one of each per channel`);
    // The architecture and its options, checked before any weights are read (models/options.ts).
    if (s.arch !== undefined && !modelNames().includes(s.arch))
      ctx.addIssue({
        code: "custom",
        path: ["arch"],
        message: `unknown model '${s.arch}'; known models: ${modelNames().join(", ")}`,
      });
    else if (s.arch !== undefined && s.options) {
      const issue = modelOptionsIssue(s.arch, s.options);
      if (issue) ctx.addIssue({ code: "custom", path: ["options", issue.key], message: issue.message });
    }
  });
export type ModelSource = z.infer<typeof modelSourceSchema>;

/** A checkpoint path or a source: the path alone is a stitchlab checkpoint. */
export type ModelSourceLike = string | ModelSource;

export const asModelSource = (s: ModelSourceLike): ModelSource => (typeof s === "string" ? { checkpoint: s } : s);

/** The statistics a source names: a dataset's (cifar10, imagenet, ...) or its own numbers. */
export function resolveNormalization(n: ModelSource["normalization"]): Normalization | undefined {
  if (n === undefined) return undefined;
  if (typeof n === "string") return normalizationFor(n);
  const { mean, std } = n;
  if (!mean || !std) throw new Error(`normalization: ${mean ? "std" : "mean"} is missing: ${NORMALIZATION_EXPECTED}`);
  if (mean.length !== std.length)
    throw new Error(`normalization: mean has ${mean.length} values and std ${std.length}: one of each per channel`);
  return { mean, std };
}

/** Whether a file is a stitchlab checkpoint (a .safetensors file with its .json sidecar). */
export const isStitchlabCheckpoint = (path: string): boolean =>
  path.endsWith(".safetensors") ? existsSync(sidecarPath(path)) : isOnnxFile(path) && importedOnnx(path);

/**
 * Whether an .onnx file has the sidecar `stitchlab import` writes beside it: a JSON record of an
 * ONNX model, not any mine.json that happens to lie there (a label map, a config).
 */
const importedOnnx = (path: string): boolean => importedOnnxMeta(path) !== null;

/** The sidecar `stitchlab import` wrote beside an .onnx file, read once; null where there is none. */
function importedOnnxMeta(path: string): CheckpointMeta | null {
  if (!existsSync(sidecarPath(path))) return null;
  try {
    const meta = readJsonFile<CheckpointMeta>(sidecarPath(path), "a checkpoint's sidecar");
    return (meta as { arch?: unknown }).arch === ONNX_ARCH ? meta : null;
  } catch {
    return null;
  }
}

/** What weights made elsewhere show of themselves (foreignWeightsFacts). */
export interface ForeignWeightsFacts {
  /** The layout their keys follow, in words ("torchvision's resnet18 (BasicBlock blocks 2-2-2-2, 10 classes)"), or null. */
  looks: string | null;
  /** The zoo architecture named in the file's own metadata (a stitchlab safetensors file without its sidecar), or null. */
  recorded: string | null;
  /** The zoo architecture those keys fit (given, recorded, or recognised), or null. */
  arch: string | null;
  /** The side of the images, where the weights show it (a ViT's position embeddings); null where they do not (CNNs). */
  imageSize: number | null;
  /** The side a model built from them takes when none is given: a ResNet's by its stem (models/resnet.ts), else 32. */
  defaultImageSize: number;
}

/**
 * What the weights in a file made elsewhere show, for a message that asks for the rest all at once
 * (cli/source.ts requireModelSettings): what their keys look like, the architecture, and whether they
 * show the side of their images. Null when the file cannot be read as weights (loading it says why).
 */
export function foreignWeightsFacts(path: string, arch?: string): ForeignWeightsFacts | null {
  let owned: unknown;
  try {
    let recorded: string | null = null;
    let obj: unknown;
    if (path.endsWith(".safetensors")) {
      const file = loadSafetensors(path);
      owned = file.tensors;
      obj = file.tensors;
      recorded = file.metadata.arch && modelNames().includes(file.metadata.arch) ? file.metadata.arch : null;
    } else {
      owned = torchLoad(path);
      obj = owned;
    }
    const { stateDict } = unwrapStateDict(obj, path);
    const looks = recogniseStateDict(stateDict);
    const named = looks ? modelNames().find((n) => new RegExp(`(^|[^\\w])${n}([^\\w]|$)`).test(looks)) : undefined;
    const zoo = arch ?? recorded ?? named ?? null;
    const inferred = zoo ? inferOptions(zoo, stateDict) : {};
    const shown = typeof inferred.imageSize === "number" ? inferred.imageSize : null;
    return {
      looks,
      recorded,
      arch: zoo,
      imageSize: shown,
      defaultImageSize: shown ?? (inferred.stem === "imagenet" ? 224 : 32),
    };
  } catch {
    return null;
  } finally {
    if (owned !== undefined) torch.dispose(owned);
  }
}

/** What loading a source did, for the user: which wrapper was taken, which options were read from the weights. */
export interface LoadNotes {
  unwrapped: string[];
  inferred: ModelOptions;
  /** An ONNX graph's OnnxModel.batchNormNote, where it has one. */
  batchNorm?: string;
}

export interface LoadedCheckpoint {
  model: StitchableModel;
  meta: CheckpointMeta;
  notes: LoadNotes;
  /** The model's facts in one record (models/record.ts). */
  record: ModelRecord;
  /** The file the weights were read from (for a model named by hub, its file in the cache). */
  file: string;
}

/**
 * Rebuilds a zoo model from a source: a stitchlab checkpoint (its sidecar; the source's other
 * fields, when given, override), or weights made elsewhere (torch.save or safetensors; `arch`
 * required, wrappers unwrapped, shape options read from the weights), or a model named by hub
 * (hf-hub:..., torchvision:...: its file in the cache, downloaded first when it is not there, read
 * with the architecture, classes, input size and statistics the hub gives; models/hub.ts). A
 * mismatch says what the weights look like instead of listing every key.
 */
export function loadCheckpoint(source: ModelSourceLike): LoadedCheckpoint {
  const named = asModelSource(source).checkpoint;
  if (!isHubName(named)) return loadResolved(asModelSource(source));
  const src = resolveModelSource(source);
  try {
    return loadResolved(src);
  } catch (e) {
    throw new Error(`${named}: ${(e as Error).message}`);
  }
}

function loadResolved(src: ModelSource): LoadedCheckpoint {
  const path = src.checkpoint;
  if (!existsSync(path)) throw new Error(`checkpoint not found: ${path}`);
  if (isOnnxFile(path)) return loadOnnx(src);
  // Options that mean nothing to the architecture are refused before any weights are read.
  if (src.options) {
    const arch =
      src.arch ??
      (isStitchlabCheckpoint(path)
        ? readJsonFile<CheckpointMeta>(sidecarPath(path), "a checkpoint's sidecar").arch
        : undefined);
    if (arch) checkModelOptions(arch, src.options, path);
  }
  const notes: LoadNotes = { unwrapped: [], inferred: {} };
  let meta: CheckpointMeta | undefined;
  let sd: StateDict;
  let owned: unknown;
  const zoo = `the zoo has ${modelNames().join(", ")}`;
  if (isStitchlabCheckpoint(path)) {
    sd = loadSafetensors(path).tensors;
    owned = sd;
    const recorded = readJsonFile<CheckpointMeta>(sidecarPath(path), "a checkpoint's sidecar");
    meta = recorded;
    if (src.arch && src.arch !== recorded.arch) {
      torch.dispose(owned);
      throw new Error(`${path} is a stitchlab ${recorded.arch} checkpoint, not ${src.arch}: leave arch out`);
    }
  } else {
    if (path.endsWith(".safetensors")) {
      const file = loadSafetensors(path);
      ({ stateDict: sd, unwrapped: notes.unwrapped } = unwrapStateDict(file.tensors, path));
      owned = file.tensors;
      // A sidecar-less stitchlab file still names its architecture in the safetensors metadata.
      if (!src.arch && file.metadata.arch) {
        meta = { arch: file.metadata.arch, options: JSON.parse(file.metadata.options ?? "{}") };
      }
    } else {
      const obj = torchLoad(path);
      owned = obj;
      try {
        ({ stateDict: sd, unwrapped: notes.unwrapped } = unwrapStateDict(obj, path));
      } catch (e) {
        torch.dispose(owned); // e.g. a bare tensor: what was read is freed before the error goes up
        throw e;
      }
    }
    if (!meta) {
      if (!src.arch) {
        const looks = recogniseStateDict(sd);
        torch.dispose(owned);
        throw new Error(
          `${path} is not a stitchlab checkpoint: name the architecture its weights fit (arch: in an experiment file; --arch, --front-arch or --back-arch on the command line)${looks ? `; these keys look like ${looks}` : ""}; ${zoo}`,
        );
      }
      notes.inferred = inferOptions(src.arch, sd);
      meta = { arch: src.arch, options: {} };
    }
  }
  if (!meta) throw new Error(`${path}: no architecture`);
  const given = (src.options ?? {}) as ModelOptions;
  const options: ModelOptions = {
    ...meta.options,
    ...notes.inferred,
    ...given,
    ...(src.imageSize !== undefined ? { imageSize: src.imageSize } : {}),
  };
  for (const k of Object.keys(given)) delete (notes.inferred as Record<string, unknown>)[k];
  const normalization = resolveNormalization(src.normalization);
  meta = {
    ...meta,
    options,
    ...(normalization ? { normalization } : {}),
    ...(src.imageSize !== undefined ? { imageSize: src.imageSize } : {}),
  };
  let model: StitchableModel;
  try {
    checkModelOptions(meta.arch, options as Record<string, unknown>);
    model = createModel(meta.arch, options);
  } catch (e) {
    torch.dispose(owned);
    throw new Error(`${path}: ${(e as Error).message}`);
  }
  try {
    const why = describeMismatch(model, sd, given);
    if (why) throw new Error(`${path}: ${why}\n  (${zoo})`);
    model.loadStateDict(sd);
    const bad = firstNonFinite(model);
    if (bad)
      throw new Error(
        `${path}: ${bad} holds NaN or infinite values: a model with non-finite weights or running statistics gives meaningless scores`,
      );
    if (src.inputChannels !== undefined && src.inputChannels !== 3)
      throw new Error(
        `${path}: inputChannels ${src.inputChannels}: the zoo's models take 3-channel images (grey data are fed as 3 equal channels)`,
      );
  } catch (e) {
    model.dispose();
    throw e;
  } finally {
    torch.dispose(owned);
  }
  return { model, meta, notes, record: modelRecord(model, meta), file: path };
}

/** Whether a path names an ONNX model (by its extension, as onnxruntime and netron take them). */
export const isOnnxFile = (path: string): boolean => /\.onnx$/i.test(path);

/**
 * An ONNX graph as a model (models/onnx/model.ts): the graph says its architecture, input side and
 * classes; the source adds only the input statistics (and the side, where the graph leaves it open).
 */
function loadOnnx(src: ModelSource): LoadedCheckpoint {
  const path = src.checkpoint;
  if (src.arch !== undefined && src.arch !== ONNX_ARCH)
    throw new Error(`${path} is an ONNX model, which carries its own architecture: leave arch (${src.arch}) out`);
  if (src.options && Object.keys(src.options).length > 0)
    throw new Error(
      `${path} is an ONNX model: options (${Object.keys(src.options).join(", ")}) mean nothing to it; its graph fixes its shapes`,
    );
  if (src.inputChannels !== undefined && src.inputChannels !== 3)
    throw new Error(`${path}: inputChannels ${src.inputChannels}: stitchlab feeds 3-channel images`);
  // An imported graph (stitchlab import) has a sidecar: its statistics and dataset, unless the
  // source gives others. Read before the graph is.
  const recorded: Partial<CheckpointMeta> = importedOnnxMeta(path) ?? {};
  const model = new OnnxModel(path, src.imageSize !== undefined ? { imageSize: src.imageSize } : {});
  try {
    const bad = firstNonFinite(model);
    if (bad)
      throw new Error(
        `${path}: ${bad} holds NaN or infinite values: a model with non-finite weights gives meaningless scores`,
      );
  } catch (e) {
    model.dispose();
    throw e;
  }
  const normalization =
    resolveNormalization(src.normalization) ?? (recorded.normalization as Normalization | undefined);
  const meta: CheckpointMeta = {
    ...recorded,
    arch: ONNX_ARCH,
    options: onnxOptions(model),
    ...(normalization ? { normalization } : {}),
  };
  const notes = { unwrapped: [], inferred: {}, ...(model.batchNormNote ? { batchNorm: model.batchNormNote } : {}) };
  return { model, meta, notes, record: modelRecord(model, meta), file: path };
}

/** The first floating-point parameter or buffer of a model with a NaN or an infinity, or undefined. */
export function firstNonFinite(model: StitchableModel): string | undefined {
  for (const [name, t] of Object.entries(model.stateDict())) {
    if (!t.dtype.startsWith("float") && t.dtype !== "bfloat16") continue;
    if (!torch.tidy(() => (torch.call("isfinite", t) as torch.Tensor).all().item())) return name;
  }
  return undefined;
}

/**
 * A SHA-256 over a model's architecture and state dict (names, dtypes, shapes, bytes): what an
 * IRI set records to prove which front model made it, whatever file the model came from.
 */
export function modelFingerprint(model: StitchableModel): string {
  const h = createHash("sha256");
  h.update(`${model.arch}\n`);
  for (const [name, t] of Object.entries(model.stateDict())) {
    h.update(`${name}:${t.dtype}:[${t.shape}]\n`);
    const bytes = torch.tidy(() => {
      const a = t.detach().cpu().contiguous().toTypedArray();
      return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    });
    h.update(bytes);
  }
  return h.digest("hex");
}
