// The experiment file (YAML or JSON), validated with zod. One file names the dataset, the models
// (trained here, or checkpoints to load), the front/back pairs with their relation, the stitch
// points, objectives, modes and seeds, and the IRI and stitching settings; `scales` holds named
// overrides (`small` for a CPU, `paper` for the paper's settings) merged over the rest.
// Every problem is reported with its path in the file: `pairs[2].back: no model "clean-s9"`.
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { DATASET_NAMES, SHORTCUT_KINDS } from "../data/index.js";
import { modelSourceSchema } from "../models/checkpoint.js";
import { iriOptionsSchema } from "../stitch/iris.js";
import { STITCH_MODE_NAMES, stitchModeOf, stitchRobustEvalSchema, stitchSettingsSchema } from "../stitch/jobs.js";
import { BN_MODES } from "../stitch/train.js";
import { AUTOCAST_MODES } from "../torch/index.js";
import { adversarialSchema, simclrSchema, TRAIN_METHODS, trainSettingsSchema } from "../train/trainer.js";

const int = (min = 0) => z.number().int().min(min);
const shortcut = z.enum(SHORTCUT_KINDS as unknown as ["pixel", "pixel-loc", "rand"]);
const autocast = z.enum(AUTOCAST_MODES);

const datasetSchema = z
  .object({
    name: z.enum(DATASET_NAMES),
    root: z.string().optional().describe("where the files are (Fashion-MNIST defaults to Debian's)"),
    limit: int(1).optional().describe("first n training images only"),
    testLimit: int(1).optional().describe("first n test images only"),
    imageSize: int(1)
      .optional()
      .describe("image folders: the side images are resized to (default 32, as LS-ImageNet-10; ImageNet-100: 224)"),
  })
  .strict();

const trainedModelSchema = z
  .object({
    arch: z.string().describe("zoo model: resnet18, vgg16_bn, vit_tiny_patch4_32, vit_base_patch16_224"),
    // The training settings' own schema (train/trainer.ts), bounds included.
    width: trainSettingsSchema.shape.width,
    options: z.record(z.string(), z.unknown()).optional().describe("other createModel options"),
    seed: trainSettingsSchema.shape.seed.default(0),
    epochs: trainSettingsSchema.shape.epochs,
    lr: trainSettingsSchema.shape.lr.optional(),
    batchSize: trainSettingsSchema.shape.batchSize.optional(),
    autocast: autocast
      .optional()
      .describe("mixed precision: bf16 runs forward and loss under bfloat16 autocast (default: float32)"),
    shortcut: shortcut.nullable().default(null).describe("train with this pixel shortcut in the images"),
    dataset: datasetSchema
      .optional()
      .describe("train on another dataset than the experiment's (e.g. a front from LS-ImageNet-10)"),
    robustEval: z
      .object({ attack: z.enum(["apgd", "pgd"]).optional(), steps: int().optional() })
      .strict()
      .optional()
      .describe(
        "robust evaluation of an adversarially trained model: APGD-CE and APGD-DLR (default) or PGD, 100 iterations each by default",
      ),
    adversarial: adversarialSchema.nullable().default(null).describe("Madry adversarial training (pixel units)"),
    method: z
      .enum(TRAIN_METHODS)
      .default("supervised")
      .describe("supervised, or simclr: SimCLR pre-training, then the classifier alone on the frozen backbone"),
    simclr: simclrSchema.optional().describe("SimCLR's epochs and temperature (method simclr)"),
  })
  .strict();

// A model loaded from a file: a stitchlab checkpoint, or weights made elsewhere with their
// architecture, options and input statistics (the schema is the loader's: models/checkpoint.ts).
const loadedModelSchema = modelSourceSchema;

const pointsSchema = z.union([z.literal("all"), z.array(z.string()).min(1)]);

const pairSchema = z
  .object({
    front: z.string(),
    back: z.string(),
    relation: z.string().describe("what the pair is: identical, cross-seed, cross-bias, robust-vs-clean, ..."),
    points: pointsSchema.optional().describe("overrides the experiment's points for this pair"),
    shortcut: shortcut
      .nullable()
      .optional()
      .describe(
        "mark this pair's stitching data (real training images, the IRIs' sources, the test set) with this shortcut, as the reference's cross-bias configs do; overrides stitch.shortcut (null: clean)",
      ),
  })
  .strict();

// The IRI settings are the IRI layer's schema (stitch/iris.ts), each optional, plus how many.
const irisSchema = iriOptionsSchema
  .partial()
  .extend({
    limit: int(1).nullable().default(null).describe("IRIs per (front, point): the first n training images"),
  })
  .strict();

