// Checkpoints made for tests: of what goes wrong, and the small pair the job tests stitch.
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { type Dataset, datasetSize, normalizationFor, subset } from "../../data/index.js";
import { modelFingerprint, saveCheckpoint } from "../../models/checkpoint.js";
import { createModel } from "../../models/registry.js";
import type { StitchableModel } from "../../models/stitchable.js";
import type { IriOptions } from "../../stitch/iri-options.js";
import type { IriSetSettings } from "../../stitch/iriset.js";
import * as torch from "../../torch/index.js";
import { trainConfig } from "../../train/config.js";
import { trainModel } from "../../train/trainer.js";

/**
 * A narrow Fashion-MNIST ResNet-18 whose head weights are finite but huge, saved at `path`: it
 * loads (nothing non-finite is stored), yet its logits overflow to infinity, so every stitch with
 * it as the back model diverges ("loss is NaN"), on every attempt.
 */
export function saveDivergingCheckpoint(path: string): void {
  mkdirSync(dirname(path), { recursive: true });
  torch.manualSeed(0);
  const m = createModel("resnet18", { width: 0.0625, numClasses: 10 });
  torch.noGrad(() => m.stateDict()["fc.weight"].fill_(3e38));
  saveCheckpoint(path, m, { dataset: "fashion-mnist" });
  m.dispose();
}

/** A random narrow Fashion-MNIST ResNet-18 (width 1/8) of this seed. */
export function tinyResnet(seed: number, width = 0.125): StitchableModel {
  torch.manualSeed(seed);
  return createModel("resnet18", { width, numClasses: 10 });
}

/**
 * The IRI and stitch job tests' two checkpoints in `dir`: A, a random narrow ResNet-18 of seed 0
 * (returned, for the caller to use and dispose), and B, trained one epoch on 1,000 images so that
 * its answers depend on the image.
 */
export async function saveSmallPair(dir: string): Promise<{ a: StitchableModel; ckpt: { a: string; b: string } }> {
  const ckpt = { a: join(dir, "a", "model.safetensors"), b: join(dir, "b", "model.safetensors") };
  await trainModel(
    {
      ...trainConfig(
        { arch: "resnet18", width: 0.125, epochs: 1, batchSize: 64, lr: 0.05, seed: 1 },
        {
          dataset: "fashion-mnist",
          limit: 1000,
          testLimit: 100,
        },
      ),
    },
    dirname(ckpt.b),
  );
  const a = tinyResnet(0);
  mkdirSync(dirname(ckpt.a), { recursive: true });
  saveCheckpoint(ckpt.a, a, { dataset: "fashion-mnist", seed: 0 });
  return { a, ckpt };
}

/** The settings an IRI set of `model` at `point` over Fashion-MNIST images `ds` records. */
export function irisSettingsFor(
  model: StitchableModel,
  ds: Dataset,
  point: string,
  options: IriOptions,
): IriSetSettings {
  return {
    front: { arch: model.arch, options: model.config as Record<string, unknown>, fingerprint: modelFingerprint(model) },
    point,
    dataset: "fashion-mnist",
    shortcut: null,
    limit: datasetSize(ds),
    count: datasetSize(ds),
    classes: ds.classes,
    imageShape: ds.images.shape.slice(1),
    normalization: normalizationFor("fashion-mnist"),
    options,
  };
}

/** The first n images of a dataset. */
export const firstImages = (ds: Dataset, n: number): Dataset =>
  subset(
    ds,
    Array.from({ length: n }, (_, i) => i),
  );
