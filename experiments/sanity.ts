// Before a compare runs: each model's accuracy on a few test images with the normalisation it was
// given, and with the others stitchlab knows. A model fed another normalisation than its training's
// scores near chance, and every score stitched through it is a number that means nothing: a ResNet
// trained on Fashion-MNIST, given cifar10's statistics, scored 0.105 as the back and its
// invariance-aware agreement read 0.980; given none, 0.202, just above the run's own near-chance
// warning (2/K), so nothing said so. Said here, before anything runs, with the normalisation that
// scores best; the run still goes on (an untrained model is near chance by right). And B's batch
// norm under the standard recipe's adapt (adaptCheck): a model trained without augmentation fails
// the control there, which is said (or the recipe changed) before the run, not after it.
import { batches, type Dataset, datasetSize, disposeDataset, type Normalization } from "../data/index.js";
import { type AugmentOptions, NORMALIZATION_NAMES, normalizationFor, standardAugment } from "../data/transforms.js";
import { forEachEvalBatch } from "../eval/batches.js";
import { CONTROL_MIN_AGREEMENT, nearChance } from "../findings/reading.js";
import { AgreementMeter } from "../metrics/agreement.js";
import { loadCheckpoint, type ModelSourceLike } from "../models/checkpoint.js";
import { requireNormalization } from "../models/record.js";
import type { StitchableModel } from "../models/stitchable.js";
import { loadSource } from "../stitch/jobs.js";
import { setFrozenBnMode } from "../stitch/train.js";
import * as torch from "../torch/index.js";
import { isDone } from "./cache.js";
import type { Plan, StitchTask } from "./plan.js";
import { modelSource } from "./tasks.js";

/** Test images each model is scored on: enough to tell 0.1 from 0.8 (a binomial sd of 0.05 at most). */
export const SANITY_IMAGES = 100;

/** A model whose accuracy with another normalisation is this much higher is told so. */
export const SANITY_MARGIN = 0.25;

export interface NormalizationScore {
  name: string;
  /** Accuracy with the normalisation it was given. */
  accuracy: number;
  /** The best of the others stitchlab knows, and its accuracy (null: none scored SANITY_MARGIN higher). */
  better: { normalization: string; accuracy: number } | null;
}

const same = (a: Normalization, b: Normalization) =>
  a.mean.every((m, i) => Math.abs(m - (b.mean[i] as number)) < 1e-6) &&
  a.std.every((s, i) => Math.abs(s - (b.std[i] as number)) < 1e-6);

/** The named presets, each distinct set of statistics once (imagefolder's are imagenet's: named imagenet). */
function presets(): [string, Normalization][] {
  const out: [string, Normalization][] = [];
  for (const n of NORMALIZATION_NAMES.filter((x) => x !== "imagefolder")) {
    const norm = normalizationFor(n);
    if (!out.some(([, p]) => same(p, norm))) out.push([n, norm]);
  }
  return out;
}

/** Of the other normalisations' accuracies, the best, where it beats the model's own by SANITY_MARGIN. */
export function betterNormalization(own: number, others: [string, number][]): NormalizationScore["better"] {
  let better: NormalizationScore["better"] = null;
  for (const [normalization, accuracy] of others)
    if (accuracy >= own + SANITY_MARGIN && accuracy > (better?.accuracy ?? -1)) better = { normalization, accuracy };
  return better;
}

/** Top-1 accuracy on `test` (no loss: a head of another class count than the labels' is never scored). */
function accuracyOf(model: StitchableModel, test: Dataset, normalization: Normalization, device: torch.Device): number {
  let correct = 0;
  let n = 0;
  forEachEvalBatch(model, test, { normalization, device }, (b) =>
    torch.noGrad(() => {
      correct += model.forward(b.x).argmax(1).eq(b.y).sum().item();
      n += b.indices.length;
    }),
  );
  return correct / Math.max(1, n);
}

/**
 * Each model's accuracy on the first SANITY_IMAGES test images with its own normalisation, and,
 * where that leaves room for SANITY_MARGIN more (below 1 - SANITY_MARGIN), with each other preset.
 * A model whose head has another class count than the dataset's is left out (a front from other
 * data: its classes are not the labels'). Throws what loading throws: the caller turns it into a warning.
 */
