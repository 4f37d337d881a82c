// Before a compare runs: each model's accuracy on a few test images with the normalisation it was
// given, and with the others stitchlab knows. A model fed another normalisation than its training's
// scores near chance, and every score stitched through it is a number that means nothing: a ResNet
// trained on Fashion-MNIST, given cifar10's statistics, scored 0.105 as the back and its
// invariance-aware agreement read 0.980; given none, 0.202, just above the run's own near-chance
// warning (2/K), so nothing said so. Said here, before anything runs, with the normalisation that
// scores best; the run still goes on (an untrained model is near chance by right).
import { disposeDataset, type Normalization } from "../data/index.js";
import { NORMALIZATION_NAMES, normalizationFor } from "../data/transforms.js";
import { evaluate } from "../eval/evaluate.js";
import { loadCheckpoint, type ModelSourceLike } from "../models/checkpoint.js";
import { requireNormalization } from "../models/record.js";
import { loadSource } from "../stitch/jobs.js";
import type * as torch from "../torch/index.js";

/** Test images each model is scored on: enough to tell 0.1 from 0.8 (a binomial sd of 0.05 at most). */
export const SANITY_IMAGES = 100;

/** A model whose accuracy with another normalisation is this much higher is told so. */
export const SANITY_MARGIN = 0.25;

export interface NormalizationScore {
  name: string;
  /** Accuracy with the normalisation it was given. */
  accuracy: number;
  /** The best of the others stitchlab knows, and its accuracy (null: none scored higher). */
  better: { normalization: string; accuracy: number } | null;
}

const same = (a: Normalization, b: Normalization) =>
  a.mean.every((m, i) => Math.abs(m - (b.mean[i] as number)) < 1e-6) &&
  a.std.every((s, i) => Math.abs(s - (b.std[i] as number)) < 1e-6);

/**
 * Each model's accuracy on the first SANITY_IMAGES test images of the dataset with its own
 * normalisation, and the best with another (the named presets, each distinct set of statistics once).
 */
export async function normalizationScores(
  models: { name: string; source: ModelSourceLike }[],
  data: { dataset: string; root: string | null; imageSize: number | null },
  device: torch.Device,
): Promise<NormalizationScore[]> {
  const test = await loadSource(
    { ...data, shortcut: null, markerScale: 1, limit: SANITY_IMAGES },
    "test",
    SANITY_IMAGES,
  );
  const presets: [string, Normalization][] = [];
  // imagefolder's statistics are imagenet's: named once, as imagenet.
  for (const n of NORMALIZATION_NAMES.filter((x) => x !== "imagefolder")) {
    const norm = normalizationFor(n);
    if (!presets.some(([, p]) => same(p, norm))) presets.push([n, norm]);
  }
  const out: NormalizationScore[] = [];
  try {
    for (const m of models) {
      const { model, record } = loadCheckpoint(m.source);
      try {
        model.to(device);
        const own = requireNormalization(record, m.name);
        const score = (normalization: Normalization) => evaluate(model, test, { normalization, device }).accuracy;
        const accuracy = score(own);
        let better: NormalizationScore["better"] = null;
        for (const [name, norm] of presets) {
          if (same(norm, own)) continue;
          const a = score(norm);
          if (a > accuracy + SANITY_MARGIN && a > (better?.accuracy ?? 0))
            better = { normalization: name, accuracy: a };
        }
        out.push({ name: m.name, accuracy, better });
      } finally {
        model.dispose();
      }
    }
  } finally {
    disposeDataset(test);
  }
  return out;
}

/** The warnings for these scores: a model near chance (2/K), or one that another normalisation serves far better. */
export function normalizationWarnings(scores: NormalizationScore[], numClasses: number | null): string[] {
  const chance = numClasses ? 1 / numClasses : null;
  return scores.flatMap((s) => {
    const near = chance !== null && s.accuracy <= 2 * chance;
    if (!s.better && !near) return [];
    const own = `${s.name} scores ${s.accuracy.toFixed(2)} on ${SANITY_IMAGES} test images with the normalization it was given${chance !== null ? ` (chance ${chance.toFixed(2)})` : ""}`;
    return [
      s.better
        ? `${own}, ${s.better.accuracy.toFixed(2)} with ${s.better.normalization}'s: is its normalization right (--normalization, or --front-/--back-normalization)? Every score stitched through it depends on it.`
        : `${own}: is its normalization right, and is it trained? Scores stitched through a model near chance mean little.`,
    ];
  });
}
