// The settings of the two jobs of the method, defined once (issue 24): what a user may give for
// an IRI set and for a stitch (the `iris` and `stitch` flags and an experiment file's `iris:` and
// `stitch:` sections parse through these schemas), their defaults (docs/method.md's, in the schemas),
// and resolveIrisConfig / resolveStitchConfig, the one pair of functions that turn given settings
// into the fully resolved configs that the jobs run and the cache keys hash. Below them nothing
// is defaulted or checked again.
//
// The jobs import this module, never the other way (issue 38): the frozen networks' batch-norm
// modes, T's starts and the objectives' names and spelling are defined here, and training T
// (train.ts), the stitched model (stitched.ts) and the losses (objectives.ts) take them from here.
// The one module of stitch/ it reads is the IRI settings' (iri-options.ts), which holds settings
// only: it loads none of the jobs it configures.
import { z } from "zod";
import { SHORTCUT_KINDS, type ShortcutKind } from "../data/index.js";
import {
  type AdversarialConfig,
  fractional,
  pgdRecipeSchema,
  ROBUST_EVAL_DEFAULTS,
  type RobustEvalConfig,
  resolveRobustEval,
  robustEvalSchema,
  seedSchema,
} from "../eval/config.js";
import type { ModelSourceLike } from "../models/checkpoint.js";
import { STEP_SCHEDULE_FRACTIONS } from "../nn/schedule.js";
import { DEFAULT_DEVICE, type Device } from "../torch/index.js";
import {
  defaultIriStepSize,
  IRI_DEFAULTS,
  type IriOptions,
  iriOptionsProblem,
  iriOptionsSchema,
} from "./iri-options.js";

export const shortcutSchema = z.enum(SHORTCUT_KINDS as unknown as ["pixel", "pixel-loc", "rand"]);

export type StitchMode = "standard" | "iris";
export const STITCH_MODES: readonly StitchMode[] = ["standard", "iris"];
/** How a mode may be written: its name, or "invariance-aware", the paper's name for iris mode. */
export const STITCH_MODE_NAMES = ["standard", "iris", "invariance-aware"] as const;
/** A mode's name as written (the alias resolved; anything else as it is, for the caller to check). */
export const stitchModeOf = <T extends string>(name: T): T | "iris" => (name === "invariance-aware" ? "iris" : name);
// A mode in a reader's words: stitch/modes.ts (a leaf the report reads without libtorch).
export { stitchModeWords } from "./modes.js";

/**
 * Epochs of stitching when none are given: 30 (CIFAR and other 32 px sets), 12 for image folders
 * (ImageNet-100) (docs/method.md, "Training defaults").
 */
export const defaultStitchEpochs = (dataset: string): number => (dataset === "imagefolder" ? 12 : 30);

/**
 * How the frozen networks' batch norm behaves while T trains (the reference's `bn_running_stats`,
 * training/stitching/trainer_pc.py and models/model_utils.py get_end_hooked_activations):
 * - "adapt" (the reference's standard runs): the stitched model runs in train mode and its forward
 *   pass updates the running statistics (momentum 0.1) of A's batch norm and of B's after the
 *   point (the stitched model's own copy of B, `tail`); B's pass that gives the targets uses batch
 *   statistics and updates nothing. Scoring then runs the stitched model in eval mode with the
 *   adapted statistics against B untouched.
 * - "batch": batch statistics everywhere, nothing updated.
 * - "eval" (the reference's invariance-aware runs): running statistics, nothing updated.
 * Recorded in results.
 */
export const BN_MODES = ["adapt", "batch", "eval"] as const;
export type BnMode = (typeof BN_MODES)[number];

/**
 * The frozen networks' batch norm when none is given: the reference's (bn_running_stats) "adapt"
 * in standard runs, "eval" in invariance-aware ones (docs/method.md, "Standard versus invariance-aware").
 */
export const defaultBnMode = (mode: StitchMode): BnMode => (mode === "standard" ? "adapt" : "eval");

/** T's starts (stitch/layer.ts): least squares on real images, random, or the identity. */
export const STITCH_INITS = ["lstsq", "random", "identity"] as const;
export type StitchInit = (typeof STITCH_INITS)[number];

