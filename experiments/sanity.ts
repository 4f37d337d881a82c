// Before a compare runs: each model's accuracy on a few test images with the normalisation it was
// given, and with the others stitchlab knows. A model fed another normalisation than its training's
// scores near chance, and every score stitched through it is a number that means nothing: a ResNet
// trained on Fashion-MNIST, given cifar10's statistics, scored 0.105 as the back and its
// invariance-aware agreement read 0.980; given none, 0.202, just above the run's own near-chance
// warning (2/K), so nothing said so. Said here, before anything runs, with the normalisation that
// scores best; the run still goes on (an untrained model is near chance by right).
import { type Dataset, disposeDataset, type Normalization } from "../data/index.js";
import { NORMALIZATION_NAMES, normalizationFor } from "../data/transforms.js";
import { forEachEvalBatch } from "../eval/batches.js";
import { loadCheckpoint, type ModelSourceLike } from "../models/checkpoint.js";
import { requireNormalization } from "../models/record.js";
import type { StitchableModel } from "../models/stitchable.js";
import { loadSource } from "../stitch/jobs.js";
import * as torch from "../torch/index.js";
import { nearChance } from "./reading.js";

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
