// The IRI settings (docs/method.md, "IRI generation"): the schema every place that takes them reads
// (experiment files' `iris:`, the `iris` command's flags, task specs), its type and defaults, the
// combinations it cannot refuse alone, the step cap, and the default step sizes. It is apart from
// the descent (stitch/iris.ts) so that the settings modules (stitch/config.ts) and the CLI read
// and validate IRI settings without loading the descent: it holds no tensor code.

import { z } from "zod";
import { fractional, PIXEL_UNITS } from "../eval/config.js";
import { AUTOCAST_MODES } from "../torch/index.js";

/** "sign": signed-gradient descent with a fixed step (the default); "adam": Adam with cosine decay. */
export const IRI_OPTIMIZERS = ["sign", "adam"] as const;
export type IriOptimizer = (typeof IRI_OPTIMIZERS)[number];
/** "uniform": uniform noise over the valid range (default); "gaussian": N(mean, std) per channel, clamped; "image": another image of the batch, drawn by the seed. */
export const IRI_STARTS = ["uniform", "gaussian", "image"] as const;
export type IriStart = (typeof IRI_STARTS)[number];

/**
 * The IRI settings, one schema for every place that takes them (experiment files' `iris:`, the
 * `iris` command's flags, task specs): the type, the validation and the JSON Schema follow from it.
 */
export const iriOptionsSchema = z
  .object({
    steps: z
      .number()
      .int()
      .min(1)
      .max(1_000_000, "at most 10^6")
      .describe("descent steps (of each start, with target)"),
    stepSize: fractional(z.number().positive().max(1, PIXEL_UNITS)).describe(
      "signed step in pixel units ([0, 1] images; 1/255 may be written so), optimizer sign; from 224 px the default is the reference's larger step (defaultIriStepSize)",
    ),
    optimizer: z.enum(IRI_OPTIMIZERS).describe("sign: signed-gradient steps; adam: Adam with cosine decay"),
    lr: z
      .number()
      .positive()
      .describe("Adam's learning rate in pixel units, decayed to 0 by a cosine (optimizer adam)"),
    start: z.enum(IRI_STARTS).describe("uniform noise, Gaussian noise, or another image of the batch"),
    ball: fractional(z.number().positive().max(1, PIXEL_UNITS))
      .nullable()
      .describe(
        "L-inf radius around the start, in pixel units (16/255 may be written so); null: only the valid range bounds x'",
      ),
    keepBest: z.boolean().describe("return each image's best iterate (lowest own residual) rather than the last"),
    target: z
      .number()
      .positive()
      .max(1)
      .optional()
      .describe(
        "tight by construction: an image's descent stops once its own residual is at most this, and an image above it after `steps` restarts from another start, its best iterate kept, up to maxSteps in all (needs keepBest; absent: every image runs `steps`, as the reference)",
      ),
    maxSteps: z
      .number()
      .int()
      .min(1)
      .max(1_000_000, "at most 10^6")
      .optional()
      .describe("with target: an image's descent steps over all its starts, at most (default: steps, no restart)"),
    batchSize: z.number().int().min(1).max(65_536, "at most 65536").describe("images per batch"),
    seed: z
      .number()
      .int()
      .min(0)
      .describe("seeds the starts; batch b uses a seed derived from (seed, b), so a resumed run draws the same"),
    autocast: z
      .enum(AUTOCAST_MODES)
      .nullable()
      .describe(
        "bf16: each step's forward and loss under bfloat16 autocast; targets and stored residuals stay float32 (null: float32)",
      ),
  })
  .strict();
export type IriOptions = z.infer<typeof iriOptionsSchema>;

/**
 * The combinations the schema alone cannot refuse (it stays a plain object so that settings can be
 * partial): a message naming the settings, or null.
 */
export function iriOptionsProblem(o: Pick<IriOptions, "steps" | "keepBest" | "target" | "maxSteps">): string | null {
  if (o.maxSteps !== undefined && o.target === undefined)
    return "maxSteps needs target (the residual at which an image stops; without it every image runs `steps` once)";
  if (o.target !== undefined && !o.keepBest)
    return "target needs keepBest: true (an image restarts from another start and keeps its best iterate over all of them)";
  if (o.maxSteps !== undefined && o.maxSteps < o.steps)
    return `maxSteps (${o.maxSteps}) is below steps (${o.steps}): it caps an image's steps over all its starts`;
  return null;
}

/** The most descent steps an image can have: `steps`, or with a target its cap over all starts (maxSteps, default steps). */
export const iriStepCap = (o: Pick<IriOptions, "steps" | "target" | "maxSteps">): number =>
  o.target === undefined ? o.steps : (o.maxSteps ?? o.steps);

/**
 * The method's defaults (docs/method.md, "IRI generation"): 200 signed steps of 1/255 from uniform
 * noise, batch 128, the last iterate.
 * An object beside the schema, not zod defaults on its keys, because the schema also reads partial
 * settings (an experiment file's iris: gives any subset, over compare's or the demo's recipe), and
 * a default inside it would fill keys the file left to the recipe. This is their one home: the
 * resolvers (stitch/config.ts), the flags' help (cli/schema-flags.ts) and the planner read it.
 */
export const IRI_DEFAULTS: IriOptions = {
  steps: 200,
  stepSize: 1 / 255,
  optimizer: "sign",
  lr: 0.1,
  start: "uniform",
  ball: null,
  keepBest: false,
  batchSize: 128,
  seed: 0,
  autocast: null,
};

/**
 * The signed step at 224 px, in pixel units. The reference's high-resolution configs step
 * 5 x 4.758/255 in ImageNet-normalised space (the high_resolution configs of the IRI runs,
 * iris_step_size 0.0933); times ImageNet's mean std of 0.226 that is about 5.4/255 in pixels.
 */
export const IRI_STEP_SIZE_224 = ((5 * 4.758) / 255) * 0.226;

/** The default signed step for images of this side: 1/255 at 32 px, IRI_STEP_SIZE_224 from 224 px. */
export const defaultIriStepSize = (imageSize: number): number => (imageSize >= 224 ? IRI_STEP_SIZE_224 : 1 / 255);
