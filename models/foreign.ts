// State dicts made elsewhere (a torch.save file, a safetensors file) as the zoo takes them:
// - unwrapped from the forms training scripts save: {state_dict | model | model_state_dict: ...},
//   DataParallel's `module.` prefix (and torch.compile's `_orig_mod.`), a whole pickled nn.Module
//   (its parameters and persistent buffers read from the module's pickled state; nothing is run);
//   every unwrapping is reported, so a user sees what was taken;
// - recognised: which library's layout the keys follow (torchvision, timm), for the error a
//   mismatch gives instead of a list of every key;
// - read for the options that only change shapes (classes, width, stem, ViT sizes), so that a
//   checkpoint needs its architecture's name and little else.

import type { PyObject } from "../io/pickle.js";
import * as torch from "../torch/index.js";
import type { ModelOptions } from "./registry.js";
import type { StitchableModel } from "./stitchable.js";

type Tensor = torch.Tensor;
export type StateDict = Record<string, Tensor>;

const isTensor = (v: unknown): v is Tensor => v instanceof torch.Tensor;
const isPyObject = (v: unknown): v is PyObject =>
  typeof v === "object" && v !== null && typeof (v as PyObject).__class__ === "string";
const isModule = (v: unknown): v is PyObject & { state: Record<string, unknown> } =>
  isPyObject(v) &&
  typeof v.state === "object" &&
  v.state !== null &&
  "_modules" in (v.state as object) &&
  "_parameters" in (v.state as object);

/** The names in a pickled Python set (a { __class__: "...set", args: [[names]] } record). */
function pySet(v: unknown): Set<string> {
  if (isPyObject(v) && Array.isArray(v.args[0])) return new Set(v.args[0] as string[]);
  return new Set();
}

/** Sets key k as an own property, so that a key "__proto__" from a file never replaces a prototype. */
function put(out: StateDict, k: string, t: Tensor): void {
  Object.defineProperty(out, k, { value: t, enumerable: true, writable: true, configurable: true });
}

/**
 * A pickled nn.Module's state dict: its parameters and persistent buffers, recursively. A crafted
 * file can make a module its own child (through the pickle memo): cycles and absurd depths are errors.
 */
function moduleStateDict(
  m: PyObject & { state: Record<string, unknown> },
  prefix: string,
  out: StateDict,
  seen = new Set<object>(),
): void {
  if (seen.has(m)) throw new Error(`the pickled module at '${prefix}' contains itself`);
  if (seen.size >= 1000) throw new Error("the pickled module nests more than 1000 levels deep");
  seen.add(m);
  const s = m.state;
  const entries = (v: unknown) => (v && typeof v === "object" ? Object.entries(v as object) : []);
  for (const [k, t] of entries(s._parameters)) if (isTensor(t)) put(out, prefix + k, t);
  const transient = pySet(s._non_persistent_buffers_set);
  for (const [k, t] of entries(s._buffers)) if (isTensor(t) && !transient.has(k)) put(out, prefix + k, t);
  for (const [k, child] of entries(s._modules))
    if (isModule(child)) moduleStateDict(child, `${prefix}${k}.`, out, seen);
  seen.delete(m);
}

const WRAPPER_KEYS = ["state_dict", "model_state_dict", "model"] as const;
const PREFIXES = ["module.", "_orig_mod."] as const;

/**
 * The state dict inside what torch.load returned, and what was done to find it (in words).
 * Tensors that are not reached are left to the caller to free (torch.dispose on the whole object).
 */
