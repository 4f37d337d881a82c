// The two jobs of the method, from checkpoints on disk to results on disk, as the command line
// (and later the experiment planner) runs them:
//   runIris    an IRI set for (front checkpoint, point) over a training split (stitch/iriset.ts)
//   runStitch  train T between front and back at a point, standard or invariance-aware, score it
//              on the test set (clean, or marked as the stitching data are); writes
//              layer.safetensors, then scores.json (last: a run folder with scores.json is
//              complete; a failed run writes neither).
// Which data carry markers follows the reference's stitching configs (`backdoor: True` marks the
// training, init and validation sets): one `shortcut` marks the real training images, the IRIs'
// sources and the test set alike, and the result says which test data it was scored on.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import {
  applyShortcut,
  type Dataset,
  datasetSize,
  disposeDataset,
  loadDataset,
  type Normalization,
  normalizationFor,
  normalize,
  pixelScale,
  planDatasetMarkers,
  type ShortcutKind,
  type ShortcutOptions,
  standardAugment,
  subset,
} from "../data/index.js";
import {
  type AgreementResult,
  excessAgreement,
  linearCka,
  type WeightSpectrum,
  weightSpectrum,
} from "../metrics/index.js";
import {
  asModelSource,
  type CheckpointMeta,
  loadCheckpoint,
  type ModelSourceLike,
  modelFingerprint,
} from "../models/checkpoint.js";
import { checkInputSize, type StitchableModel } from "../models/stitchable.js";
import { inEvalMode } from "../nn/module.js";
import * as torch from "../torch/index.js";
import type { AdversarialConfig } from "../train/trainer.js";
import { evaluateFrontAlone, evaluateStitch } from "./evaluate.js";
import { IRI_DEFAULTS, type IriOptions } from "./iris.js";
import {
  checkIriSetFor,
  generateIriSet,
  type IriProgress,
  type IriSetInfo,
  loadIriSet,
  type ResidualSummary,
} from "./iriset.js";
import { STITCH_INITS, type StitchInit } from "./layer.js";
import { type ObjectiveWeights, parseObjective } from "./objectives.js";
import { ROBUST_STITCH_ATTACKS, robustStitchScores, type StitchRobustResult } from "./robust.js";
import { StitchedModel } from "./stitched.js";
import { type BnMode, defaultBnMode, type StitchTrainProgress, trainStitch } from "./train.js";

/** Where the images come from: a dataset's split, optionally marked with a shortcut, optionally only the first `limit`. */
export interface Source {
  dataset: string;
  root?: string;
  shortcut: ShortcutKind | null;
  limit: number | null;
  /** Image folders only: the side the images are resized to (default 32; ImageNet-100: 224). */
  imageSize?: number;
}

/** The seed of a split's markers: the same marked images wherever a split is marked. */
export const markerSeed = (split: "train" | "test"): number => (split === "train" ? 0 : 1);

/**
 * The images of a stitch or IRI job: the split, marked with the source's shortcut when it has one (seed 0
 * for the training split, 1 for the test split: the IRIs' sources and the stitching's real images are
 * the same marked images).
 */
export async function loadSource(src: Source, split: "train" | "test", limit = src.limit): Promise<Dataset> {
  const clean = await loadDataset(src.dataset, {
    root: src.root,
    split,
    limit: limit ?? undefined,
    imageSize: src.imageSize,
  });
  if (!src.shortcut) return clean;
  const marked = applyShortcut(clean, { kind: src.shortcut, seed: markerSeed(split) });
  disposeDataset(clean);
  return marked;
}

/** The dataset a checkpoint was trained on, unless the caller names one. */
function datasetOf(meta: CheckpointMeta, given: string | undefined, what: string): string {
  const d = given ?? meta.dataset;
  if (!d) throw new Error(`${what} checkpoint does not say which dataset it was trained on; pass --dataset`);
  return d;
}

/**
 * The statistics a model's inputs are normalised with: the ones it was trained with (recorded in
 * its checkpoint, or those of the dataset it names). A front from LS-ImageNet-10 and a back from
 * CIFAR-10 each get their own (PROTOCOL.md, "Which data carry markers", last point).
 */
export function inputNormalization(meta: CheckpointMeta, what: string): Normalization {
  const recorded = meta.normalization as Normalization | undefined;
  if (recorded && Array.isArray(recorded.mean) && Array.isArray(recorded.std)) return recorded;
  if (!meta.dataset)
    throw new Error(
      `${what} checkpoint records neither its input normalisation nor the dataset it was trained on: give its normalization (a dataset name such as cifar10 or imagenet, or {mean, std})`,
    );
  return normalizationFor(meta.dataset);
}

