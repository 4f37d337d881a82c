// How much a model reads the shortcut's markers, written once for base models (train/trainer.ts:
// accuracy on marked and on rolled test images) and for stitched ones (stitch/jobs.ts: every score
// on each, and the excess agreement between them). "Marked": the test set with each class's own
// marker; "rolled": the same images with each class given another class's marker (class c the
// marker of class c - 1, data/shortcuts.ts). A model that reads the markers scores high on the
// first and low on the second (docs/method.md, "Datasets and shortcut markers" and "Scores").
import { applyShortcut, type Dataset, disposeDataset, type ShortcutKind, type ShortcutOptions } from "../data/index.js";

export interface MarkedAndRolledOptions<T> {
  kind: ShortcutKind;
  /** Seed of the markers' places (and rand's colours), the same in both sets. */
  seed: number;
  /** The markers' strength: their cell size times this (data/shortcuts.ts markerCell). */
  scale: number;
  /**
   * Rand markers carry no class to roll. With this seed their rolled set is another draw of random
   * markers, a baseline with no class link, as the reference's shuffled Rand set
   * (dataloaders/shortcut_markers.py); without it a rand shortcut has no rolled score.
   */
  randSeed?: number;
  /** The marked set's score where it is known already (the test set is the marked set): not scored again. */
  marked?: T;
}

/**
 * `score` on the marked and on the rolled test set, each made from `test` (clean) and freed once
 * scored. `rolled` is null for a rand shortcut without `randSeed`.
 */
export function scoreMarkedAndRolled<T>(
  test: Dataset,
  opts: MarkedAndRolledOptions<T> & { randSeed: number },
  score: (ds: Dataset) => T,
): { marked: T; rolled: T };
export function scoreMarkedAndRolled<T>(
  test: Dataset,
  opts: MarkedAndRolledOptions<T>,
  score: (ds: Dataset) => T,
): { marked: T; rolled: T | null };
export function scoreMarkedAndRolled<T>(
  test: Dataset,
  opts: MarkedAndRolledOptions<T>,
  score: (ds: Dataset) => T,
): { marked: T; rolled: T | null } {
  const scoreOn = (markers: ShortcutOptions): T => {
    const d = applyShortcut(test, markers);
    try {
      return score(d);
    } finally {
      disposeDataset(d);
    }
  };
  const { kind, seed, scale } = opts;
  const marked = opts.marked ?? scoreOn({ kind, seed, scale });
  let rolled: T | null = null;
  if (kind !== "rand") rolled = scoreOn({ kind, seed, rolled: true, scale });
  else if (opts.randSeed !== undefined) rolled = scoreOn({ kind, seed: opts.randSeed, scale });
  return { marked, rolled };
}
