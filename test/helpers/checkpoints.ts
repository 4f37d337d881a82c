// Checkpoints made for tests of what goes wrong.
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { saveCheckpoint } from "../../models/checkpoint.js";
import { createModel } from "../../models/registry.js";
import * as torch from "../../torch/index.js";

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
