// eval/ holds what base training (train/) and stitching (stitch/) both use to attack and to score
// a model, in a folder of its own below both jobs (issue 38: it lived in train/, and stitching
// imported base training's modules to reach it): the evaluation loop (batches.ts), clean and robust
// evaluation (evaluate.ts), PGD and the adversarial batch of Madry training (pgd.ts), APGD
// (apgd.ts), the scores on marked and rolled test images (markers.ts), and here the settings both
// jobs share. It imports data/, nn/ and torch/ only, so either job may import it.
//
// The shared settings, defined once: numbers in pixel units as a user writes them ("8/255":
// parseFraction, fractional), seeds, Madry's PGD recipe (adversarial training of base models and
// adversarial stitching) and the robust evaluation (of base models and of stitched ones), with
// resolveRobustEval, the one way from given robust-evaluation settings to the numbers the attacks
// run. train/config.ts and stitch/config.ts build their schemas from these.
import { z } from "zod";

export const PIXEL_UNITS = "pixel units are in [0, 1]; did you mean 8/255?";

/**
 * A number as a user writes it, on the command line or in an experiment file: "0.0314", or a
 * fraction such as "8/255" (pixel units are read that way, and 0.0313725 is not 8/255: a preset
 * that wrote it trained another model, under another key, than `--eps 8/255`). The one parser of
 * such text: fractional, the schemas' pixel-unit type, calls it, so flags made from the schemas
 * (cli/schema-flags.ts) and files read it alike.
 */
export function parseFraction(text: string): number {
  const m = text.match(/^\s*([\d.]+)\s*\/\s*([\d.]+)\s*$/);
  if (!m) {
    const n = Number(text);
    if (text.trim() === "" || !Number.isFinite(n))
      throw new Error(`expected a number or a fraction such as 8/255, not '${text}'`);
    return n;
  }
  const q = Number(m[1]) / Number(m[2]);
  if (!Number.isFinite(q)) throw new Error(`expected a finite fraction such as 8/255, not '${text}'`);
  return q;
}

/**
 * A schema of a number that a file may write as a fraction (pixel units, "8/255"; the lr's
 * milestones, "1/3"): a number, or text that parseFraction reads, checked by `number` (its
 * bounds). Experiment files take what the flags take.
 */
export function fractional<T extends z.ZodType<number, number>>(number: T) {
  return z
    .union([z.number(), z.string()])
    .transform((v, ctx) => {
      if (typeof v === "number") return v;
      try {
        return parseFraction(v);
      } catch (e) {
        ctx.addIssue({ code: "custom", message: (e as Error).message });
        return z.NEVER;
      }
    })
    .pipe(number);
}

/**
 * The L-inf radius on CIFAR-sized images, pixel units: of adversarial training and robust evaluation
 * (docs/method.md, "Base models").
 */
export const CIFAR_EPS = 8 / 255;

/** A seed: what libtorch's manual_seed and our generators take. */
export const seedSchema = z
  .number()
  .int()
  .min(0)
  .max(2 ** 31 - 1, "at most 2^31 - 1");

/**
 * Madry's PGD recipe (L-inf, pixel units), one schema for adversarial training and adversarial
 * stitching, with the method's CIFAR defaults (docs/method.md, "Base models"): 10 steps of 2/255
 * in 8/255 from x itself. `fraction` is the share of each batch made adversarial: one half in base
 * training; stitching's default is its own (stitch/config.ts: the reference's attack_ratio 1).
 */
