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
import {
  applyShortcut,
  type Dataset,
  datasetSize,
  disposeDataset,
  loadDataset,
  type MarkerPlan,
  markerDraws,
  type Normalization,
  pixelScale,
  planDatasetMarkers,
  type ShortcutKind,
  type ShortcutOptions,
  standardAugment,
} from "../data/index.js";
import { scoreMarkedAndRolled } from "../eval/markers.js";
import { writeFileAtomic } from "../io/files.js";
import { saveSafetensors } from "../io/safetensors.js";
import { type AgreementResult, excessAgreement, type WeightSpectrum, weightSpectrum } from "../metrics/index.js";
import {
  asModelSource,
  type CheckpointMeta,
  loadCheckpoint,
  type ModelSourceLike,
  modelFingerprint,
} from "../models/checkpoint.js";
import { type ModelRecord, requireNormalization } from "../models/record.js";
import { checkInputSize, pointShape, type StitchableModel } from "../models/stitchable.js";
import * as torch from "../torch/index.js";
import {
  backClassesProblem,
  type IrisConfig,
  type ObjectiveWeights,
  parseObjective,
  type StitchConfig,
} from "./config.js";
import { evaluateStitch, frontAndBack } from "./evaluate.js";
import {
  checkIriSetFor,
  generateIriSet,
  type IriProgress,
  type IriSetInfo,
  loadIriSet,
  type ResidualSummary,
} from "./iriset.js";
import { NoiseClusters } from "./noise.js";
import { robustStitchScores, type StitchRobustResult } from "./robust.js";
import { StitchedModel } from "./stitched.js";
import { recipeOf, type StitchTrainOptions, type StitchTrainProgress, trainStitch } from "./train.js";

export type { IrisConfig, StitchConfig, StitchMode } from "./config.js";

/** Where the images come from: a dataset's split, optionally marked with a shortcut, optionally only the first `limit`. */
export interface Source {
  dataset: string;
  root: string | null;
  shortcut: ShortcutKind | null;
  /** The markers' strength (data/shortcuts.ts markerCell). */
  markerScale: number;
  limit: number | null;
  /** Image folders only: the side the images are resized to (null: the dataset's own). */
  imageSize: number | null;
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
    root: src.root ?? undefined,
    split,
    limit: limit ?? undefined,
    imageSize: src.imageSize ?? undefined,
  });
  if (!src.shortcut) return clean;
  const marked = applyShortcut(clean, { kind: src.shortcut, seed: markerSeed(split), scale: src.markerScale });
  disposeDataset(clean);
  return marked;
}

function loadModel(
  source: ModelSourceLike,
  device: torch.Device,
): { model: StitchableModel; meta: CheckpointMeta; record: ModelRecord } {
  const loaded = loadCheckpoint(source);
  loaded.model.to(device);
  return loaded;
}

/** Two sources name the same model (the same file read the same way). */
const sameSource = (a: ModelSourceLike, b: ModelSourceLike): boolean =>
  JSON.stringify(asModelSource(a)) === JSON.stringify(asModelSource(b));