export async function normalizationScores(
  models: { name: string; source: ModelSourceLike }[],
  data: { dataset: string; root: string | null; imageSize: number | null },
  numClasses: number | null,
  device: torch.Device,
): Promise<NormalizationScore[]> {
  const test = await loadSource(
    { ...data, shortcut: null, markerScale: 1, limit: SANITY_IMAGES },
    "test",
    SANITY_IMAGES,
  );
  const out: NormalizationScore[] = [];
  try {
    for (const m of models) {
      const { model, record } = loadCheckpoint(m.source);
      try {
        if (numClasses !== null && model.config.numClasses !== numClasses) continue;
        model.to(device);
        const own = requireNormalization(record, m.name);
        const accuracy = accuracyOf(model, test, own, device);
        const others =
          accuracy < 1 - SANITY_MARGIN
            ? presets()
                .filter(([, p]) => !same(p, own))
                .map(([name, p]): [string, number] => [name, accuracyOf(model, test, p, device)])
            : [];
        out.push({ name: m.name, accuracy, better: betterNormalization(accuracy, others) });
      } finally {
        model.dispose();
      }
    }
  } finally {
    disposeDataset(test);
  }
  return out;
}

/** The warnings for these scores: a model near chance (reading.ts nearChance), or one that another normalisation serves far better. */
export function normalizationWarnings(scores: NormalizationScore[], numClasses: number | null): string[] {
  return scores.flatMap((s) => {
    const near = numClasses !== null && nearChance(s.accuracy, numClasses);
    if (!s.better && !near) return [];
    const own = `${s.name} scores ${s.accuracy.toFixed(2)} on ${SANITY_IMAGES} test images with the normalization it was given${numClasses ? ` (chance ${(1 / numClasses).toFixed(2)})` : ""}`;
    return [
      s.better
        ? `${own}, ${s.better.accuracy.toFixed(2)} with ${s.better.normalization}'s: is its normalization right (--normalization, or --front-/--back-normalization)? Every score stitched through it depends on it.`
        : `${own}: is its normalization right, and is it trained? Scores stitched through a model near chance mean little.`,
    ];
  });
}

/**
 * Steps of batch norm's adapt the check runs before a compare: at momentum 0.1, 0.9^30 = 4% of the
 * trained statistics remain. A standard stitch's 120 steps leave far less, so the check is the
 * milder of the two: a back it finds broken, the run's control finds broken too (measured on a
 * pair trained in plain PyTorch: 0.959 here, 0.957-0.963 in the control).
 */
export const ADAPT_CHECK_STEPS = 30;

/** B's agreement with itself after batch norm's adapt: on augmented images, and (where that fails) on the images as they are. */
export interface AdaptCheck {
  /** Agreement probability of B with adapted statistics (augmented real images) against B as trained. */
  augmented: number;
  /** The same with the images not augmented (null: not measured, the augmented check passed). */
  plain: number | null;
  /** What it ran on: adapt steps, batch, test images. */
  steps: number;
  images: number;
}

/** B's agreement with itself after ADAPT_CHECK_STEPS steps of adapt on `train`'s batches (augmented or not). */
function adaptedAgreement(
  source: ModelSourceLike,
  name: string,
  train: Dataset,
  test: Dataset,
  opts: { batchSize: number; augment: AugmentOptions | null; device: torch.Device },
): number {
  const trained = loadCheckpoint(source);
  let second: ReturnType<typeof loadCheckpoint> | null = null;
  try {
    const adapted = loadCheckpoint(source);
    second = adapted;
    const normalization = requireNormalization(trained.record, name);
    trained.model.to(opts.device);
    adapted.model.to(opts.device);
    // The standard recipe's adapt, without T (B stitched into itself needs none): train mode,
    // running statistics updated at each forward pass, nothing else trained (stitch/train.ts).
    setFrozenBnMode(adapted.model, "update");
    const batchSize = Math.min(opts.batchSize, datasetSize(train));
    for (let step = 0, epoch = 0; step < ADAPT_CHECK_STEPS; epoch++)
      for (const b of batches(train, {
        batchSize,
        shuffle: true,
        seed: 0,
        epoch,
        dropLast: true,
        augment: opts.augment,
        normalization,
        device: opts.device,
      })) {
        try {
          if (step++ < ADAPT_CHECK_STEPS)
            torch.noGrad(() =>
              torch.tidy(() => {
                adapted.model.forward(b.x);
              }),
            );
        } finally {
          torch.dispose(b);
        }
        if (step >= ADAPT_CHECK_STEPS) break;
      }
    const meter = new AgreementMeter();
    forEachEvalBatch([trained.model, adapted.model], test, { normalization, device: opts.device }, (b) =>
      torch.noGrad(() => meter.update(adapted.model.forward(b.x), trained.model.forward(b.x), b.y)),
    );
    return meter.result().agreementProbability;
  } finally {
    trained.model.dispose();
    second?.model.dispose();
  }
}

/**
 * Before a compare whose standard runs adapt batch norm on augmented images: does B still agree
 * with itself after that adaptation? A model trained without augmentation meets other statistics
 * in crops and flips, and B stitched into itself then fails the control (0.62 where it should be
 * above CONTROL_MIN_AGREEMENT) after a run of many minutes; this tells it in seconds, on the
 * stitch's own real images and SANITY_IMAGES test images. Where the augmented check falls short,
 * the images as they are are tried too: passing there names augmentation as the cause.
 */
