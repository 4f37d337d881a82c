// The settings of base training, defined once: the schema of what a user may give (the `train`
// flags and an experiment file's model entry parse through it), the defaults (in the schema), and
// resolveTrainConfig, the one function that turns given settings into the fully resolved
// TrainConfig that the trainer runs and the cache key hashes (issue 24). Below it, nothing is
// defaulted or checked again.
//
// The recipe is the reference's: train_base.py and configs/baselines/*/*/*/*.yaml (SGD Nesterov,
// lr 0.1 for ResNets and 0.01 for VGG and ViTs, weight decay 1e-4, lr x0.1 at int(1/3) and
// int(2/3) of the epochs; PGD of 10 steps of 2/255 in 8/255 on half of each batch, no random start).
import { z } from "zod";
import { greyDataset, SHORTCUT_KINDS, type ShortcutKind } from "../data/index.js";
import {
  type AdversarialConfig,
  PGD_DEFAULTS,
  pgdRecipeSchema,
  ROBUST_EVAL_DEFAULTS,
  type RobustEvalConfig,
  resolveRobustEval,
  robustEvalSchema,
  seedSchema,
} from "../eval/config.js";
import { archRecord, type ModelOptions, modelNames } from "../models/registry.js";
import { STEP_SCHEDULE_FRACTIONS } from "../nn/schedule.js";
import { AUTOCAST_MODES, type AutocastMode, DEFAULT_DEVICE, type Device } from "../torch/index.js";

export const TRAIN_METHODS = ["supervised", "simclr"] as const;

/** SimCLR pre-training (train/simclr.ts); the reference's ss_epochs and simclr_temperature. */
export const simclrSchema = z
  .object({
    epochs: z
      .number()
      .int()
      .min(1)
      .max(10_000, "at most 10000 epochs")
      .optional()
      .describe("pre-training epochs (default: the model's epochs, as the reference)"),
    temperature: z.number().positive().default(0.5).describe("NT-Xent temperature (the paper: 0.5)"),
  })
  .strict();

/**
 * What a user gives for a base model, from `train`'s flags or an experiment file's model entry
 * (which adds its dataset); every field but the architecture has a default here.
 */
export const trainSettingsSchema = z
  .object({
    arch: z.enum(modelNames() as [string, ...string[]]).describe("zoo model (`stitchlab layers` lists them)"),
    // Upper bounds catch typos (1e12 epochs ran until killed); each is far above any paper setting.
    // 64 meant 46 billion parameters for ResNet-18 (issue 25); at 16 it has 2.9 billion, and
    // wide ResNets use 10. Whether a width fits this machine is train/memory.ts's check.
    width: z
      .number()
      .positive()
      .max(16, "at most 16 (ResNet-18 at 16 has 2.9 billion parameters)")
      .optional()
      .describe("width multiplier (CNNs)"),
    options: z
      .record(z.string(), z.unknown())
      .optional()
      .describe("other createModel options, e.g. {stem: imagenet} (YAML or JSON on the command line)"),
    seed: seedSchema.default(0).describe("seed of initialisation, order, augmentation and markers"),
    epochs: z
      .number()
      .int()
      .min(0)
      .max(10_000, "at most 10000 epochs (the paper trains 200 at most)")
      .default(200)
      .describe("epochs (the paper: 200; 0: the model at its initialisation, an untrained null front)"),
    lr: z
      .number()
      .positive()
      .max(100, "at most 100")
      .optional()
      .describe("SGD's learning rate (default: the architecture's, 0.1 for ResNets, 0.01 for VGG and ViTs)"),
    batchSize: z.number().int().min(1).max(65_536, "at most 65536").default(128).describe("batch size"),
    autocast: z
      .enum(AUTOCAST_MODES)
      .optional()
      .describe("mixed precision: bf16 runs forward and loss under bfloat16 autocast (default: float32)"),
    shortcut: z
      .enum(SHORTCUT_KINDS as unknown as ["pixel", "pixel-loc", "rand"])
      .nullable()
      .default(null)
      .describe("train with this pixel shortcut in the images"),
    markerAgreement: z
      .number()
      .min(0)
      .max(1)
      .default(1)
      .describe(
        "with a pixel or pixel-loc shortcut: the fraction of training images whose marker is their class's; the rest carry a class drawn at random (1: the protocol's shortcut; lower grades the front's reliance on it, as the grounding study does)",
      ),
    adversarial: pgdRecipeSchema.nullable().default(null).describe("Madry adversarial training (pixel units)"),
    robustEval: robustEvalSchema
      .omit({ eps: true })
      .extend({
        steps: z
          .number()
          .int()
          .min(0)
          .max(10_000, "at most 10000")
          .optional()
          .describe("iterations of each attack (0: no robust evaluation)"),
      })
      .strict()
      .optional()
      .describe(
        "final robust evaluation at the model's training radius (8/255 for clean models; the reference's settings: theirs): APGD-CE and APGD-DLR (default) or PGD; steps default 100 for adversarially trained models, 0 (none) for clean ones unless settings are named",
      ),
    greyStem: z
      .boolean()
      .optional()
      .describe(
        "start the stem's kernels equal across the colour channels, so a model of grey images has no untrained colour response (default: true on grey datasets, Fashion-MNIST and MNIST; docs/method.md, Grey data)",
      ),
    labels: z
      .enum(["true", "permuted"])
      .default("true")
      .describe(
        "the training labels: true, or permuted: shuffled across the training images once (seeded by the model's seed) and kept so every epoch, a task only memorisation learns (an another-task null front: docs/method.md)",
      ),
    method: z
      .enum(TRAIN_METHODS)
      .default("supervised")
      .describe("supervised, or simclr: SimCLR pre-training, then the classifier alone on the frozen backbone"),
    simclr: simclrSchema.optional().describe("SimCLR's epochs and temperature (method simclr)"),
  })
  .strict();