// How T is trained is the stitching layer's schema (stitch/jobs.ts), each optional (the seeds
// are the experiment's own), plus which data and batch-norm modes.
const stitchSchema = stitchSettingsSchema
  .omit({ seed: true })
  .partial()
  .extend({
    limit: int(1).nullable().default(null).describe("real training images for standard mode and the init pool"),
    shortcut: shortcut
      .nullable()
      .default(null)
      .describe(
        "mark every pair's stitching data (real training images, the IRIs' sources and the test set) with this shortcut; a pair's own shortcut overrides it",
      ),
    adversarial: adversarialSchema
      .optional()
      .describe(
        "adversarial stitching: T trained on PGD examples of the stitched model (standard runs; the reference's robust: mandry with attack_ratio as fraction)",
      ),
    robustEval: stitchRobustEvalSchema
      .optional()
      .describe(
        "score each stitched model on adversarial test images made against it: APGD-CE and APGD-DLR (default) or PGD; robust_accuracy and robust_agreement_prob in results.csv",
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

export const experimentSchema = z
  .object({
    name: z.string().min(1),
    description: z.string().optional(),
    dataset: datasetSchema,
    models: z.record(z.string(), z.union([trainedModelSchema, loadedModelSchema])),
    pairs: z.array(pairSchema).min(1),
    points: pointsSchema.default("all"),
    objectives: z.array(z.string()).min(1).default(["slm", "fula"]).describe("hlm, slm, dm, fula, or weighted sums"),
    modes: z
      .array(z.enum(STITCH_MODE_NAMES).transform((m) => stitchModeOf(m) as "standard" | "iris"))
      .min(1)
      .default(["standard", "iris"])
      .describe("standard and/or invariance-aware (also written iris)"),
    seeds: z
      .array(int().max(2 ** 31 - 1, "at most 2^31 - 1"))
      .min(1)
      .default([0])
      .describe("stitching seeds (batch order)"),
    replicates: int(1)
      .max(1000, "at most 1000")
      .default(1)
      .describe(
        "replicates: each trains its own front models (seed + 1000 r), makes its own IRI sets and stitches with its own seed; scores are reported as means with 95% intervals",
      ),
    replicateBack: z
      .boolean()
      .default(false)
      .describe(
        "also train a back model per replicate (default false: one back model shared by every replicate, as the reference's curves average three fronts against one back)",
      ),
    excess: z
      .union([z.boolean(), shortcut])
      .nullable()
      .default(null)
      .describe(
        "also score on test sets with class-consistent markers and with rolled ones (excess agreement): a marker kind, or true for each pair's own shortcut",
      ),
    iris: irisSchema.default({ limit: null }),
    stitch: stitchSchema.default({ limit: null, shortcut: null }),
    scales: z
      .record(z.string(), z.record(z.string(), z.unknown()))
      .optional()
      .describe("named overrides: small, paper"),
  })
  .strict();

/** An experiment as parsed, with the name of the scale that was applied to it (none when the file has no scales). */
export type Experiment = z.infer<typeof experimentSchema> & { appliedScale?: string };
export type TrainedModelSpec = z.infer<typeof trainedModelSchema>;
export type LoadedModelSpec = z.infer<typeof loadedModelSchema>;
export type ModelSpec = TrainedModelSpec | LoadedModelSpec;
export const isLoaded = (m: ModelSpec): m is LoadedModelSpec => "checkpoint" in m;

/** The JSON Schema of experiment files, for editors (`stitchlab schema`). */
export function experimentJsonSchema(): unknown {
  return z.toJSONSchema(experimentSchema, { io: "input" });
}

/** `pairs[2].back` from a zod path. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const p of path) out += typeof p === "number" ? `[${p}]` : out ? `.${String(p)}` : String(p);
  return out || "(top level)";
}

export class ExperimentError extends Error {
  constructor(
    readonly file: string,
    readonly problems: string[],
  ) {
    super(`${file}: ${problems.length} problem${problems.length > 1 ? "s" : ""}:\n  ${problems.join("\n  ")}`);
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Deep merge for scale overrides: objects merge key by key, anything else replaces. */
export function merge(base: unknown, over: unknown): unknown {
  if (!isObject(base) || !isObject(over)) return over;
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(over)) out[k] = merge(base[k], v);
  return out;
}

/** Parses text (YAML, of which JSON is a subset), applies the scale, validates the shape. */
export function parseExperiment(text: string, file: string, scale?: string): Experiment {
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (e) {
    throw new ExperimentError(file, [`not valid YAML/JSON: ${(e as Error).message.split("\n")[0]}`]);
  }
  if (!isObject(raw)) throw new ExperimentError(file, ["expected a mapping at the top level"]);
  const scales = isObject(raw.scales) ? raw.scales : {};
  const names = Object.keys(scales);
  const chosen = scale ?? (names.includes("small") ? "small" : names[0]);
  if (scale !== undefined && !names.includes(scale))
    throw new ExperimentError(file, [
      `scales: no scale "${scale}"${names.length ? `; it has ${names.join(", ")}` : " (the file defines none)"}`,
    ]);
  const merged = chosen ? merge(raw, scales[chosen]) : raw;
  const r = experimentSchema.safeParse(merged);
  if (!r.success)
    throw new ExperimentError(
      file,
      r.error.issues.map((i) => {
        const missing = /expected (.+), received undefined/.exec(i.message);
        return `${formatPath(i.path)}: ${missing ? `missing (expected ${missing[1]})` : i.message}`;
      }),
    );
  return chosen ? { ...r.data, appliedScale: chosen } : r.data;
}

export function readExperiment(file: string, scale?: string): Experiment {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new Error(
      `cannot read experiment file ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
    );
  }
  return parseExperiment(text, file, scale);
}