function loadModel(source: ModelSourceLike, device: string): { model: StitchableModel; meta: CheckpointMeta } {
  const loaded = loadCheckpoint(source);
  if (device !== "cpu") loaded.model.to(device);
  return loaded;
}

/** Two sources name the same model (the same file read the same way). */
const sameSource = (a: ModelSourceLike, b: ModelSourceLike): boolean =>
  JSON.stringify(asModelSource(a)) === JSON.stringify(asModelSource(b));

export interface IrisConfig {
  /** A stitchlab checkpoint's path, or a model source (models/checkpoint.ts). */
  front: ModelSourceLike;
  point: string;
  dataset?: string;
  root?: string;
  /** Image folders: the side images are resized to (default 32). */
  imageSize?: number;
  shortcut: ShortcutKind | null;
  limit: number | null;
  options: IriOptions;
  device: string;
}

export const IRIS_CONFIG_DEFAULTS: Omit<IrisConfig, "front" | "point"> = {
  shortcut: null,
  limit: null,
  options: IRI_DEFAULTS,
  device: "cpu",
};

/** Makes (or finishes, or finds finished) the IRI set of cfg in outDir. */
export async function runIris(
  cfg: IrisConfig,
  outDir: string,
  onProgress?: (p: IriProgress) => void,
): Promise<IriSetInfo> {
  const { model, meta } = loadModel(cfg.front, cfg.device);
  try {
    const dataset = datasetOf(meta, cfg.dataset, "the front");
    const images = await loadSource({ ...cfg, dataset }, "train");
    try {
      checkInputSize(model, images.images.shape, "the front");
      return await generateIriSet(
        model,
        images,
        outDir,
        {
          front: {
            arch: meta.arch,
            options: meta.options as Record<string, unknown>,
            fingerprint: modelFingerprint(model),
            checkpoint: asModelSource(cfg.front).checkpoint,
          },
          point: cfg.point,
          dataset,
          shortcut: cfg.shortcut,
          limit: cfg.limit,
          count: datasetSize(images),
          classes: images.classes,
          imageShape: images.images.shape.slice(1),
          normalization: inputNormalization(meta, "the front"),
          options: cfg.options,
        },
        { device: cfg.device, onProgress },
      );
    } finally {
      disposeDataset(images);
    }
  } finally {
    model.dispose();
  }
}

export type StitchMode = "standard" | "iris";
export const STITCH_MODES: readonly StitchMode[] = ["standard", "iris"];
/** How a mode may be written: its name, or "invariance-aware", the paper's name for iris mode. */
export const STITCH_MODE_NAMES = ["standard", "iris", "invariance-aware"] as const;
/** A mode's name as written (the alias resolved; anything else as it is, for the caller to check). */
export const stitchModeOf = <T extends string>(name: T): T | "iris" => (name === "invariance-aware" ? "iris" : name);

/**
 * How T is trained, one schema for experiment files' `stitch:` section and the `stitch` flags
 * (PROTOCOL's defaults in STITCH_CONFIG_DEFAULTS).
 */
export const stitchSettingsSchema = z
  .object({
    // Upper bounds catch typos; each is far above any paper setting.
    epochs: z
      .number()
      .int()
      .min(1)
      .max(10_000, "at most 10000 epochs (the paper stitches for 30)")
      .optional()
      .describe("default 30 (12 for image folders)"),
    batchSize: z.number().int().min(1).max(65_536, "at most 65536"),
    lr: z.number().positive().describe("Adam's learning rate"),
    weightDecay: z.number().min(0).describe("Adam's weight decay"),
    init: z.enum(STITCH_INITS).describe("lstsq (least squares on real images), random or identity"),
    initImages: z
      .number()
      .int()
      .min(1)
      .max(10_000_000, "at most 10^7")
      .describe("real images for the least-squares start"),
    ckaImages: z
      .number()
      .int()
      .min(0)
      .max(10_000_000, "at most 10^7")
      .describe("test images for linear CKA at the point (0: skip)"),
    seed: z
      .number()
      .int()
      .min(0)
      .max(2 ** 31 - 1, "at most 2^31 - 1")
      .describe("seed of the batch order and the least-squares draw"),
  })
  .strict();

