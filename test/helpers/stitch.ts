// Stitching configs and options for tests, through the code users run: a stitch's config goes
// through resolveStitchConfig (the mode decides the batch-norm default, as for the CLI and the
// planner), and trainStitch's options take the stitching schema's own defaults (stitch/config.ts)
// for what a test does not vary. Nothing here writes a default again.
import { type StitchConfig, stitchConfig, stitchSettingsSchema } from "../../stitch/config.js";
import { recipeOf, type StitchTrainOptions } from "../../stitch/train.js";

/**
 * trainStitch's options: what a test names, the schema's defaults for the rest (the recipe: Adam's
 * lr, weight decay, betas and epsilon, the lr's drops; batch, least squares on its image count, seed), no augmentation, markers or
 * adversarial examples, on the CPU.
 */
export function stitchTrainOptions(
  opts: Pick<StitchTrainOptions, "objective" | "normalization" | "epochs" | "bnMode"> & Partial<StitchTrainOptions>,
): StitchTrainOptions {
  const d = stitchSettingsSchema.parse({});
  return {
    batchSize: d.batchSize,
    ...recipeOf(d),
    seed: d.seed,
    init: d.init,
    initImages: d.initImages,
    augment: null,
    markers: null,
    initMarkers: null,
    device: "cpu",
    adversarial: null,
    ...opts,
  };
}

/**
 * A small stitch of `front` into `back` at layer1.0 (SLM, standard unless `over` says otherwise),
 * resolved as the CLI and the planner resolve theirs: 64 training and test images, one epoch of
 * batch 32, least squares on 32 images; `over` sets any field of the resolved config.
 */
export function smallStitchConfig(
  front: string,
  back: string,
  over: Partial<StitchConfig>,
  small: { ckaImages: number } = { ckaImages: 32 },
): StitchConfig {
  const mode = over.mode ?? "standard";
  const {
    front: f = front,
    back: b = back,
    frontPoint = "layer1.0",
    backPoint,
    objective = "slm",
    iris = null,
    bnMode,
    adversarial,
    robustEval,
    dataset = "fashion-mnist",
    shortcut = null,
    excess = null,
    testLimit = 64,
    mode: _m,
    device: _d,
    root: _r,
    imageSize: _i,
    noiseClusters,
    ...settings
  } = over;
  return stitchConfig(
    { front: f, back: b, frontPoint, backPoint, objective, mode, iris, noiseClusters },
    {
      limit: 64,
      epochs: 1,
      batchSize: 32,
      initImages: 32,
      ckaImages: small.ckaImages,
      ...settings,
      ...(bnMode ? { bnMode: { [mode]: bnMode } } : {}),
      ...(adversarial ? { adversarial } : {}),
      ...(robustEval ? { robustEval } : {}),
    },
    { dataset, shortcut, excess, testLimit },
  );
}
