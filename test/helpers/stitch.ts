// trainStitch's options for tests: trainStitch fills nothing in (the stitching config is resolved
// once, above it), so a test names what it varies and takes PROTOCOL.md's values, written out
// here, for the rest: Adam at lr 1e-3 with weight decay 1e-4, batch 128, least squares on 500
// images, seed 0, no augmentation, markers or adversarial examples, on the CPU.
import type { StitchTrainOptions } from "../../stitch/train.js";

export function stitchTrainOptions(
  opts: Pick<StitchTrainOptions, "objective" | "normalization" | "epochs" | "bnMode"> & Partial<StitchTrainOptions>,
): StitchTrainOptions {
  return {
    batchSize: 128,
    lr: 1e-3,
    weightDecay: 1e-4,
    seed: 0,
    init: "lstsq",
    initImages: 500,
    augment: null,
    markers: null,
    initMarkers: null,
    device: "cpu",
    adversarial: null,
    ...opts,
  };
}
