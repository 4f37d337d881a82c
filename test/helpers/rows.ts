// Made-up report rows for tests of the reading, the summary and the report: one home for a
// StitchRow's every field, so a test names only what it is about.
import type { StitchRow } from "../../report/types.js";

/** A StitchRow of plausible values, with `over` on top. */
export function stitchRow(over: Partial<StitchRow> = {}): StitchRow {
  return {
    front: "clean-s1",
    back: "clean-s0",
    pair: "cross-seed",
    point: "layer2.1",
    pointIndex: 4,
    objective: "slm",
    mode: "iris",
    accuracy: 0.9,
    back_accuracy: 0.9,
    hard_agreement: 0.8,
    agreement_prob: 0.8,
    hard_error_consistency: 0.5,
    soft_error_consistency: 0.5,
    cka: 0.8,
    excess_agreement: null,
    robust_accuracy: null,
    robust_agreement_prob: null,
    test_data: "clean",
    iri_residual: 0.2,
    bn_mode: "eval",
    epochs: 1,
    seed: 0,
    replicate: 0,
    front_accuracy: 0.9,
    front_alone_accuracy: null,
    front_alone_agreement_prob: null,
    train_steps: 1,
    threads: "1",
    ...over,
  };
}
