// The rows every finding is made from: one per stitched run, the base models and the IRI sets'
// previews. The experiment layer fills them (experiments/results.ts); findings/ reads them and
// report/ draws them.

/** The two ways of training a stitching layer: on real images, or on the front model's IRIs. */
export type StitchMode = "standard" | "iris";

/** One stitched run: front model A up to `point`, the stitching layer, back model B after it. */
export interface StitchRow {
  /** Model names as the experiment names them, e.g. "clean-s1". */
  front: string;
  back: string;
  /** The relation between front and back: "identical", "cross-seed", "cross-bias", ... (free string). */
  pair: string;
  /** Stitch point name, e.g. "layer2.1" (the back's). */
  point: string;
  /**
   * The front's point stitched into it: the same name, or where the two are other architectures,
   * the front's partner at the same relative depth (a pair's frontPoints). Absent in rows made
   * before it was recorded.
   */
  front_point?: string;
  /** Position of the point in the back model's list of stitch points (the x axis order). */
  pointIndex: number;
  /** "hlm" | "slm" | "dm" | "fula"; weighted sums appear as e.g. "hlm:1,fula:0.5". */
  objective: string;
  mode: StitchMode;
  accuracy: number;
  back_accuracy: number;
  hard_agreement: number;
  agreement_prob: number;
  hard_error_consistency: number;
  soft_error_consistency: number;
  cka: number | null;
  excess_agreement: number | null;
  /** Adversarial test images made against the stitched model (absent unless asked for): its accuracy, and its agreement with B, each image the worst case over the attacks. */
  robust_accuracy: number | null;
  robust_agreement_prob: number | null;
  /** The test set scored: "clean", or the shortcut kind its images carry (never compare the two by accident). */
  test_data: string;
  /** Mean relative residual of the IRI set used (iris mode). */
  iri_residual: number | null;
  bn_mode: string;
  epochs: number;
  seed: number;
  /** 0-based replicate (its own front models, IRI and stitching seeds). */
  replicate: number;
  /** The front model's best recorded accuracy (clean or marked; null when its checkpoint records none). */
  front_accuracy: number | null;
  /**
   * The front's reliance on its shortcut marker: its own accuracy on test images with
   * class-consistent markers minus with rolled ones (null: a front with no such markers, or runs
   * made before it was recorded). What the grounding study ranks measures against (findings/grounding.ts).
   */
  front_reliance?: number | null;
  /**
   * The "Front" end of the reference's curves: A alone (its own head, no T) on this row's test
   * set, its accuracy and its agreement probability with B; null when their classes differ (or
   * for runs made before these were recorded). The "End" is B itself: agreement 1, back_accuracy.
   */
  front_alone_accuracy: number | null;
  front_alone_agreement_prob: number | null;
  /** Standard error of agreement_prob over the test images (metrics/agreement.ts); null in runs made before it was recorded. */
  agreement_prob_se?: number | null;
  /** Optimiser steps T was trained for (epochs x full batches). */
  train_steps: number;
  /** T's mean training loss in its last epoch (null in rows built without it). */
  t_loss?: number | null;
  /**
   * How far T's loss was still falling when its rate first fell (stitch/train.ts fullRateLossFall:
   * the relative fall from the third to the last quarter of the full-rate phase); null where
   * that phase is under 4 epochs.
   */
  t_loss_fall?: number | null;
  /**
   * The IRI set's share of x' to which A's own head gives x's class (stitch/iriset.ts
   * frontAgreement; iris mode): whether A itself tells its IRIs from their sources. Absent or null
   * in rows made before it was recorded, and for standard runs.
   */
  iri_front_agreement?: number | null;
  /**
   * The front's accuracy on clean test images (a null front, or rows made before it was recorded:
   * null or absent). front_accuracy is the best of its recorded accuracies, which for a front that
   * relies on a marker is its marked accuracy; the grounding study's baseline must not be that.
   */
  front_clean_accuracy?: number | null;
  /**
   * The thread counts the row's tasks ran with (its base models' training, its IRI set, its
   * stitch), from their cache manifests: "1", or "1/2" when they differ; "" when not recorded.
   * Not part of the cache key (docs/experiments.md, "Threads"): recorded so that it is seen.
   */
  threads: string;
}

/** A base model and its accuracies, by test set name ("clean", "pgd", ...). */
export interface ModelRow {
  name: string;
  arch: string;
  dataset: string;
  shortcut: string | null;
  /** The fraction of its training markers that agreed with the label, where below 1 (train setting markerAgreement). */
  markerAgreement?: number;
  adversarial: boolean;
  seed: number;
  accuracies: Record<string, number>;
}

/** A picture grid of IRIs for one (front, point): rows x, x', |x - x'|, as PNG bytes. */
export interface IriPreview {
  front: string;
  point: string;
  /** Relative residuals of the whole IRI set; below01 = share of images with residual <= GOOD_IRI_RESIDUAL (stitch/residuals.ts). */
  residuals: { mean: number; median: number; p90: number; below01: number };
  /** Each previewed image's residual, in the grid's column order (absent for sets made before). */
  previewResiduals?: number[];
  /** The share of x' to which A's own head gives x's class (absent for sets made before). */
  frontAgreement?: number;
  png: Buffer;
}