/** The objectives T is trained with (stitch/objectives.ts computes them), and their weights. */
export const OBJECTIVES = ["hlm", "slm", "dm", "fula"] as const;
export type Objective = (typeof OBJECTIVES)[number];
export type ObjectiveWeights = Partial<Record<Objective, number>>;

/** Parses "fula", "FuLA", "hlm+slm" or "hlm:1,fula:0.5" into weights (names in any case). */
export function parseObjective(spec: string): ObjectiveWeights {
  const w: ObjectiveWeights = {};
  for (const part of spec.split(/[+,]/)) {
    const [raw, weight] = part.trim().split(":");
    const name = raw?.toLowerCase() ?? "";
    if (!(OBJECTIVES as readonly string[]).includes(name))
      throw new Error(`unknown objective '${name}'; objectives: ${OBJECTIVES.join(", ")} (weighted: hlm:1,fula:0.5)`);
    const v = weight === undefined ? 1 : Number(weight);
    if (!Number.isFinite(v) || v < 0)
      throw new Error(`objective weight '${weight}' of ${name} is not a non-negative number`);
    w[name as Objective] = v;
  }
  return w;
}

/**
 * The one spelling of a set of weights, in OBJECTIVES' order: "slm" for SLM alone at weight 1,
 * else "hlm:1,fula:0.5". Task keys use it, so "slm", "SLM" and "slm:1" are one task.
 */
export function formatObjective(w: ObjectiveWeights): string {
  const parts = OBJECTIVES.filter((o) => (w[o] ?? 0) > 0).map((o) => [o, w[o] as number] as const);
  if (parts.length === 1 && parts[0]?.[1] === 1) return parts[0][0];
  return parts.map(([o, v]) => `${o}:${v}`).join(",");
}

/** T's optimisers: Adam (the reference's configs all use it; docs/method.md, "Training defaults"). */
export const STITCH_OPTIMIZERS = ["adam"] as const;
const adamBeta = z.number().min(0).lt(1, "below 1");

/** How many of the training images a job takes: the first n, or null for all. */
const imageCount = z.number().int().min(1).nullable().default(null);

/** Adversarial stitching's PGD: base training's recipe, on whole batches (the reference's attack_ratio 1). */
const stitchAdversarialSchema = pgdRecipeSchema.extend({
  fraction: pgdRecipeSchema.shape.fraction
    .unwrap()
    .default(1)
    .describe("share of each batch replaced by adversarial examples (the reference's attack_ratio)"),
});
export const STITCH_ADVERSARIAL_DEFAULTS: AdversarialConfig = stitchAdversarialSchema.parse({});