export const pgdRecipeSchema = z
  .object({
    eps: fractional(z.number().positive().max(1, PIXEL_UNITS))
      .default(CIFAR_EPS)
      .describe("L-inf radius in pixel units (the paper's: 8/255 on CIFAR)"),
    step: fractional(z.number().positive().max(1, PIXEL_UNITS))
      .default(2 / 255)
      .describe("PGD step in pixel units"),
    steps: z.number().int().min(1).max(10_000, "at most 10000").default(10).describe("PGD iterations"),
    fraction: z
      .number()
      .min(0)
      .max(1)
      .default(0.5)
      .describe("share of each batch replaced by adversarial examples (the paper's: one half)"),
    randomStart: z
      .boolean()
      .default(false)
      .describe("start each attack from a random point in the ball (Madry) instead of from x (the reference: false)"),
  })
  .strict();
export type AdversarialConfig = z.infer<typeof pgdRecipeSchema>;
/** The recipe's defaults, from its schema. */
export const PGD_DEFAULTS: AdversarialConfig = pgdRecipeSchema.parse({});
/** Madry adversarial training: the PGD recipe. */
export const adversarialSchema = pgdRecipeSchema;

/**
 * The attacks of a robust evaluation, of base models and of stitched ones: "apgd" runs APGD-CE and
 * APGD-DLR (eval/apgd.ts), "pgd" runs eval/pgd.ts's PGD.
 */
export const ROBUST_EVAL_ATTACKS = ["apgd", "pgd"] as const;
export type RobustEvalAttack = (typeof ROBUST_EVAL_ATTACKS)[number];
/** AutoAttack's budget: 100 iterations of each attack, at the method's CIFAR radius (CIFAR_EPS). */
export const ROBUST_EVAL_DEFAULTS = { attack: "apgd", eps: CIFAR_EPS, steps: 100 } as const;

/**
 * Named robust-evaluation settings, each resolved into concrete numbers (resolveRobustEval):
 * - "autoattack" (the default): AutoAttack's APGD budget, 100 iterations of each attack with a
 *   first step of 2 eps (Croce and Hein 2020), at the radius of the context (the model's own
 *   training radius, else the method's 8/255);
 * - "reference": what the reference passes to ART (external/attacks/attack.py get_attacks, run by
 *   evaluation/base/evaluator.py and evaluation/stitching/evaluator.py eval_robustness): ART's
 *   AutoProjectedGradientDescent with the cross-entropy and then the difference-of-logits-ratio
 *   loss, combined per image by ART's AutoAttack, untargeted L-inf, max_iter 20, one random start
 *   (nb_random_init 1), and at 32 px eps 8/255 with eps_step 2/255, which ART takes as the first
 *   step size (its eta before any halving); at 224 px eps 4 x 4.758/255 and eps_step 4.758/255 in
 *   ImageNet-normalised units, here in pixel units (REFERENCE_ROBUST_EVAL_224).
 */
export const ROBUST_EVAL_SETTINGS = ["autoattack", "reference"] as const;
export type RobustEvalSettingsName = (typeof ROBUST_EVAL_SETTINGS)[number];

/**
 * The reference's robust evaluation at 224 px in pixel units: its eps_step is 4.758/255 in
 * ImageNet-normalised space (1/255 over ImageNet's std), taken back to pixels with the mean of
 * ImageNet's std, 0.226 (as the IRI step at 224 px, stitch/iri-options.ts IRI_STEP_SIZE_224): about
 * 1.08/255, and its eps four of them, about 4.3/255.
 */
export const REFERENCE_ROBUST_EVAL_224 = {
  eps: ((4 * 4.758) / 255) * 0.226,
  stepSize: (4.758 / 255) * 0.226,
} as const;

/** The reference's robust evaluation (external/attacks/attack.py) for images of this side. */
export function referenceRobustEval(imageSize: number | null): RobustEvalConfig {
  const big = (imageSize ?? 32) >= 224;
  return {
    attack: "apgd",
    steps: 20,
    eps: big ? REFERENCE_ROBUST_EVAL_224.eps : CIFAR_EPS,
    stepSize: big ? REFERENCE_ROBUST_EVAL_224.stepSize : 2 / 255,
  };
}