export async function adaptCheck(
  back: { name: string; source: ModelSourceLike },
  data: { dataset: string; root: string | null; imageSize: number | null },
  opts: { limit: number; batchSize: number; device: torch.Device },
): Promise<AdaptCheck> {
  const src = { ...data, shortcut: null, markerScale: 1 };
  const train = await loadSource({ ...src, limit: opts.limit }, "train", opts.limit);
  const test = await loadSource({ ...src, limit: SANITY_IMAGES }, "test", SANITY_IMAGES);
  try {
    const run = (augment: AugmentOptions | null) =>
      adaptedAgreement(back.source, back.name, train, test, { ...opts, augment });
    const augmented = run(standardAugment(train.images.shape[2] as number));
    const plain = augmented < CONTROL_MIN_AGREEMENT ? run(null) : null;
    return { augmented, plain, steps: ADAPT_CHECK_STEPS, images: datasetSize(test) };
  } finally {
    disposeDataset(train);
    disposeDataset(test);
  }
}

/** What compare does with the check: nothing, switch augmentation off (and say so), or warn. */
export function adaptDecision(
  check: AdaptCheck,
  back: string,
  /** Whether the user set stitch.augment themselves (--stitch-augment or --no-stitch-augment). */
  given: boolean,
): { augment: boolean | null; line: string | null } {
  if (check.augmented >= CONTROL_MIN_AGREEMENT) return { augment: null, line: null };
  const what = `${back}, its batch norm re-estimated on augmented real images as the standard recipe does (${check.steps} steps, crop and flip), agrees with itself at ${check.augmented.toFixed(3)} on ${check.images} test images (a control needs ${CONTROL_MIN_AGREEMENT})`;
  if (check.plain !== null && check.plain >= CONTROL_MIN_AGREEMENT)
    return given
      ? {
          augment: null,
          line: `${what}, and at ${check.plain.toFixed(3)} on the images as they are: it was likely trained without augmentation. You asked for --stitch-augment: the control will likely fail, and the verdict with it.`,
        }
      : {
          augment: false,
          line: `${what}, and at ${check.plain.toFixed(3)} on the images as they are: it was likely trained without augmentation, so standard runs train on the images as they are (stitch.augment: false, as --no-stitch-augment; --stitch-augment keeps augmentation).`,
        };
  return {
    augment: null,
    line: `${what}${check.plain === null ? "" : `, and at ${check.plain.toFixed(3)} on the images as they are`}: batch norm's adapt itself changes it. The control will likely fail; stitch.bnMode: {standard: eval} in the experiment file keeps the models' own statistics.`,
  };
}

/**
 * Runs adaptCheck on each back of the plan's standard stitches that adapt batch norm on augmented
 * images (the default): B, and with --both-ways A too (B -> A and A's own control). The lines to
 * print (none where every check passed), and augment false where one back is broken by
 * augmentation alone and the user left the setting to compare: the setting is the run's, not a
 * back's. A check that cannot run is a note, not a stop: the run meets the same problem, if it is
 * one, where it has its own error.
 */
export async function checkStandardAdapt(
  plan: Plan,
  cache: string,
  device: torch.Device,
  given: boolean,
): Promise<{ augment: boolean | null; lines: string[] }> {
  // Only tasks still to run: a run served from the cache has nothing left for the check to save.
  const standard = plan.tasks
    .filter((t) => !isDone(cache, t.key))
    .map((t) => t.spec)
    .filter(
      (t): t is StitchTask =>
        t.kind === "stitch" &&
        t.config.mode === "standard" &&
        t.config.bnMode === "adapt" &&
        t.config.augment !== false &&
        "checkpoint" in t.back,
    );
  const backs = [...new Map(standard.map((t) => [JSON.stringify(t.back), t])).values()];
  const d = plan.experiment.dataset;
  const out: { augment: boolean | null; lines: string[] } = { augment: null, lines: [] };
  for (const task of backs) {
    const name =
      Object.entries(plan.models).find(([, ref]) => JSON.stringify(ref) === JSON.stringify(task.back))?.[0] ?? "B";
    try {
      const check = await adaptCheck(
        { name, source: modelSource(cache, task.back) },
        { dataset: d.name, root: d.root ?? null, imageSize: d.imageSize ?? null },
        { limit: task.config.limit ?? 512, batchSize: task.config.batchSize, device },
      );
      const decision = adaptDecision(check, name, given);
      if (decision.line) out.lines.push(decision.line);
      if (decision.augment === false) out.augment = false;
    } catch (e) {
      out.lines.push(
        `${name}'s batch norm under the standard recipe could not be checked: ${(e as Error).message.split("\n")[0]}`,
      );
    }
  }
  return out;
}