/**
 * How T is trained, one schema for experiment files' `stitch:` section and the `stitch` flags,
 * with the method's defaults (docs/method.md, "Training defaults"): least-squares start from 500
 * real images, Adam lr 1e-3, weight decay 1e-4, batch 128, 30 epochs (12 for image folders), lr
 * x0.1 at 1/3 and 2/3 of them.
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
      .describe("epochs of training T (default: 30; 12 for image folders)"),
    batchSize: z.number().int().min(1).max(65_536, "at most 65536").default(128).describe("batch size"),
    // The recipe (stitch/train.ts runs it; every value in the resolved config, so in the key:
    // a change to one is never served a cache entry made with another). The reference's
    // configs: optimizer adam, lr 0.001, wd 1e-4, lr_decay 0.1 at int(1/3) and int(2/3) of the
    // epochs (train_stithching.py, training/schedulers.py step_scheduler); Adam's betas and
    // epsilon are PyTorch's defaults, which it keeps.
    optimizer: z.enum(STITCH_OPTIMIZERS).default("adam").describe("T's optimiser: adam (the reference's)"),
    lr: z.number().positive().default(1e-3).describe("Adam's learning rate"),
    weightDecay: z.number().min(0).default(1e-4).describe("Adam's weight decay (L2, added to the gradient)"),
    betas: z
      .tuple([adamBeta, adamBeta])
      .default([0.9, 0.999])
      .describe("Adam's betas (PyTorch's default, the reference's)"),
    adamEps: z.number().positive().max(1).default(1e-8).describe("Adam's epsilon (PyTorch's default, the reference's)"),
    lrDecay: z
      .number()
      .positive()
      .max(1)
      .default(0.1)
      .describe("the lr's factor at each milestone (the reference's lr_decay)"),
    milestones: z
      .array(fractional(z.number().min(0).max(1)))
      .max(100, "at most 100")
      .default([...STEP_SCHEDULE_FRACTIONS])
      .describe(
        "fractions of training at which the lr is multiplied by lrDecay, at floor(f epochs) as the reference's int()",
      ),
    init: z.enum(STITCH_INITS).default("lstsq").describe("lstsq (least squares on real images), random or identity"),
    initImages: z
      .number()
      .int()
      .min(1)
      .max(10_000_000, "at most 10^7")
      .default(500)
      .describe("real images for the least-squares start"),
    ckaImages: z
      .number()
      .int()
      .min(0)
      .max(10_000_000, "at most 10^7")
      .default(500)
      .describe("test images for linear CKA at the point (0: skip)"),
    seed: seedSchema.default(0).describe("seed of the batch order and the least-squares draw"),
    limit: imageCount.describe(
      "real training images for standard mode and the init pool: the first n (null, or absent: all)",
    ),
    adversarial: stitchAdversarialSchema
      .optional()
      .describe(
        "adversarial stitching: T trained on PGD examples of the stitched model (standard runs; the reference's robust: mandry with attack_ratio as fraction, default 1)",
      ),
    robustEval: robustEvalSchema
      .optional()
      .describe(
        "score each stitched model on adversarial test images made against it: APGD-CE and APGD-DLR (default) or PGD, AutoAttack's budget or the reference's settings; robust_accuracy and robust_agreement_prob in results.csv",
      ),
    // docs/method.md, "Training defaults": standard runs augment the real images as base training
    // does (the zoo's and stitchlab's own training: random crop with pad 4 and flip at 32 px,
    // random resized crop and flip at 224 px). A model trained elsewhere without augmentation sees other images there:
    // batch norm's `adapt` re-estimates its statistics on them, and B stitched with itself lost
    // 7% agreement (a ResNet trained in PyTorch on plain Fashion-MNIST, exported to ONNX: 0.926;
    // 0.9997 with its statistics kept). false follows such a base training.
    augment: z
      .boolean()
      .optional()
      .describe(
        "standard runs augment T's real training images as base training does (crop and flip): false where the models were trained without augmentation (default: true; IRIs are never augmented)",
      ),
    bnMode: z
      .object({ standard: z.enum(BN_MODES).optional(), iris: z.enum(BN_MODES).optional() })
      .strict()
      .optional()
      .describe(
        "frozen networks' batch norm per mode: adapt, batch or eval (default: adapt for standard, eval for iris)",
      ),
  })
  .strict();
export type StitchSettings = z.infer<typeof stitchSettingsSchema>;

/** A stitch's data: which dataset's splits, where, marked how (resolved: no field absent). */
export interface StitchData {
  dataset: string;
  root: string | null;
  /** Image folders: the side images are resized to; null: the dataset's own (32 px for image folders). */
  imageSize: number | null;
  /** Shortcut markers on the real training and init images and on the test set (the IRI set must come from the same marked images). */
  shortcut: ShortcutKind | null;
  /** The markers' strength: their cell size times this (1: the protocol's; data/shortcuts.ts markerCell). */
  markerScale: number;
  testLimit: number | null;
  /** Also score on the test set with class-consistent markers of this kind and with rolled ones. */
  excess: ShortcutKind | null;
}