export type TrainSettings = z.infer<typeof trainSettingsSchema>;

/** The data a base model trains on (the flags, or the experiment's or the model's dataset). */
export interface TrainData {
  dataset: string;
  root: string | null;
  /** Image folders: the side images are resized to (null: the dataset's own). */
  imageSize: number | null;
  /** Only the first `limit` training images (and `testLimit` test images); null: all. */
  limit: number | null;
  testLimit: number | null;
  /** Shortcut markers' strength: their cell size times this (1: the protocol's; data/shortcuts.ts markerCell). */
  markerScale: number;
}

/** A base-training run, every setting resolved (resolveTrainConfig); the cache key hashes it. */
export interface TrainConfig extends TrainData {
  model: string;
  modelOptions: ModelOptions;
  shortcut: ShortcutKind | null;
  /** The fraction of training markers that agree with the label (data/shortcuts.ts); absent at 1, so earlier keys stand. */
  markerAgreement?: number;
  adversarial: AdversarialConfig | null;
  seed: number;
  epochs: number;
  batchSize: number;
  lr: number;
  momentum: number;
  nesterov: boolean;
  weightDecay: number;
  /** Fractions of training at which the lr is multiplied by lrDecay (nn/schedule.ts stepScheduleMilestones: floor). */
  milestones: number[];
  /** The lr's factor at each milestone (the reference's lr_decay, 0.1). */
  lrDecay: number;
  /**
   * The final robust evaluation on the test set (eval/evaluate.ts robustEvaluation): by default
   * at the adversarial radius (8/255 for clean models: docs/method.md, "Base models"); null: none.
   */
  robustEval: RobustEvalConfig | null;
  /** bf16: each step's forward and loss under bfloat16 autocast; null: float32 throughout. */
  autocast: AutocastMode | null;
  /** SimCLR pre-training first, then the classifier alone for `epochs`; null: supervised. */
  simclr: { epochs: number; temperature: number } | null;
  /** The stem starts colour-blind (nn/init.ts greyStem); in every config, true or false, so in every key. */
  greyStem: boolean;
  /** Labels shuffled across the training images (a null front); absent for true labels, so earlier keys stand. */
  labels?: "permuted";
  device: Device;
}

/**
 * The optimiser's fixed part of the base-training recipe (docs/method.md, "Base models"; not
 * settable: the paper's and the reference's).
 */