export function unwrapStateDict(obj: unknown, what: string): { stateDict: StateDict; unwrapped: string[] } {
  const unwrapped: string[] = [];
  let v = obj;
  for (let depth = 0; depth < 4; depth++) {
    // libtorch's pickler (C++ torch::save, stitchlab's torchSave) tags typed containers.
    if (isPyObject(v) && v.__class__ === "torch.jit._pickle.restore_type_tag") {
      v = v.args[0];
      continue;
    }
    if (isModule(v)) {
      const sd: StateDict = {};
      moduleStateDict(v, "", sd);
      unwrapped.push(`a whole pickled ${v.__class__}: its parameters and buffers`);
      v = sd;
      break;
    }
    if (typeof v !== "object" || v === null || Array.isArray(v) || isPyObject(v)) break;
    const entries = Object.entries(v);
    if (entries.length > 0 && entries.every(([, x]) => isTensor(x))) break;
    const key = WRAPPER_KEYS.find((k) => k in (v as object) && typeof (v as Record<string, unknown>)[k] === "object");
    if (!key) break;
    const others = Object.keys(v).filter((k) => k !== key);
    unwrapped.push(
      `'${key}'${others.length ? ` (left: ${others.slice(0, 5).join(", ")}${others.length > 5 ? ", ..." : ""})` : ""}`,
    );
    v = (v as Record<string, unknown>)[key];
  }
  // A tensor is an object too: its own fields would read as keys ("keys: _scope").
  if (isTensor(v))
    throw new Error(
      `${what} holds a bare tensor (${v.dtype} [${v.shape.join(", ")}]), not a state dict or a checkpoint: save the weights with torch.save(model.state_dict(), path) (parameter names to tensors), or a dict holding that under state_dict, model or model_state_dict`,
    );
  if (typeof v !== "object" || v === null || Array.isArray(v) || isPyObject(v))
    throw new Error(
      `${what} holds ${isPyObject(v) ? `a ${v.__class__}` : Array.isArray(v) ? "a list" : typeof v}, not a state dict; save one with torch.save(model.state_dict(), path)`,
    );
  let sd: StateDict = {};
  const skipped: string[] = [];
  for (const [k, x] of Object.entries(v)) {
    if (isTensor(x)) put(sd, k, x);
    else skipped.push(k);
  }
  if (Object.keys(sd).length === 0)
    throw new Error(
      `${what} holds no tensors at the top level${Object.keys(v).length ? ` (keys: ${Object.keys(v).slice(0, 8).join(", ")})` : ""}; save a state dict with torch.save(model.state_dict(), path)`,
    );
  if (skipped.length) unwrapped.push(`skipped entries that are not tensors: ${skipped.slice(0, 5).join(", ")}`);
  for (const p of PREFIXES) {
    const keys = Object.keys(sd);
    if (keys.every((k) => k.startsWith(p))) {
      sd = Object.fromEntries(keys.map((k) => [k.slice(p.length), sd[k] as Tensor]));
      unwrapped.push(`the '${p}' prefix (${p === "module." ? "DataParallel" : "torch.compile"})`);
    }
  }
  return { stateDict: sd, unwrapped };
}

const has = (sd: StateDict, k: string) => k in sd;
const count = (sd: StateDict, re: RegExp) =>
  new Set(
    Object.keys(sd)
      .map((k) => k.match(re)?.[1])
      .filter(Boolean),
  ).size;
const dim = (sd: StateDict, k: string, i: number): number | undefined => sd[k]?.shape[i];

/**
 * Which known layout the keys follow, in words ("timm's vit_small_patch16_224 ..."), or null.
 * Names are those of the libraries (torchvision, timm), judged from signature keys and shapes.
 */
export function recogniseStateDict(sd: StateDict): string | null {
  if (has(sd, "patch_embed.proj.weight") && has(sd, "cls_token")) {
    const d = dim(sd, "patch_embed.proj.weight", 0) ?? 0;
    const p = dim(sd, "patch_embed.proj.weight", 2) ?? 0;
    const tokens = (dim(sd, "pos_embed", 1) ?? 1) - 1;
    const size = Math.round(Math.sqrt(tokens)) * p;
    const depth = count(sd, /^blocks\.(\d+)\./);
    const name = ({ 192: "tiny", 384: "small", 768: "base", 1024: "large" } as Record<number, string>)[d];
    return `timm's ${name ? `vit_${name}_patch${p}_${size}` : "VisionTransformer"} (embed dim ${d}, ${depth} blocks, patch ${p}, ${size} px)`;
  }
  if (has(sd, "conv_proj.weight") && Object.keys(sd).some((k) => k.startsWith("encoder.layers.")))
    return "torchvision's VisionTransformer (vit_b_16 and kin: conv_proj, encoder.layers)";
  if (has(sd, "conv1.weight") && has(sd, "layer1.0.conv1.weight")) {
    const blocks = [1, 2, 3, 4].map((i) => count(sd, new RegExp(`^layer${i}\\.(\\d+)\\.`)));
    const bottleneck = has(sd, "layer1.0.conv3.weight");
    const depths: Record<string, string> = bottleneck
      ? { "3,4,6,3": "resnet50", "3,4,23,3": "resnet101", "3,8,36,3": "resnet152" }
      : { "2,2,2,2": "resnet18", "3,4,6,3": "resnet34" };
    const name =
      depths[blocks.join()] ?? `a ResNet with ${bottleneck ? "Bottleneck" : "BasicBlock"} blocks ${blocks.join("-")}`;
    return `torchvision's ${name} (${bottleneck ? "Bottleneck" : "BasicBlock"} blocks ${blocks.join("-")}, ${dim(sd, "fc.weight", 0) ?? "?"} classes)`;
  }
  if (Object.keys(sd).some((k) => /^features\.\d+\.weight$/.test(k)) && has(sd, "classifier.0.weight")) {
    const convs = Object.keys(sd).filter((k) => /^features\.\d+\.weight$/.test(k) && sd[k]?.shape.length === 4).length;
    const bn = Object.keys(sd).some((k) => /^features\.\d+\.running_mean$/.test(k));
    const depth = ({ 8: 11, 10: 13, 13: 16, 16: 19 } as Record<number, number>)[convs];
    return `torchvision's ${depth ? `vgg${depth}${bn ? "_bn" : ""}` : `VGG with ${convs} convolutions`}`;
  }
  return null;
}

