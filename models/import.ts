// `stitchlab import`: weights made elsewhere become a stitchlab checkpoint (safetensors with its
// sidecar), after a check against a forward pass: the model gives finite logits of the right
// shape, and the checkpoint written gives the same logits again when read back.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import * as torch from "../torch/index.js";
import { type CheckpointMeta, type LoadNotes, loadCheckpoint, type ModelSource, saveCheckpoint } from "./checkpoint.js";
import type { StitchableModel } from "./stitchable.js";

export interface ImportResult {
  checkpoint: string;
  arch: string;
  options: Record<string, unknown>;
  notes: LoadNotes;
  /** The forward check: the logits' shape, and the largest difference after reading the checkpoint back (0 expected). */
  check: { logits: number[]; readBackMaxDiff: number };
}

/** Logits of the model on a fixed batch of two seeded images of its size (eval mode, no gradients). */
function probe(model: StitchableModel, side: number): torch.Tensor {
  return torch.tidy(() => {
    torch.manualSeed(0);
    const x = torch.randn([2, 3, side, side]);
    model.eval();
    return torch.noGrad(() => model.forward(x));
  });
}

/**
 * Reads `source` (weights made elsewhere, or a stitchlab checkpoint to copy), checks it, and
 * writes outDir/model.safetensors and model.json. `dataset` records what it was trained on, so
 * that stitch and iris default to it. outDir must be empty or absent.
 */
export function importModel(source: ModelSource, outDir: string, opts: { dataset?: string } = {}): ImportResult {
  if (existsSync(outDir) && readdirSync(outDir).length > 0)
    throw new Error(`--out ${outDir} is not empty: give a new folder`);
  const { model, notes, record } = loadCheckpoint(source);
  try {
    const before = torch.keep(probe(model, record.imageSize));
    try {
      const shape = before.shape;
      const { numClasses } = record;
      if (shape.length !== 2 || shape[1] !== numClasses)
        throw new Error(`forward check: logits of shape [${shape.join(", ")}], expected [2, ${numClasses}]`);
      const finite = torch.tidy(() => (torch.call("isfinite", before) as torch.Tensor).all().item());
      if (!finite) throw new Error("forward check: the logits are not finite (are the weights?)");
      mkdirSync(outDir, { recursive: true });
      const path = join(outDir, "model.safetensors");
      const extra: Omit<CheckpointMeta, "arch" | "options"> = {
        ...(opts.dataset ? { dataset: opts.dataset } : {}),
        ...(record.normalization ? { normalization: record.normalization } : {}),
        importedFrom: {
          file: source.checkpoint,
          sha256: createHash("sha256").update(readFileSync(source.checkpoint)).digest("hex"),
          unwrapped: notes.unwrapped,
          inferredOptions: notes.inferred,
        },
      };
      saveCheckpoint(path, model, extra);
      const back = loadCheckpoint(path).model;
      let diff: number;
      try {
        const after = probe(back, record.imageSize);
        diff = torch.tidy(() => after.sub(before).abs().max().item());
        after.dispose();
      } finally {
        back.dispose();
      }
      if (diff !== 0)
        throw new Error(`forward check: the written checkpoint gives other logits (max difference ${diff})`);
      return {
        checkpoint: path,
        arch: model.arch,
        options: model.config,
        notes,
        check: { logits: shape, readBackMaxDiff: diff },
      };
    } finally {
      before.dispose();
    }
  } finally {
    model.dispose();
  }
}