const SGD_RECIPE = {
  momentum: 0.9,
  nesterov: true,
  weightDecay: 1e-4,
  milestones: [...STEP_SCHEDULE_FRACTIONS],
  lrDecay: 0.1,
};

/**
 * Given settings (parsed by trainSettingsSchema) and data to the resolved config. Throws on
 * settings that mean nothing together, wherever they come from (flags or a file).
 */
export function resolveTrainConfig(s: TrainSettings, data: TrainData, device: Device = DEFAULT_DEVICE): TrainConfig {
  if (s.simclr && s.method !== "simclr") throw new Error("simclr settings are for method simclr");
  if (s.labels === "permuted" && (s.shortcut || s.method === "simclr"))
    throw new Error(
      "permuted labels make a front of another task on the clean images: it takes neither a shortcut (its markers would follow the shuffled labels) nor SimCLR",
    );
  if (s.markerAgreement < 1 && s.shortcut !== "pixel" && s.shortcut !== "pixel-loc")
    throw new Error(
      `markerAgreement ${s.markerAgreement} grades a pixel or pixel-loc shortcut; this model has ${s.shortcut ? `a ${s.shortcut} shortcut, whose markers carry no class` : "no shortcut"}`,
    );
  if (s.method === "simclr" && (s.adversarial || s.shortcut))
    throw new Error(
      "SimCLR pre-training takes neither adversarial training nor a shortcut (the paper's fronts have neither)",
    );
  const record = archRecord(s.arch);
  return {
    ...data,
    // The markers' strength matters only where there are markers: a clean model's key leaves it out.
    markerScale: s.shortcut ? data.markerScale : 1,
    model: s.arch,
    modelOptions: { ...(s.options as ModelOptions), ...(s.width !== undefined ? { width: s.width } : {}) },
    shortcut: s.shortcut,
    ...(s.markerAgreement < 1 ? { markerAgreement: s.markerAgreement } : {}),
    adversarial: s.adversarial,
    seed: s.seed,
    epochs: s.epochs,
    batchSize: s.batchSize,
    lr: s.lr ?? record.defaultLr,
    ...SGD_RECIPE,
    robustEval: resolveTrainRobustEval(s, data),
    autocast: s.autocast ?? null,
    simclr:
      s.method === "simclr"
        ? { epochs: s.simclr?.epochs ?? s.epochs, temperature: s.simclr?.temperature ?? simclrTemperature() }
        : null,
    greyStem: s.greyStem ?? greyDataset(data.dataset),
    ...(s.labels === "permuted" ? { labels: "permuted" as const } : {}),
    device,
  };
}

/**
 * A base model's final robust evaluation: adversarially trained models are evaluated with
 * AutoAttack's budget at their training radius, clean ones only when asked (steps, or named
 * settings); steps 0: none. PGD steps as the model's training attack did.
 */
function resolveTrainRobustEval(s: TrainSettings, data: TrainData): RobustEvalConfig | null {
  const given = s.robustEval ?? {};
  const wanted = given.steps !== undefined ? given.steps > 0 : Boolean(s.adversarial || given.settings);
  if (!wanted) return null;
  const { steps, ...rest } = given;
  return resolveRobustEval(
    { ...rest, ...(steps !== undefined ? { steps } : {}) },
    {
      imageSize: data.imageSize,
      eps: s.adversarial?.eps ?? ROBUST_EVAL_DEFAULTS.eps,
      pgdStep: () => s.adversarial?.step ?? PGD_DEFAULTS.step,
    },
  );
}

/** SimCLR's default temperature, read from its schema (the one place it is written). */
const simclrTemperature = (): number => simclrSchema.parse({}).temperature;

/**
 * A resolved config from settings as a program writes them (defaults filled by the schema, data
 * fields absent = null): resolveTrainConfig for callers in code and tests.
 */
export function trainConfig(
  settings: z.input<typeof trainSettingsSchema>,
  data: Partial<TrainData> & { dataset: string },
  device: Device = DEFAULT_DEVICE,
): TrainConfig {
  return resolveTrainConfig(
    trainSettingsSchema.parse(settings),
    { root: null, imageSize: null, limit: null, testLimit: null, markerScale: 1, ...data },
    device,
  );
}
