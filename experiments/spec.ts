// The experiment file (YAML or JSON), validated with zod. One file names the dataset, the models
// (trained here, or checkpoints to load), the front/back pairs with their relation, the stitch
// points, objectives, modes and seeds, and the IRI and stitching settings; `scales` holds named
// overrides (`small` for a CPU, `paper` for the paper's settings) merged over the rest.
// Every problem is reported with its path in the file: `pairs[2].back: no model "clean-s9"`.
import { readFileSync } from "node:fs";
import { z } from "zod";
import { DATASET_NAMES } from "../data/index.js";
import { seedSchema } from "../eval/config.js";
import { parseYamlBounded, YamlTooDeepError } from "../io/yaml.js";
import { modelSourceSchema } from "../models/checkpoint.js";
import { modelOptionsIssue } from "../models/options.js";
import {
  irisSettingsSchema,
  STITCH_MODE_NAMES,
  shortcutSchema,
  stitchModeOf,
  stitchSettingsSchema,
} from "../stitch/config.js";
import { trainSettingsSchema } from "../train/config.js";
import { NULL_KINDS } from "./nulls.js";

const int = (min = 0) => z.number().int().min(min);
const shortcut = shortcutSchema;

/** An experiment's (or a model's) data; the commands' data flags are made from it (cli/parse.ts dataTable). */
export const datasetSchema = z
  .object({
    name: z.enum(DATASET_NAMES).describe("the dataset (imagefolder: train/ and val/ class folders under --root)"),
    root: z.string().optional().describe("where the files are (Fashion-MNIST defaults to Debian's)"),
    limit: int(1).optional().describe("first n training images only"),
    testLimit: int(1).optional().describe("first n test images only"),
    markerScale: int(1)
      .max(8, "at most 8")
      .default(1)
      .describe(
        "shortcut markers' strength: their cell size times this (1: the protocol's 4x4 px square at 32 px; 2: 8x8 px). Narrow, briefly trained models need 2 to rely on their marker at every seed (docs/experiments.md)",
      ),
    imageSize: int(1)
      .optional()
      .describe(
        "image folders: the side images are resized to (default 32, as LS-ImageNet-10; ImageNet-100: 224); Fashion-MNIST and MNIST: 32 (padded, the default) or 28 (unpadded)",
      ),
  })
  .strict();

// A model trained here: the training layer's settings (train/config.ts, defaults and bounds
// included), plus the dataset when it is not the experiment's.
const trainedModelSchema = trainSettingsSchema
  .extend({
    dataset: datasetSchema
      .optional()
      .describe("train on another dataset than the experiment's (e.g. a front from LS-ImageNet-10)"),
  })
  .strict()
  .superRefine((m, ctx) => {
    // An option the architecture does not take, or a value it cannot use (models/options.ts).
    const issue = m.options ? modelOptionsIssue(m.arch, m.options) : null;
    if (issue) ctx.addIssue({ code: "custom", path: ["options", issue.key], message: issue.message });
  });

// A model loaded from a file: a stitchlab checkpoint, or weights made elsewhere with their
// architecture, options and input statistics (the schema is the loader's: models/checkpoint.ts).
const loadedModelSchema = modelSourceSchema;

const pointsSchema = z.union([z.literal("all"), z.array(z.string()).min(1)]);

const modesSchema = z.array(z.enum(STITCH_MODE_NAMES).transform((m) => stitchModeOf(m) as "standard" | "iris")).min(1);

const pairSchema = z
  .object({
    front: z.string(),
    back: z.string(),
    relation: z.string().describe("what the pair is: identical, cross-seed, cross-bias, robust-vs-clean, ..."),
    points: pointsSchema.optional().describe("overrides the experiment's points for this pair"),
    modes: modesSchema.optional().describe("overrides the experiment's modes for this pair"),
    frontPoints: z
      .record(z.string(), z.string())
      .optional()
      .describe(
        "a front of another architecture: the front's stitch point for each of the pair's points, which are the back's (compare pairs them by relative depth); a point not listed is the front's of the same name",
      ),
    replicates: int(1)
      .max(1000, "at most 1000")
      .optional()
      .describe(
        "this pair's replicates (default: the experiment's); the identical control may take fewer, since its front is its back and its replicates differ only in IRI and stitching seeds",
      ),
    shortcut: shortcut
      .nullable()
      .optional()
      .describe(
        "mark this pair's stitching data (real training images, the IRIs' sources, the test set) with this shortcut, as the reference's cross-bias configs do; overrides stitch.shortcut (null: clean)",
      ),
    adversarial: stitchSettingsSchema.shape.adversarial
      .unwrap()
      .nullable()
      .optional()
      .describe(
        "this pair's adversarial stitching (standard runs), overriding stitch.adversarial; null: none, T on clean images (the reference's attack_ratio 0), so one file can hold a pair at attack ratios 0 and 1",
      ),
  })
  .strict();

// The IRI settings are the IRI layer's (stitch/config.ts), each with its default.
const irisSchema = irisSettingsSchema;