export interface StitchConfig {
  /** Stitchlab checkpoints' paths, or model sources (models/checkpoint.ts). */
  front: ModelSourceLike;
  back: ModelSourceLike;
  frontPoint: string;
  /** Default: the front point (same-depth stitching). */
  backPoint?: string;
  /** "fula", "slm", or a weighted sum "hlm:1,fula:0.5". */
  objective: string;
  mode: StitchMode;
  /** The IRI set (iris mode). */
  iris?: string;
  /** Default: the back checkpoint's dataset. */
  dataset?: string;
  root?: string;
  /** Image folders: the side images are resized to (default 32; ImageNet-100: 224). */
  imageSize?: number;
  /** Shortcut markers on the real training and init images and on the test set (the IRI set must be made from the same marked images). */
  shortcut: ShortcutKind | null;
  /** Real training images: the first `limit` (standard mode's training set and the init pool). */
  limit: number | null;
  testLimit: number | null;
  /** Default: 30 (PROTOCOL, CIFAR), 12 for image folders (ImageNet-100). */
  epochs?: number;
  batchSize: number;
  lr: number;
  weightDecay: number;
  init: StitchInit;
  initImages: number;
  /** Default: "adapt" in standard mode, "eval" in iris mode (the reference's choices; stitch/train.ts). */
  bnMode?: BnMode;
  seed: number;
  /** Also score on the test set with class-consistent markers of this kind and with rolled ones. */
  excess: ShortcutKind | null;
  /** Test images for linear CKA between A and B at the point (0: skip). */
  ckaImages: number;
  device: string;
  /**
   * Adversarial stitching (standard mode): PGD examples of the stitched model on a fraction of
   * each batch (stitch/robust.ts). Absent: none (and absent from task keys).
   */
  adversarial?: AdversarialConfig;
  /** Score the stitched model on adversarial test images made against it. Absent: not done. */
  robustEval?: StitchRobustEval;
}

/** The robust evaluation of a stitched model: APGD-CE and APGD-DLR (or PGD) of `steps` iterations at `eps` (pixel units). */
export const stitchRobustEvalSchema = z
  .object({
    attack: z.enum(ROBUST_STITCH_ATTACKS).default("apgd"),
    eps: z
      .number()
      .positive()
      .max(1, "pixel units are in [0, 1]; did you mean 8/255?")
      .default(8 / 255),
    steps: z.number().int().min(1).max(10_000, "at most 10000").default(100),
  })
  .strict();
export type StitchRobustEval = z.infer<typeof stitchRobustEvalSchema>;

export const STITCH_CONFIG_DEFAULTS: Omit<StitchConfig, "front" | "back" | "frontPoint" | "objective" | "mode"> = {
  shortcut: null,
  limit: null,
  testLimit: null,
  batchSize: 128,
  lr: 1e-3,
  weightDecay: 1e-4,
  init: "lstsq",
  initImages: 500,
  seed: 0,
  excess: null,
  ckaImages: 500,
  device: "cpu",
};

export interface StitchResult {
  config: StitchConfig & { backPoint: string; epochs: number; bnMode: BnMode; objectiveWeights: ObjectiveWeights };
  /** Scores on the test set (metrics/agreement.ts documents each and its direction). */
  scores: AgreementResult;
  /** What the test set carried: "clean", or the shortcut kind its images are marked with. */
  testData: "clean" | ShortcutKind;
  /** Linear CKA between A and B at the point (larger = more similar), or null when skipped. */
  cka: number | null;
  /** T's weight: rank, relative rank (larger = T keeps more directions), condition number (smaller = better conditioned). */
  spectrum: Omit<WeightSpectrum, "singularValues"> & { singularValues: number[] };
  excess: { kind: ShortcutKind; marked: AgreementResult; rolled: AgreementResult; excessAgreement: number } | null;
  training: { epochLosses: number[]; initResidual: number | null; trainImages: number; seconds: number };
  iris: { dir: string; residuals: ResidualSummary } | null;
  /** Scores on adversarial test images made against the stitched model (config.robustEval), or null. */
  robust: StitchRobustResult | null;
  /**
   * A alone (its own head, no T) against B on the same test set: the "Front" end of the
   * reference's curves (evaluateFrontAlone); null when their classes differ.
   */
  frontAlone: AgreementResult | null;
  front: { arch: string; checkpoint: string; accuracies?: Record<string, number> };
  back: { arch: string; checkpoint: string; accuracies?: Record<string, number> };
}