/** One stitch, every setting resolved (resolveStitchConfig): what runStitch runs and a stitch task's key hashes. */
export interface StitchConfig extends StitchData {
  /** Stitchlab checkpoints' paths, or model sources (models/checkpoint.ts). */
  front: ModelSourceLike;
  back: ModelSourceLike;
  frontPoint: string;
  backPoint: string;
  /** One spelling per set of weights ("slm", "hlm:1,fula:0.5"): "SLM" and "slm:1" share a key. */
  objective: string;
  mode: StitchMode;
  /** The IRI set (iris mode), else null. */
  iris: string | null;
  /** Real training images: the first `limit` (standard mode's training set and the init pool); null: all. */
  limit: number | null;
  epochs: number;
  batchSize: number;
  /** The recipe: Adam, its lr, weight decay, betas and epsilon, lr x lrDecay at each milestone (fractions of the epochs). */
  optimizer: (typeof STITCH_OPTIMIZERS)[number];
  lr: number;
  weightDecay: number;
  betas: [number, number];
  adamEps: number;
  lrDecay: number;
  milestones: number[];
  init: (typeof STITCH_INITS)[number];
  initImages: number;
  bnMode: BnMode;
  seed: number;
  /** Test images for linear CKA between A and B at the point (0: skip). */
  ckaImages: number;
  /** Adversarial stitching (standard mode): PGD examples of the stitched model on a fraction of each batch (stitch/robust.ts). */
  adversarial: AdversarialConfig | null;
  /** Score the stitched model on adversarial test images made against it. */
  robustEval: RobustEvalConfig | null;
  device: Device;
  /**
   * Clustered noise in the front's place (stitch/noise.ts: the labels-only sender, the "noise" null
   * front); in iris mode its IRI set is the sender's (their starts). Present only when set, so that
   * every other stitch keeps its key.
   */
  noiseClusters?: true;
  /**
   * Standard mode's real training images not augmented (stitch settings' augment: false, for
   * models trained without augmentation). Present only when set, so that every other stitch
   * keeps its key; never in an invariance-aware stitch's (IRIs are never augmented).
   */
  augment?: false;
}

/** What a stitch is, beside its settings: the models, points, objective, mode and IRI set. */
export interface StitchWhat {
  front: ModelSourceLike;
  back: ModelSourceLike;
  frontPoint: string;
  /** Default: the front point (same-depth stitching). */
  backPoint?: string;
  objective: string;
  mode: StitchMode;
  iris?: string | null;
  /** The front's features replaced by clustered noise of its point's shape (a null front). */
  noiseClusters?: boolean;
}

/**
 * Given settings (parsed by stitchSettingsSchema) to the resolved config. Throws on settings that
 * mean nothing together, wherever they come from (flags or a file), before any work.
 */
export function resolveStitchConfig(
  what: StitchWhat,
  s: StitchSettings,
  data: StitchData,
  device: Device = DEFAULT_DEVICE,
): StitchConfig {
  const iris = what.iris ?? null;
  if (s.adversarial && what.mode !== "standard")
    throw new Error("adversarial stitching trains T on PGD examples of real images: it is for standard mode");
  if (what.mode === "iris" && !iris)
    throw new Error("iris mode needs an IRI set (--iris DIR, made by `stitchlab iris`)");
  if (what.mode === "standard" && iris) throw new Error("--iris is for iris mode; standard mode trains on real images");
  if (what.noiseClusters && (s.adversarial || s.robustEval))
    throw new Error(
      "a noise-cluster front is stitched without adversarial stitching or attacks: its features do not depend on the image, so there is no gradient to the input",
    );
  return {
    ...data,
    // The markers' strength matters only where data are marked: unmarked stitches share keys.
    markerScale: data.shortcut || data.excess ? data.markerScale : 1,
    front: what.front,
    back: what.back,
    frontPoint: what.frontPoint,
    backPoint: what.backPoint ?? what.frontPoint,
    objective: formatObjective(parseObjective(what.objective)),
    mode: what.mode,
    iris,
    limit: s.limit,
    epochs: s.epochs ?? defaultStitchEpochs(data.dataset),
    batchSize: s.batchSize,
    optimizer: s.optimizer,
    lr: s.lr,
    weightDecay: s.weightDecay,
    betas: s.betas,
    adamEps: s.adamEps,
    lrDecay: s.lrDecay,
    milestones: s.milestones,
    init: s.init,
    initImages: s.initImages,
    bnMode: s.bnMode?.[what.mode] ?? defaultBnMode(what.mode),
    seed: s.seed,
    ckaImages: s.ckaImages,
    adversarial: s.adversarial ?? null,
    // The stitched model's attacks: the method's 8/255 (docs/method.md, "Base models") unless
    // given, PGD's step eps / 4.
    robustEval: s.robustEval
      ? resolveRobustEval(s.robustEval, {
          imageSize: data.imageSize,
          eps: ROBUST_EVAL_DEFAULTS.eps,
          pgdStep: (eps) => eps / 4,
        })
      : null,
    device,
    ...(what.noiseClusters ? { noiseClusters: true as const } : {}),
    ...(what.mode === "standard" && s.augment === false ? { augment: false as const } : {}),
  };
}

