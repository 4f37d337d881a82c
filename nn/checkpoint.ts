// Checkpoints: the state dict as safetensors with PyTorch parameter names, and a JSON sidecar
// that says how to rebuild the model and where it came from. Both written atomically; the
// sidecar last, so a checkpoint with a sidecar is complete.
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { createModel, type ModelOptions } from "../models/registry.js";
import type { StitchableModel } from "../models/stitchable.js";
import * as torch from "../torch/index.js";
import { repoRoot } from "../torch/native.js";

const VERSION: string = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")).version;

export interface CheckpointMeta {
  arch: string;
  options: ModelOptions;
  dataset?: string;
  shortcut?: string | null;
  adversarial?: Record<string, number | boolean> | null;
  seed?: number;
  epochs?: number;
  accuracies?: Record<string, number>;
  stitchlabVersion?: string;
  [key: string]: unknown;
}

export const sidecarPath = (path: string): string => `${path.replace(/\.safetensors$/, "")}.json`;

/** Writes model weights to `path` (.safetensors) and `meta` beside it (.json). */
export function saveCheckpoint(
  path: string,
  model: StitchableModel,
  meta: Omit<CheckpointMeta, "arch" | "options">,
): void {
  if (!path.endsWith(".safetensors")) throw new Error(`checkpoint path must end in .safetensors: ${path}`);
  const full: CheckpointMeta = {
    arch: model.arch,
    options: model.config as ModelOptions,
    stitchlabVersion: VERSION,
    ...meta,
  };
  torch.saveSafetensors(path, model.stateDict(), { arch: full.arch, options: JSON.stringify(full.options) });
  torch.writeFileAtomic(sidecarPath(path), [`${JSON.stringify(full, null, 2)}\n`]);
}

/**
 * Rebuilds a zoo model from a checkpoint: stitchlab's (.safetensors with its .json sidecar) or
 * PyTorch's (a state dict saved by torch.save, with `arch` and `options` given by the caller).
 */
export function loadCheckpoint(
  path: string,
  fallback?: { arch: string; options?: ModelOptions },
): { model: StitchableModel; meta: CheckpointMeta } {
  if (!existsSync(path)) throw new Error(`checkpoint not found: ${path}`);
  let meta: CheckpointMeta;
  let sd: Record<string, torch.Tensor>;
  if (path.endsWith(".safetensors")) {
    const side = sidecarPath(path);
    const file = torch.loadSafetensors(path);
    sd = file.tensors;
    if (existsSync(side)) meta = JSON.parse(readFileSync(side, "utf8"));
    else if (file.metadata.arch)
      meta = { arch: file.metadata.arch, options: JSON.parse(file.metadata.options ?? "{}") };
    else if (fallback) meta = { arch: fallback.arch, options: fallback.options ?? {} };
    else throw new Error(`checkpoint ${path} has no sidecar ${side} and names no architecture; pass the model name`);
  } else {
    if (!fallback) throw new Error(`${path} is a PyTorch file: pass the model name (and options) it was saved from`);
    const obj = torch.torchLoad(path) as Record<string, unknown>;
    sd = (obj.state_dict ?? obj.model ?? obj) as Record<string, torch.Tensor>;
    meta = { arch: fallback.arch, options: fallback.options ?? {} };
  }
  const model = createModel(meta.arch, meta.options);
  try {
    model.loadStateDict(sd);
  } catch (e) {
    model.dispose();
    throw new Error(`checkpoint ${path}: ${(e as Error).message}`);
  } finally {
    torch.dispose(sd);
  }
  return { model, meta };
}

/**
 * A SHA-256 over a model's architecture and state dict (names, dtypes, shapes, bytes): what an
 * IRI set records to prove which front model made it, whatever file the model came from.
 */
export function modelFingerprint(model: StitchableModel): string {
  const h = createHash("sha256");
  h.update(`${model.arch}\n`);
  for (const [name, t] of Object.entries(model.stateDict())) {
    h.update(`${name}:${t.dtype}:[${t.shape}]\n`);
    const bytes = torch.tidy(() => {
      const a = t.detach().cpu().contiguous().toTypedArray();
      return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    });
    h.update(bytes);
  }
  return h.digest("hex");
}