/**
 * A robust evaluation as a user gives it (a `robustEval:` section, the --robust-eval-* flags):
 * named settings, and any number that overrides theirs. Nothing here is defaulted: the numbers
 * depend on the settings and the context, and resolveRobustEval fills them in.
 */
export const robustEvalSchema = z
  .object({
    settings: z
      .enum(ROBUST_EVAL_SETTINGS)
      .optional()
      .describe(
        "autoattack (default: 100 iterations of each attack, first step 2 eps) or reference (the reference's ART set-up: 20 iterations, first step 2/255, eps 8/255 at 32 px)",
      ),
    attack: z
      .enum(ROBUST_EVAL_ATTACKS)
      .optional()
      .describe("apgd (APGD-CE and APGD-DLR, worst case per image; the default) or pgd"),
    eps: fractional(z.number().positive().max(1, PIXEL_UNITS)).optional().describe("L-inf radius in pixel units"),
    steps: z.number().int().min(1).max(10_000, "at most 10000").optional().describe("iterations of each attack"),
    stepSize: fractional(z.number().positive().max(1, PIXEL_UNITS))
      .optional()
      .describe(
        "APGD's first step (halved on its schedule; default 2 eps, the reference's 2/255) or PGD's step, in pixel units",
      ),
  })
  .strict();
export type RobustEvalSettings = z.infer<typeof robustEvalSchema>;

/** A robust evaluation, every number resolved (resolveRobustEval): what the attacks run and a key hashes. */
export interface RobustEvalConfig {
  attack: RobustEvalAttack;
  /** L-inf radius in pixel units. */
  eps: number;
  /** Iterations of each attack. */
  steps: number;
  /** APGD's first step (then halved on its schedule), or PGD's step, in pixel units. */
  stepSize: number;
}

/**
 * Given robust-evaluation settings to concrete numbers: the named settings' numbers, each
 * overridden by one given. `context` is what the named settings leave to the caller: the radius
 * (autoattack: a base model's own training radius, else the method's 8/255), PGD's step for that
 * radius, and the images' side (the reference's numbers at 224 px differ).
 */
export function resolveRobustEval(
  given: RobustEvalSettings,
  context: { imageSize: number | null; eps: number; pgdStep: (eps: number) => number },
): RobustEvalConfig {
  const named =
    given.settings === "reference"
      ? referenceRobustEval(context.imageSize)
      : { attack: ROBUST_EVAL_DEFAULTS.attack, eps: context.eps, steps: ROBUST_EVAL_DEFAULTS.steps, stepSize: null };
  const attack = given.attack ?? named.attack;
  const eps = given.eps ?? named.eps;
  const stepSize = given.stepSize ?? named.stepSize ?? (attack === "apgd" ? apgdFirstStep(eps) : context.pgdStep(eps));
  return { attack, eps, steps: given.steps ?? named.steps, stepSize };
}

/** APGD's first step at a radius when no settings name one: 2 eps (Croce and Hein 2020, as AutoAttack runs it). */
export const apgdFirstStep = (eps: number): number => 2 * eps;

/**
 * Whether a robust evaluation's attack starts at a random point in the ball rather than at x: a
 * rule of the attack, not a setting, so RobustEvalConfig (hashed into task keys) holds none.
 * APGD starts at a random point, as AutoAttack's APGD does (Croce and Hein 2020) and as the
 * reference's ART set-up does (nb_random_init 1: external/attacks/attack.py). PGD starts at x, as
 * the reference's PGD does (external/attacks/pgd.py random_start=False; eval/pgd.ts), unless the
 * model was trained with random starts (`trainedWith`: its PGD recipe), whose PGD evaluation
 * starts as its training did (train/trainer.ts).
 */
export function robustEvalRandomStart(
  attack: RobustEvalAttack,
  trainedWith: { randomStart: boolean } | null = null,
): boolean {
  return attack === "apgd" || Boolean(trainedWith?.randomStart);
}