/** Makes (or finishes, or finds finished) the IRI set of cfg in outDir. */
export async function runIris(
  cfg: IrisConfig,
  outDir: string,
  onProgress?: (p: IriProgress) => void,
): Promise<IriSetInfo> {
  const { model, meta, record } = loadModel(cfg.front, cfg.device);
  try {
    const { dataset } = cfg;
    const images = await loadSource(cfg, "train");
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
          ...(cfg.shortcut ? { markerScale: cfg.markerScale } : {}),
          limit: cfg.limit,
          count: datasetSize(images),
          classes: images.classes,
          imageShape: images.images.shape.slice(1),
          normalization: requireNormalization(record, "the front"),
          options: cfg.options,
          ...(cfg.noiseClusters ? { labelsOnly: true as const } : {}),
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

export interface StitchResult {
  config: StitchConfig & { objectiveWeights: ObjectiveWeights };
  /** Scores on the test set (metrics/agreement.ts documents each and its direction). */
  scores: AgreementResult;
  /** What the test set carried: "clean", or the shortcut kind its images are marked with. */
  testData: "clean" | ShortcutKind;
  /** Linear CKA between A and B at the point (larger = more similar), or null when skipped. */
  cka: number | null;
  /** T's weight: rank, relative rank (larger = T keeps more directions), condition number (smaller = better conditioned). */
  spectrum: Omit<WeightSpectrum, "singularValues"> & { singularValues: number[] };
  excess: { kind: ShortcutKind; marked: AgreementResult; rolled: AgreementResult; excessAgreement: number } | null;
  /** threads: the thread count T was trained and scored with (not in any cache key: recorded so it is seen). */
  training: {
    epochLosses: number[];
    initResidual: number | null;
    trainImages: number;
    seconds: number;
    threads: number;
  };
  /** The IRI set (iris mode): its folder, residuals and A's own agreement on it (absent: set made before). */
  iris: { dir: string; residuals: ResidualSummary; frontAgreement?: number } | null;
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

type Loaded = ReturnType<typeof loadModel>;

/**
 * The stitched model of a stitching config on networks loaded by `load`: with batch-norm mode
 * "adapt", A's and the stitched model's copy of B's statistics change while B must stay as it was,
 * so A, B and that copy are three networks even when front and back are one checkpoint. The one
 * place this is decided (runStitch and the time estimate's probe, experiments/estimate.ts).
 */
export function stitchedModelOf(
  cfg: StitchConfig,
  load: (source: ModelSourceLike) => Loaded,
): { s: StitchedModel; front: Loaded; back: Loaded } {
  const adapt = cfg.bnMode === "adapt";
  const front = load(cfg.front);
  const back = sameSource(cfg.back, cfg.front) && !adapt ? front : load(cfg.back);
  const tail = adapt ? load(cfg.back) : back;
  // A null front of clustered noise: the front gives its point's shape, the back its classes.
  const point = cfg.noiseClusters ? front.model.stitchPoint(cfg.frontPoint) : null;
  const s = new StitchedModel(front.model, back.model, cfg.frontPoint, cfg.backPoint, {
    tail: tail.model,
    noise: point
      ? new NoiseClusters(pointShape(point, 1).slice(1), back.record.numClasses, cfg.seed, cfg.device)
      : null,
    normalization: {
      front: requireNormalization(front.record, "the front"),
      back: requireNormalization(back.record, "the back"),
    },
  });
  s.layer.to(cfg.device);
  return { s, front, back };
}

/**
 * trainStitch's options for a stitching config: the mode decides the data's treatment (standard
 * runs augment real images, unless the settings say augment: false, and paint markers drawn anew
 * each epoch; invariance-aware runs train on the IRIs as they are). Shared by runStitch and the
 * time estimate's probe.
 */
export function stitchTrainOptionsOf(
  cfg: StitchConfig,
  train: Dataset,
  clean: Dataset,
  normalization: Normalization,
  shortcut: ShortcutOptions | null,
  markers: MarkerPlan | null,
): StitchTrainOptions {
  return {
    objective: parseObjective(cfg.objective),
    normalization,
    epochs: cfg.epochs,
    batchSize: cfg.batchSize,
    ...recipeOf(cfg),
    seed: cfg.seed,
    bnMode: cfg.bnMode,
    init: cfg.init,
    initImages: cfg.initImages,
    augment: cfg.mode === "standard" && cfg.augment !== false ? standardAugment(train.images.shape[2]) : null,
    markers: cfg.mode === "standard" && shortcut ? markerDraws(clean, shortcut) : null,
    initMarkers: markers,
    device: cfg.device,
    adversarial: cfg.adversarial,
  };
}

/** The data of one stitch, read and checked before any training (stitchData). */
interface StitchData {
  /** The real training images, clean (their markers are painted per batch: stitchTrainOptionsOf). */
  clean: Dataset;
  /** What T trains on: the real images (standard) or the IRI set (invariance-aware). */
  train: Dataset;
  /** The test split, clean, and as it is scored (marked as the stitching data are). */
  cleanTest: Dataset;
  test: Dataset;
  iris: StitchResult["iris"];
  shortcut: ShortcutOptions | null;
  markers: MarkerPlan | null;
}

/**
 * The IRI set of an invariance-aware stitch, checked before any work: made by this front, at
 * this point, from these images, marked as this run's are.
 */
function checkedIriSet(
  cfg: StitchConfig,
  front: StitchableModel,
  owned: Dataset[],
): { set: Dataset; iris: StitchResult["iris"] } {
  const dir = cfg.iris as string;
  const set = loadIriSet(dir);
  set.indices.dispose();
  owned.push(set.dataset);
  checkIriSetFor(
    set.info,
    {
      fingerprint: modelFingerprint(front),
      point: cfg.frontPoint,
      dataset: cfg.dataset,
      labelsOnly: cfg.noiseClusters ?? false,
    },
    dir,
  );
  if ((set.info.shortcut ?? null) !== cfg.shortcut)
    throw new Error(
      `IRI set ${dir} was made from images with shortcut ${set.info.shortcut ?? "none"}, this run uses ${cfg.shortcut ?? "none"}`,
    );
  if (cfg.shortcut && (set.info.markerScale ?? 1) !== cfg.markerScale)
    throw new Error(
      `IRI set ${dir} was made from images with markers of scale ${set.info.markerScale ?? 1}, this run uses ${cfg.markerScale}`,
    );
  return {
    set: set.dataset,
    iris: {
      dir,
      residuals: set.info.residuals,
      ...(set.info.frontAgreement !== undefined ? { frontAgreement: set.info.frontAgreement } : {}),
    },
  };
}

/**
 * A stitch's data, loaded and checked: both models take the images, the back's classes fit them,
 * the IRI set fits. Every dataset read is pushed on `owned` (freed by the caller).
 */
async function stitchData(cfg: StitchConfig, front: Loaded, back: Loaded, owned: Dataset[]): Promise<StitchData> {
  const source = {
    dataset: cfg.dataset,
    root: cfg.root,
    imageSize: cfg.imageSize,
    shortcut: cfg.shortcut,
    markerScale: cfg.markerScale,
    limit: cfg.limit,
  };
  const scale = cfg.markerScale;
  // The real images: clean, with their markers. The least-squares start paints the markers the
  // IRIs' sources carry (seed 0, one draw); standard runs paint markers drawn anew each epoch
  // (the reference draws a place on every read), on each batch after augmentation, so a marker
  // is never cropped or mirrored (and no marked copy of the whole split is held).
  const clean = await loadSource({ ...source, shortcut: null }, "train");
  owned.push(clean);
  checkInputSize(front.model, clean.images.shape, "the front");
  checkInputSize(back.model, clean.images.shape, "the back");
  // Checked by the planner and the stitch command already where the data's classes are known
  // without reading it; this is the last word, before any training.
  const mismatch = backClassesProblem(back.record.numClasses, cfg.dataset, clean.classes.length);
  if (mismatch) throw new Error(`the back model (${asModelSource(cfg.back).checkpoint}) ${mismatch}`);
  const shortcut = cfg.shortcut ? { kind: cfg.shortcut, seed: markerSeed("train"), scale } : null;
  const markers = shortcut ? planDatasetMarkers(clean, shortcut) : null;
  const irisSet = cfg.mode === "iris" ? checkedIriSet(cfg, front.model, owned) : null;
  // The test split is read once: scored as the stitching data are marked, and the source of the
  // excess sets (scoreStitch).
  const cleanTest = await loadSource({ ...source, shortcut: null, limit: cfg.testLimit }, "test");
  owned.push(cleanTest);
  let test = cleanTest;
  if (cfg.shortcut) {
    test = applyShortcut(cleanTest, { kind: cfg.shortcut, seed: markerSeed("test"), scale });
    owned.push(test);
  }
  return { clean, train: irisSet?.set ?? clean, cleanTest, test, iris: irisSet?.iris ?? null, shortcut, markers };
}

/**
 * The trained stitch's scores on the test set, and, as the config asks, on marked and rolled
 * test images (excess agreement) and on adversarial ones; T's weight spectrum.
 */
function scoreStitch(
  s: StitchedModel,
  cfg: StitchConfig,
  data: StitchData,
  evalOpts: { normalization: Normalization; device: StitchConfig["device"] },
  backLogits: torch.Tensor,
): Pick<StitchResult, "scores" | "excess" | "robust" | "spectrum"> {
  const scores = evaluateStitch(s, data.test, { ...evalOpts, backLogits });
  let excess: StitchResult["excess"] = null;
  if (cfg.excess) {
    const kind = cfg.excess;
    // When the stitching data carry these markers, the marked set is the test set, already scored.
    // Rand markers' rolled set is another draw of them (seed 2): a baseline with no class link.
    const { marked, rolled } = scoreMarkedAndRolled(
      data.cleanTest,
      {
        kind,
        seed: markerSeed("test"),
        scale: cfg.markerScale,
        randSeed: 2,
        marked: kind === cfg.shortcut ? scores : undefined,
      },
      (d) => evaluateStitch(s, d, evalOpts),
    );
    excess = { kind, marked, rolled, excessAgreement: excessAgreement(marked, rolled) };
  }
  const robust = cfg.robustEval ? robustStitchScores(s, data.test, { ...cfg.robustEval, ...evalOpts }) : null;
  return { scores, excess, robust, spectrum: weightSpectrum(s.layer.weight) };
}

/** T's weights (layer.safetensors), then scores.json: last, so a folder with scores.json is complete. */
function writeStitch(outDir: string, s: StitchedModel, result: StitchResult): void {
  mkdirSync(outDir, { recursive: true });
  saveSafetensors(join(outDir, "layer.safetensors"), s.layer.stateDict(), {
    source: JSON.stringify(s.layer.source),
    target: JSON.stringify(s.layer.target),
  });
  writeFileAtomic(join(outDir, "scores.json"), [`${JSON.stringify(result, null, 2)}\n`]);
}

/**
 * Trains and scores one stitch; writes outDir/layer.safetensors and then outDir/scores.json. Load
 * and check (stitchedModelOf, stitchData), compute (CKA and A alone before training, trainStitch,
 * scoreStitch), write (writeStitch).
 */
export async function runStitch(
  cfg: StitchConfig,
  outDir: string,
  onProgress: (p: StitchTrainProgress) => void = () => {},
): Promise<StitchResult> {
  const started = performance.now();
  const owned: Dataset[] = [];
  const loaded: Loaded[] = [];
  let layer: { dispose(): void } | undefined;
  let noise: { dispose(): void } | null = null;
  let backLogits: torch.Tensor | undefined;
  const load = (source: ModelSourceLike) => {
    const m = loadModel(source, cfg.device);
    loaded.push(m);
    return m;
  };
  try {
    const { s, front, back } = stitchedModelOf(cfg, load);
    layer = s.layer;
    noise = s.noise;
    const data = await stitchData(cfg, front, back, owned);
    // Every model normalises its own input (StitchedModel): batches are float pixels in [0, 1].
    const evalOpts = { normalization: pixelScale(data.test.images.shape[1]), device: cfg.device };
    // CKA compares A and B as they are, and A alone is scored as it is: before training, since
    // "adapt" moves A's statistics. The same pass keeps B's test logits for the stitch's scores.
    const before = frontAndBack(s, data.test, { ...evalOpts, ckaImages: cfg.ckaImages });
    backLogits = before.backLogits;
    const options = stitchTrainOptionsOf(
      cfg,
      data.train,
      data.clean,
      evalOpts.normalization,
      data.shortcut,
      data.markers,
    );
    const trained = trainStitch(s, data.train, data.clean, options, onProgress);
    const scored = scoreStitch(s, cfg, data, evalOpts, backLogits);
    // scores.json's fields in the order they have always been written.
    const result: StitchResult = {
      config: { ...cfg, objectiveWeights: parseObjective(cfg.objective) },
      scores: scored.scores,
      testData: cfg.shortcut ?? "clean",
      cka: before.cka,
      spectrum: scored.spectrum,
      excess: scored.excess,
      training: {
        epochLosses: trained.epochLosses,
        initResidual: trained.initResidual,
        trainImages: datasetSize(data.train),
        seconds: (performance.now() - started) / 1000,
        threads: torch.getNumThreads(),
      },
      iris: data.iris,
      robust: scored.robust,
      frontAlone: before.frontAlone,
      front: {
        arch: front.meta.arch,
        checkpoint: asModelSource(cfg.front).checkpoint,
        accuracies: front.meta.accuracies,
      },
      back: { arch: back.meta.arch, checkpoint: asModelSource(cfg.back).checkpoint, accuracies: back.meta.accuracies },
    };
    writeStitch(outDir, s, result);
    return result;
  } finally {
    // T is freed whichever way the run ends (a diverged loss, a bad IRI set, a full disk).
    layer?.dispose();
    noise?.dispose();
    backLogits?.dispose();
    for (const d of owned) disposeDataset(d);
    for (const m of loaded) m.model.dispose();
  }
}