function defaultEpochs(dataset: string): number {
  return dataset === "imagefolder" ? 12 : 30;
}

/** Linear CKA of A's and B's features at the points over the first n test images (each image a sample). */
function ckaAt(s: StitchedModel, test: Dataset, n: number, cfg: StitchConfig): number {
  const part = subset(
    test,
    Array.from({ length: Math.min(n, datasetSize(test)) }, (_, i) => i),
  );
  try {
    return inEvalMode(s.networks, () =>
      torch.tidy(() =>
        torch.noGrad(() => {
          const x = normalize(part.images.to(cfg.device), pixelScale(part.images.shape[1]));
          return linearCka(s.frontFeatures(x), s.back.forwardTo(s.backInput(x), s.backPoint));
        }),
      ),
    );
  } finally {
    disposeDataset(part);
  }
}

/** Trains and scores one stitch; writes outDir/layer.safetensors and then outDir/scores.json. */
export async function runStitch(
  cfg: StitchConfig,
  outDir: string,
  onProgress: (p: StitchTrainProgress) => void = () => {},
): Promise<StitchResult> {
  const weights = parseObjective(cfg.objective);
  if (cfg.adversarial && cfg.mode !== "standard")
    throw new Error("adversarial stitching trains T on PGD examples of real images: it is for standard mode");
  if (cfg.mode === "iris" && !cfg.iris)
    throw new Error("iris mode needs an IRI set (--iris DIR, made by `stitchlab iris`)");
  if (cfg.mode === "standard" && cfg.iris)
    throw new Error("--iris is for iris mode; standard mode trains on real images");
  const started = performance.now();
  const owned: Dataset[] = [];
  const bnMode: BnMode = cfg.bnMode ?? defaultBnMode(cfg.mode);
  // With "adapt", A's and the stitched model's copy of B's statistics change while B must stay as
  // it was: three separate networks, even when front and back are one checkpoint.
  const adapt = bnMode === "adapt";
  const loaded: { model: StitchableModel; meta: CheckpointMeta }[] = [];
  let layer: { dispose(): void } | undefined;
  const load = (source: ModelSourceLike) => {
    const m = loadModel(source, cfg.device);
    loaded.push(m);
    return m;
  };
  try {
    const front = load(cfg.front);
    const back = sameSource(cfg.back, cfg.front) && !adapt ? front : load(cfg.back);
    const tail = adapt ? load(cfg.back) : back;
    const dataset = datasetOf(back.meta, cfg.dataset, "the back");
    const backPoint = cfg.backPoint ?? cfg.frontPoint;
    const s = new StitchedModel(front.model, back.model, cfg.frontPoint, backPoint, {
      tail: tail.model,
      normalization: {
        front: inputNormalization(front.meta, "the front"),
        back: inputNormalization(back.meta, "the back"),
      },
    });
    layer = s.layer;
    if (cfg.device !== "cpu") s.layer.to(cfg.device);
    const epochs = cfg.epochs ?? defaultEpochs(dataset);
    const source = { dataset, root: cfg.root, imageSize: cfg.imageSize, shortcut: cfg.shortcut, limit: cfg.limit };

    // Check the IRI set before any work: made by this front, at this point, from these images.
    let irisInfo: StitchResult["iris"] = null;
    let train: Dataset;
    // The real images: clean, with their markers planned once (seed 0, as the IRIs' sources were
    // marked). The least-squares start paints them on its images; standard runs paint them on
    // each batch after augmentation, so a marker is never cropped or mirrored (and no marked copy
    // of the whole split is held).
    const clean = await loadSource({ ...source, shortcut: null }, "train");
    owned.push(clean);
    checkInputSize(front.model, clean.images.shape, "the front");
    checkInputSize(back.model, clean.images.shape, "the back");
    const markers = cfg.shortcut ? planDatasetMarkers(clean, { kind: cfg.shortcut, seed: markerSeed("train") }) : null;
    if (cfg.mode === "iris") {
      const dir = cfg.iris as string;
      const set = loadIriSet(dir);
      set.indices.dispose();
      owned.push(set.dataset);
      checkIriSetFor(set.info, { fingerprint: modelFingerprint(front.model), point: cfg.frontPoint, dataset }, dir);
      if ((set.info.shortcut ?? null) !== cfg.shortcut)
        throw new Error(
          `IRI set ${dir} was made from images with shortcut ${set.info.shortcut ?? "none"}, this run uses ${cfg.shortcut ?? "none"}`,
        );
      irisInfo = { dir, residuals: set.info.residuals };
      train = set.dataset;
    } else train = clean;
    // The test split is read once: scored as the stitching data are marked, and the source of the
    // excess sets below.
    const cleanTest = await loadSource({ ...source, shortcut: null, limit: cfg.testLimit }, "test");
    owned.push(cleanTest);
    const markTest = (opts: ShortcutOptions): Dataset => {
      const d = applyShortcut(cleanTest, opts);
      owned.push(d);
      return d;
    };
    const test = cfg.shortcut ? markTest({ kind: cfg.shortcut, seed: markerSeed("test") }) : cleanTest;
    // Every model normalises its own input (StitchedModel): batches are float pixels in [0, 1].
    const norm = pixelScale(test.images.shape[1]);

    // CKA compares A and B as they are: before training, since "adapt" moves A's statistics.
    const cka = cfg.ckaImages > 0 ? ckaAt(s, test, cfg.ckaImages, cfg) : null;
    // A alone, as it is: before training too, for the same reason.
    const evalOpts = { normalization: norm, device: cfg.device };
    const frontAlone = evaluateFrontAlone(s, test, evalOpts);
    const trained = trainStitch(
      s,
      train,
      clean,
      {
        objective: weights,
        normalization: norm,
        epochs,
        batchSize: cfg.batchSize,
        lr: cfg.lr,
        weightDecay: cfg.weightDecay,
        seed: cfg.seed,
        bnMode,
        init: cfg.init,
        initImages: cfg.initImages,
        augment: cfg.mode === "standard" ? standardAugment(train.images.shape[2]) : null,
        markers: cfg.mode === "standard" ? markers : null,
        initMarkers: markers,
        device: cfg.device,
        adversarial: cfg.adversarial ?? null,
      },
      onProgress,
    );
    const scores = evaluateStitch(s, test, evalOpts);
    let excess: StitchResult["excess"] = null;
    if (cfg.excess) {
      const kind = cfg.excess;
      // When the stitching data carry these markers, the marked set is the test set, already scored.
      const same = kind === cfg.shortcut;
      const marked = same ? test : markTest({ kind, seed: markerSeed("test") });
      // Rand markers carry no class to roll: their baseline is another draw of random markers, as
      // the reference's shuffled Rand set (dataloaders/shortcut_markers.py) holds no class link either.
      const rolled =
        kind === "rand" ? markTest({ kind, seed: 2 }) : markTest({ kind, seed: markerSeed("test"), rolled: true });
      const m = same ? scores : evaluateStitch(s, marked, evalOpts);
      const r = evaluateStitch(s, rolled, evalOpts);
      excess = { kind, marked: m, rolled: r, excessAgreement: excessAgreement(m, r) };
    }
    const robust = cfg.robustEval ? robustStitchScores(s, test, { ...cfg.robustEval, ...evalOpts }) : null;
    const spectrum = weightSpectrum(s.layer.weight);

    const result: StitchResult = {
      config: { ...cfg, backPoint, epochs, bnMode, objectiveWeights: weights },
      scores,
      testData: cfg.shortcut ?? "clean",
      cka,
      spectrum,
      excess,
      training: {
        epochLosses: trained.epochLosses,
        initResidual: trained.initResidual,
        trainImages: datasetSize(train),
        seconds: (performance.now() - started) / 1000,
      },
      iris: irisInfo,
      robust,
      frontAlone,
      front: {
        arch: front.meta.arch,
        checkpoint: asModelSource(cfg.front).checkpoint,
        accuracies: front.meta.accuracies,
      },
      back: { arch: back.meta.arch, checkpoint: asModelSource(cfg.back).checkpoint, accuracies: back.meta.accuracies },
    };
    mkdirSync(outDir, { recursive: true });
    torch.saveSafetensors(join(outDir, "layer.safetensors"), s.layer.stateDict(), {
      source: JSON.stringify(s.layer.source),
      target: JSON.stringify(s.layer.target),
    });
    torch.writeFileAtomic(join(outDir, "scores.json"), [`${JSON.stringify(result, null, 2)}\n`]);
    return result;
  } finally {
    // T is freed whichever way the run ends (a diverged loss, a bad IRI set, a full disk).
    layer?.dispose();
    for (const d of owned) disposeDataset(d);
    for (const m of loaded) m.model.dispose();
  }
}