/** The IRI settings a user gives (`iris` flags, an experiment file's `iris:`): the IRI layer's schema, each with its default. */
export const irisSettingsSchema = iriOptionsSchema
  .partial()
  .extend({
    limit: imageCount.describe("IRIs per (front, point): the first n training images (null: all)"),
  })
  .strict();
export type IrisSettings = z.infer<typeof irisSettingsSchema>;

/** One IRI set, every setting resolved (resolveIrisConfig): what runIris runs and an iris task's key hashes. */
export interface IrisConfig {
  /** A stitchlab checkpoint's path, or a model source (models/checkpoint.ts). */
  front: ModelSourceLike;
  point: string;
  dataset: string;
  root: string | null;
  imageSize: number | null;
  shortcut: ShortcutKind | null;
  markerScale: number;
  limit: number | null;
  options: IriOptions;
  device: Device;
  /**
   * The labels-only sender in the front's place (stitch/noise.ts): the set holds its IRIs, which
   * are their starts (stitch/iris.ts labelsOnlyIriBatch). Present only when set, so that every
   * other set keeps its key.
   */
  noiseClusters?: true;
}

/**
 * Given IRI settings to the resolved config. The signed step's default follows the image side: at
 * 224 px the reference steps larger (stitch/iri-options.ts defaultIriStepSize).
 */
export function resolveIrisConfig(
  what: { front: ModelSourceLike; point: string; noiseClusters?: boolean },
  s: IrisSettings,
  data: {
    dataset: string;
    root: string | null;
    imageSize: number | null;
    shortcut: ShortcutKind | null;
    markerScale: number;
  },
  device: Device = DEFAULT_DEVICE,
): IrisConfig {
  const { limit, ...given } = s;
  const options: IriOptions = {
    ...IRI_DEFAULTS,
    ...(data.imageSize !== null ? { stepSize: defaultIriStepSize(data.imageSize) } : {}),
    ...Object.fromEntries(Object.entries(given).filter(([, v]) => v !== undefined)),
  };
  const problem = iriOptionsProblem(options);
  if (problem) throw new Error(`IRI settings: ${problem}`);
  const { dataset, root, imageSize, shortcut } = data;
  // The markers' strength matters only where the sources are marked.
  const markerScale = shortcut ? data.markerScale : 1;
  const { noiseClusters, ...model } = what;
  return {
    ...model,
    dataset,
    root,
    imageSize,
    shortcut,
    markerScale,
    limit,
    options,
    device,
    ...(noiseClusters ? { noiseClusters: true as const } : {}),
  };
}

/**
 * A resolved config from settings as a program writes them (defaults filled by the schema, data
 * fields absent = null): resolveStitchConfig for callers in code and tests.
 */
export function stitchConfig(
  what: StitchWhat,
  settings: z.input<typeof stitchSettingsSchema>,
  data: Partial<StitchData> & { dataset: string },
  device: Device = DEFAULT_DEVICE,
): StitchConfig {
  return resolveStitchConfig(
    what,
    stitchSettingsSchema.parse(settings),
    { root: null, imageSize: null, shortcut: null, markerScale: 1, testLimit: null, excess: null, ...data },
    device,
  );
}

/**
 * Why a back model cannot be scored on a dataset, or null: its head must have the dataset's
 * classes, since B's predictions are scored against the test labels (accuracy, error
 * consistency) and HLM trains on them. A 100-class back on a 10-class set otherwise "agrees" at
 * 0.6 with accuracy 0 and exit 0, and a 5-class one fails after training on an out-of-range
 * label. The front needs no such check: only its features up to the point are used (A alone is
 * scored only when its classes are B's). Null counts are not known yet and pass.
 */
export function backClassesProblem(back: number | null, dataset: string, datasetClasses: number | null): string | null {
  if (back === null || datasetClasses === null || back === datasetClasses) return null;
  return `has ${back} classes, but the dataset ${dataset} has ${datasetClasses}: the back model's predictions are scored against the dataset's labels (and HLM trains on them), so its head must have the dataset's ${datasetClasses} classes; give a back model trained on this dataset`;
}