// How T is trained is the stitching layer's schema (stitch/config.ts; the seeds are the
// experiment's own), plus which data carry markers.
const stitchSchema = stitchSettingsSchema
  .omit({ seed: true })
  .extend({
    shortcut: shortcut
      .nullable()
      .default(null)
      .describe(
        "mark every pair's stitching data (real training images, the IRIs' sources and the test set) with this shortcut; a pair's own shortcut overrides it",
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
    modes: modesSchema.default(["standard", "iris"]).describe("standard and/or invariance-aware (also written iris)"),
    seeds: z.array(seedSchema).min(1).default([0]).describe("stitching seeds (batch order)"),
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
    nulls: z
      .union([
        z
          .array(z.enum(NULL_KINDS))
          .transform((kinds): { kinds: typeof kinds; modes?: ("standard" | "iris")[]; replicates?: number } => ({
            kinds,
          })),
        z
          .object({
            kinds: z.array(z.enum(NULL_KINDS)).min(1),
            modes: modesSchema.optional().describe("the null pairs' modes (default: the experiment's)"),
            replicates: int(1)
              .max(1000, "at most 1000")
              .optional()
              .describe("the null pairs' replicates (default: those of the pairs they stand beside)"),
          })
          .strict(),
      ])
      .default({ kinds: [] })
      .describe(
        "null fronts stitched into each pair's back at its points, to read every score against chance: untrained (the front's recipe at epoch 0), permuted (its recipe on labels shuffled across images); a list of kinds, or {kinds, modes, replicates}",
      ),
    iris: irisSchema.prefault({}),
    stitch: stitchSchema.prefault({}),
    scales: z
      .record(z.string(), z.record(z.string(), z.unknown()))
      .optional()
      .describe("named overrides: small, paper"),
  })
  .strict();

/** An experiment as parsed, with the name of the scale that was applied to it (none when the file has no scales). */
export type Experiment = z.infer<typeof experimentSchema> & {
  appliedScale?: string;
  /** How far `stitchlab demo --seed S` shifted every seed (absent: not shifted). */
  seedShift?: number;
};
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
    raw = parseYamlBounded(text);
  } catch (e) {
    const why = (e as Error).message.split("\n")[0];
    throw new ExperimentError(file, [e instanceof YamlTooDeepError ? why : `not valid YAML/JSON: ${why}`]);
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
      r.error.issues.flatMap((i) => issueLines(i, merged)),
    );
  return chosen ? { ...r.data, appliedScale: chosen } : r.data;
}

/** The value at a zod path in the parsed file (undefined where there is none). */
function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let v = root;
  for (const k of path) v = isObject(v) || Array.isArray(v) ? (v as Record<PropertyKey, unknown>)[k] : undefined;
  return v;
}

type Issue = z.core.$ZodIssue;

/**
 * An issue as lines `path: message`. A union that matched no alternative (zod's bare "Invalid
 * input") is reported as the alternative the value meant, with its own paths: a model entry is
 * loaded when it names a checkpoint and trained otherwise (so a string epochs is
 * `models.a.epochs`, not `models.a: Invalid input`); elsewhere, the alternative with the fewest
 * problems.
 */
function issueLines(issue: Issue, root: unknown): string[] {
  if (issue.code === "invalid_union" && issue.errors.length) {
    const value = valueAt(root, issue.path);
    const modelEntry = issue.path.length === 2 && issue.path[0] === "models" && issue.errors.length === 2;
    const branch = modelEntry
      ? issue.errors[isObject(value) && "checkpoint" in value ? 1 : 0]
      : issue.errors.reduce((a, b) => (b.length < a.length ? b : a));
    return branch.flatMap((sub) => issueLines({ ...sub, path: [...issue.path, ...sub.path] } as Issue, root));
  }
  const missing = /expected (.+), received undefined/.exec(issue.message);
  if (missing) return [`${formatPath(issue.path)}: missing (expected ${missing[1]})`];
  // A missing key of a fixed set of values: zod says "Invalid option", not what is missing.
  if (issue.code === "invalid_value" && valueAt(root, issue.path) === undefined)
    return [`${formatPath(issue.path)}: missing (expected one of ${issue.values.map(String).join(", ")})`];
  return [`${formatPath(issue.path)}: ${issue.message}`];
}

/**
 * The experiment with every seed of its study shifted by `by`: the models trained here, the IRI
 * starts and the stitching seeds (`stitchlab demo --seed S`). Another `by` is another draw of the
 * same study; the planner still refuses seeds that reach the replicates' stride.
 */
export function shiftSeeds(exp: Experiment, by: number): Experiment {
  if (!(Number.isInteger(by) && by >= 0)) throw new Error(`--seed must be a non-negative integer, not ${by}`);
  if (by === 0) return exp;
  const models = Object.fromEntries(
    Object.entries(exp.models).map(([name, m]) => [name, isLoaded(m) ? m : { ...m, seed: m.seed + by }]),
  );
  return {
    ...exp,
    models,
    seeds: exp.seeds.map((s) => s + by),
    iris: { ...exp.iris, seed: (exp.iris.seed ?? 0) + by },
    seedShift: by,
  };
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