/**
 * Options that only change shapes, read from the weights of a zoo architecture (number of
 * classes, width, ResNet stem, ViT sizes, input channels). Those the caller gives win.
 */
export function inferOptions(arch: string, sd: StateDict): ModelOptions {
  const o: ModelOptions = {};
  if (arch.startsWith("resnet")) {
    const c0 = dim(sd, "conv1.weight", 0);
    const k = dim(sd, "conv1.weight", 2);
    if (c0 !== undefined) o.width = c0 / 64;
    if (k !== undefined) o.stem = k === 7 ? "imagenet" : "cifar";
    if (dim(sd, "fc.weight", 0) !== undefined) o.numClasses = dim(sd, "fc.weight", 0);
  } else if (arch.startsWith("vgg")) {
    const c0 = dim(sd, "features.0.weight", 0);
    if (c0 !== undefined) o.width = c0 / 64;
    if (dim(sd, "classifier.6.weight", 0) !== undefined) o.numClasses = dim(sd, "classifier.6.weight", 0);
  } else if (arch.startsWith("vit")) {
    const d = dim(sd, "patch_embed.proj.weight", 0);
    const p = dim(sd, "patch_embed.proj.weight", 2);
    const tokens = dim(sd, "pos_embed", 1);
    if (d !== undefined) {
      o.embedDim = d;
      // timm's ViTs have 64-wide heads (tiny 3, small 6, base 12); the weights cannot say.
      o.numHeads = d / 64;
    }
    if (p !== undefined) o.patchSize = p;
    if (tokens !== undefined && p !== undefined) o.imageSize = Math.round(Math.sqrt(tokens - 1)) * p;
    const depth = count(sd, /^blocks\.(\d+)\./);
    if (depth > 0) o.depth = depth;
    if (dim(sd, "head.weight", 0) !== undefined) o.numClasses = dim(sd, "head.weight", 0);
  }
  return o;
}

const sample = (xs: string[], n = 3) => `${xs.slice(0, n).join(", ")}${xs.length > n ? `, ... (${xs.length})` : ""}`;

/**
 * Why a state dict does not fit a model, in a few lines: counts and a few examples of missing,
 * unexpected and mis-shaped keys, what the keys look like, and options that would fit the shapes.
 * Null when it fits.
 */
export function describeMismatch(model: StitchableModel, sd: StateDict, givenOptions: ModelOptions): string | null {
  const own = model.stateDict();
  const missing = Object.keys(own).filter((k) => !(k in sd));
  const unexpected = Object.keys(sd).filter((k) => !(k in own));
  const shaped = Object.keys(own).filter((k) => k in sd && sd[k]?.shape.join() !== own[k]?.shape.join());
  if (!missing.length && !unexpected.length && !shaped.length) return null;
  const lines = [`the weights do not fit the zoo's ${model.arch}:`];
  if (missing.length) lines.push(`  ${missing.length} of its keys are missing (${sample(missing)})`);
  if (unexpected.length) lines.push(`  ${unexpected.length} keys are not its own (${sample(unexpected)})`);
  if (shaped.length)
    lines.push(
      `  ${shaped.length} keys have other shapes (${shaped
        .slice(0, 2)
        .map((k) => `${k}: file [${sd[k]?.shape.join(", ")}], model [${own[k]?.shape.join(", ")}]`)
        .join("; ")}${shaped.length > 2 ? ", ..." : ""})`,
    );
  const looks = recogniseStateDict(sd);
  if (looks) lines.push(`  these keys look like ${looks}`);
  if (shaped.length && !missing.length && !unexpected.length) {
    const inferred = inferOptions(model.arch, sd);
    const differ = Object.entries(inferred).filter(
      ([k, v]) =>
        (givenOptions as Record<string, unknown>)[k] !== undefined &&
        (givenOptions as Record<string, unknown>)[k] !== v,
    );
    if (differ.length)
      lines.push(`  the shapes say ${differ.map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join(", ")}`);
  }
  return lines.join("\n");
}
