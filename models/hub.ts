// Models named by hub, wherever a checkpoint is accepted (models/checkpoint.ts modelSourceSchema:
// stitch's and iris's --front/--back, import, layers --checkpoint, an experiment file's
// checkpoint:). resolveModelSource is the one place a hub name becomes a local file with the
// facts the hub publishes about it; loadCheckpoint and the experiment planner call it.
//
//   hf-hub:ORG/NAME[@REVISION]   a timm model on the Hugging Face hub, as timm names it
//                                (hf-hub:timm/resnet18.a1_in1k): config.json (timm's pretrained
//                                config: architecture, num_classes, input_size, mean, std) and
//                                model.safetensors, else pytorch_model.bin, as timm reads them
//   torchvision:ARCH[.WEIGHTS]   torchvision's ImageNet weights (torchvision:resnet50 is its
//                                DEFAULT, torchvision:resnet50.IMAGENET1K_V1 a named set), or the
//   torchvision:FILE             weights file by its published name (resnet18-f37072fd.pth)
//
// Files are downloaded once into the stitchlab cache, under hub/ (io/download.ts: verified, and
// renamed into place only when whole; each a model's file, so one whose size the server does not
// give has the model cap, io/download.ts MODEL_FILE_MAX_MB), and used from there without the
// network afterwards. The hubs' base URLs come from the environment (STITCHLAB_HF_ENDPOINT, else
// HF_ENDPOINT, else https://huggingface.co; STITCHLAB_TORCHVISION_URL, else
// https://download.pytorch.org/models), so a mirror, or the tests' local server, takes the same
// code path. STITCHLAB_OFFLINE=1 never touches the network.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { IMAGENET_NORMALIZATION } from "../data/index.js";
import { DownloadError, type DownloadResult, downloadSync } from "../io/download.js";
import { readJsonFile, stitchlabCacheDir, writeFileAtomic } from "../io/files.js";
import { safetensorsShapes } from "../io/safetensors.js";
import { torchLoad } from "../io/torchsave.js";
import * as torch from "../torch/index.js";
import type { ModelSource, ModelSourceLike } from "./checkpoint.js";
import { unwrapStateDict } from "./foreign.js";

export const HF_PREFIX = "hf-hub:";
export const TORCHVISION_PREFIX = "torchvision:";

/** Whether a checkpoint string names a model by hub (hf-hub:..., torchvision:...) rather than a file. */
export const isHubName = (s: string): boolean => s.startsWith(HF_PREFIX) || s.startsWith(TORCHVISION_PREFIX);

export type HubName =
  | { hub: "hf"; name: string; repo: string; revision: string }
  | { hub: "torchvision"; name: string; arch: string; file: string; sha256Prefix: string; weights: string | null };

/**
 * torchvision's ImageNet weights for the zoo's architectures, as its weight enums give them
 * (torchvision.models.*_Weights; DEFAULT is the best set). The file names are content-addressed
 * (the hex digits are the start of the file's SHA-256, which torch.hub checks), so a name always
 * means the same bytes; new weights get new names. torchvision's ViTs (vit_b_16, ...) keep other
 * parameter names (conv_proj, encoder.layers) than the zoo's ViTs, which are timm's: take those
 * from hf-hub:timm/.
 */
export const TORCHVISION_WEIGHTS: Record<string, { default: string; sets: Record<string, string> }> = {
  resnet18: { default: "IMAGENET1K_V1", sets: { IMAGENET1K_V1: "resnet18-f37072fd.pth" } },
  resnet50: {
    default: "IMAGENET1K_V2",
    sets: { IMAGENET1K_V1: "resnet50-0676ba61.pth", IMAGENET1K_V2: "resnet50-11ad3fa6.pth" },
  },
  vgg16_bn: { default: "IMAGENET1K_V1", sets: { IMAGENET1K_V1: "vgg16_bn-6c64b313.pth" } },
};

/**
 * timm architectures (config.json's `architecture`) whose weights the zoo loads as they are:
 * timm's ResNets keep torchvision's parameter names, and the zoo's ViTs are timm's. timm's own
 * vgg16_bn is not among them: it holds its classifier as convolutions (pre_logits), where the
 * zoo's vgg16_bn is torchvision's.
 */
export const TIMM_ARCHS = [
  "resnet18",
  "resnet50",
  "vit_tiny_patch16_224",
  "vit_small_patch16_224",
  "vit_base_patch16_224",
];

const HF_FORM = "hf-hub:ORG/NAME or hf-hub:ORG/NAME@REVISION (e.g. hf-hub:timm/resnet18.a1_in1k)";
const TV_FORM = `torchvision:ARCH, torchvision:ARCH.WEIGHTS or torchvision:FILE (e.g. torchvision:resnet50, torchvision:resnet50.IMAGENET1K_V1, torchvision:resnet50-11ad3fa6.pth; ARCH: ${Object.keys(TORCHVISION_WEIGHTS).join(", ")})`;

/** Parses a hub name; a string with a hub's prefix that is not a valid name is an error saying the form. */
export function parseHubName(s: string): HubName {
  if (s.startsWith(HF_PREFIX)) {
    const rest = s.slice(HF_PREFIX.length);
    const m = rest.match(/^([A-Za-z0-9][\w.-]*)\/([A-Za-z0-9][\w.-]*)(?:@([\w.\-/]+))?$/);
    if (!m || rest.includes("..")) throw new Error(`'${s}' is not a Hugging Face model name: expected ${HF_FORM}`);
    return { hub: "hf", name: s, repo: `${m[1]}/${m[2]}`, revision: m[3] ?? "main" };
  }
  if (s.startsWith(TORCHVISION_PREFIX)) {
    const rest = s.slice(TORCHVISION_PREFIX.length);
    // A weights file by its published name: ARCH-HASH.pth, the hash torch.hub's check_hash reads.
    const file = rest.match(/^([a-z0-9_]+)-([0-9a-f]{8,64})\.pth$/);
    if (file) {
      const arch = file[1];
      if (!TORCHVISION_WEIGHTS[arch]) throw new Error(torchvisionArchMessage(s, arch));
      return { hub: "torchvision", name: s, arch, file: rest, sha256Prefix: file[2], weights: null };
    }
    const m = rest.match(/^([a-z0-9_]+)(?:\.([A-Za-z0-9_]+))?$/);
    if (!m) throw new Error(`'${s}' is not a torchvision weights name: expected ${TV_FORM}`);
    const arch = m[1];
    const entry = TORCHVISION_WEIGHTS[arch];
    if (!entry) throw new Error(torchvisionArchMessage(s, arch));
    const weights = !m[2] || m[2] === "DEFAULT" ? entry.default : m[2];
    const name = entry.sets[weights];
    if (!name)
      throw new Error(
        `'${s}': torchvision's ${arch} has no weights ${weights}; it has ${Object.keys(entry.sets).join(", ")} (DEFAULT: ${entry.default})`,
      );
    const sha256Prefix = name.match(/-([0-9a-f]+)\.pth$/)?.[1] ?? "";
    return { hub: "torchvision", name: s, arch, file: name, sha256Prefix, weights };
  }
  throw new Error(`'${s}' is not a hub name (${HF_FORM}; ${TV_FORM})`);
}

function torchvisionArchMessage(s: string, arch: string): string {
  const vit = arch.startsWith("vit")
    ? ": torchvision's ViTs keep other parameter names than the zoo's (timm's); name timm's from the Hugging Face hub, e.g. hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k"
    : "";
  return `'${s}': the zoo has no torchvision architecture ${arch}${vit}; torchvision weights are taken for ${Object.keys(TORCHVISION_WEIGHTS).join(", ")}`;
}

/** The hubs' base URLs (no trailing slash), from the environment. */
export function hubEndpoints(): { hf: string; torchvision: string } {
  const strip = (u: string) => u.replace(/\/+$/, "");
  return {
    hf: strip(process.env.STITCHLAB_HF_ENDPOINT || process.env.HF_ENDPOINT || "https://huggingface.co"),
    torchvision: strip(process.env.STITCHLAB_TORCHVISION_URL || "https://download.pytorch.org/models"),
  };
}

/** Where models from the hubs are kept: the stitchlab cache's hub/ folder. */
export const hubCacheDir = (): string => join(stitchlabCacheDir(), "hub");

const offline = (): boolean => ["1", "true", "yes"].includes((process.env.STITCHLAB_OFFLINE ?? "").toLowerCase());

/** The URL of a file of a Hugging Face repository at a revision, as huggingface_hub's hf_hub_url makes it. */
export const hfFileUrl = (repo: string, revision: string, file: string): string =>
  `${hubEndpoints().hf}/${repo}/resolve/${encodeURIComponent(revision)}/${file}`;

/** The folder a Hugging Face model's files are kept in: hub/huggingface/ORG/NAME/REVISION. */
export const hfCacheFolder = (repo: string, revision: string): string =>
  join(hubCacheDir(), "huggingface", ...repo.split("/"), encodeURIComponent(revision));

/** Weight files of a timm model on the hub, in the order timm tries them. */
export const HF_WEIGHT_FILES = ["model.safetensors", "pytorch_model.bin"] as const;

interface Wanted {
  url: string;
  path: string;
}

/**
 * The error for a model that is not in the cache and cannot be downloaded: why, then each file's
 * exact URL and the exact path to put it at, and how to tell stitchlab it is there.
 */
function notCachedError(name: string, why: string, wanted: Wanted[], alternatives = ""): Error {
  const lines = [
    `${name} is not in the cache and cannot be downloaded: ${why}.`,
    `To use it without the network, download${wanted.length > 1 ? " each file" : ""} elsewhere and put it here:`,
    ...wanted.map((w) => `  ${w.url}\n    -> ${w.path}`),
  ];
  if (alternatives) lines.push(alternatives);
  lines.push("(e.g. curl -fL -o PATH URL; the cache is $STITCHLAB_CACHE, else ~/.cache/stitchlab)");
  return new Error(lines.join("\n"));
}

/** A download, its failure as one error naming the model and the URL; an unreachable hub says what to fetch by hand. */
function fetchOne(
  name: string,
  job: Parameters<typeof downloadSync>[0],
  wanted: () => Wanted[],
  alternatives = "",
): DownloadResult {
  try {
    return downloadSync(job);
  } catch (e) {
    if (e instanceof DownloadError && e.kind === "unreachable")
      throw notCachedError(name, e.message, wanted(), alternatives);
    throw new Error(`${name}: ${(e as Error).message}`);
  }
}

/** The download record kept beside a Hugging Face model's files (source.json): URLs, the commit, hashes. */
interface HfRecord {
  name: string;
  revision: string;
  commit?: string;
  files: Record<string, unknown>;
}

/**
 * A Hugging Face model in the cache, fetched a file at a time when missing: its config.json first
 * (read before the weights, so a model the zoo cannot build is refused before they are fetched),
 * then its weights, model.safetensors, else pytorch_model.bin, as timm tries them.
 */
class HfModel {
  readonly dir: string;
  readonly config: string;
  private readonly recordPath: string;

  constructor(readonly h: Extract<HubName, { hub: "hf" }>) {
    this.dir = hfCacheFolder(h.repo, h.revision);
    this.config = join(this.dir, "config.json");
    this.recordPath = join(this.dir, "source.json");
  }

  /** What to fetch by hand, for the error when the hub cannot be reached. */
  private wanted(): Wanted[] {
    const { repo, revision } = this.h;
    return [
      ...(existsSync(this.config) ? [] : [{ url: hfFileUrl(repo, revision, "config.json"), path: this.config }]),
      { url: hfFileUrl(repo, revision, HF_WEIGHT_FILES[0]), path: join(this.dir, HF_WEIGHT_FILES[0]) },
    ];
  }

  private orBin(): string {
    const { repo, revision } = this.h;
    return `(or, for a model without ${HF_WEIGHT_FILES[0]}: ${hfFileUrl(repo, revision, HF_WEIGHT_FILES[1])} -> ${join(this.dir, HF_WEIGHT_FILES[1])})`;
  }

  private cachedWeights(): string | undefined {
    return HF_WEIGHT_FILES.map((f) => join(this.dir, f)).find((p) => existsSync(p));
  }

  private record(): HfRecord {
    return existsSync(this.recordPath)
      ? readJsonFile<HfRecord>(this.recordPath, "a hub model's download record")
      : { name: this.h.name, revision: this.h.revision, files: {} };
  }

  private save(record: HfRecord): void {
    writeFileAtomic(this.recordPath, [`${JSON.stringify(record, null, 2)}\n`]);
  }

  private refuseOffline(): void {
    if (offline() && !(existsSync(this.config) && this.cachedWeights()))
      throw notCachedError(this.h.name, "STITCHLAB_OFFLINE is set", this.wanted(), this.orBin());
  }

  /** config.json's path, fetched when missing. */
  configFile(): string {
    if (existsSync(this.config)) return this.config;
    this.refuseOffline();
    const r = fetchOne(
      this.h.name,
      {
        url: hfFileUrl(this.h.repo, this.h.revision, "config.json"),
        dest: this.config,
        hf: true,
        model: true,
        label: `${this.h.name} config.json`,
      },
      () => this.wanted(),
      this.orBin(),
    );
    const record = this.record();
    if (r.commit) record.commit = r.commit;
    record.files["config.json"] = fileRecord(r);
    this.save(record);
    return this.config;
  }

  /** The weights' path, fetched when missing: at the commit config.json came from, so a push in between cannot mix the two. */
  weightsFile(): string {
    const found = this.cachedWeights();
    if (found) return found;
    this.refuseOffline();
    const record = this.record();
    const at = record.commit && /^[0-9a-f]{40}$/.test(record.commit) ? record.commit : this.h.revision;
    const tried: string[] = [];
    for (const file of HF_WEIGHT_FILES) {
      const url = hfFileUrl(this.h.repo, at, file);
      try {
        const r = downloadSync({
          url,
          dest: join(this.dir, file),
          hf: true,
          model: true,
          label: `${this.h.name} ${file}`,
        });
        record.files[file] = fileRecord(r);
        this.save(record);
        return r.path;
      } catch (e) {
        if (e instanceof DownloadError && e.kind === "not-found") {
          tried.push(url);
          continue;
        }
        if (e instanceof DownloadError && e.kind === "unreachable")
          throw notCachedError(this.h.name, e.message, this.wanted(), this.orBin());
        throw new Error(`${this.h.name}: ${(e as Error).message}`);
      }
    }
    throw new Error(
      `${this.h.name}: the hub has no weights for it: ${tried.map((u) => `${u} (404)`).join(" and ")}; timm's models have one of ${HF_WEIGHT_FILES.join(" or ")}`,
    );
  }
}

const fileRecord = (r: DownloadResult) => ({
  url: r.url,
  ...(r.from !== r.url ? { from: r.from } : {}),
  bytes: r.bytes,
  sha256: r.sha256,
  ...(r.etag ? { etag: r.etag } : {}),
  verified: r.verified,
  downloaded: new Date().toISOString(),
});

/** torchvision's weights file in the cache (downloaded now when missing): hub/torchvision/FILE. */
function torchvisionFile(h: Extract<HubName, { hub: "torchvision" }>): string {
  const path = join(hubCacheDir(), "torchvision", h.file);
  if (existsSync(path)) return path;
  const url = `${hubEndpoints().torchvision}/${h.file}`;
  const wanted = () => [{ url, path }];
  const torchCache = `(a copy torch.hub downloaded, ~/.cache/torch/hub/checkpoints/${h.file}, is the same file: copy it there)`;
  if (offline()) throw notCachedError(h.name, "STITCHLAB_OFFLINE is set", wanted(), torchCache);
  return fetchOne(
    h.name,
    { url, dest: path, sha256Prefix: h.sha256Prefix, model: true, label: h.weights ? `${h.name} (${h.file})` : h.name },
    wanted,
    torchCache,
  ).path;
}

/**
 * The fields of timm's config.json that stitchlab reads, in both of timm's forms (the old one at
 * the top, the current one under pretrained_cfg, as load_model_config_from_hf reads them); the
 * rest (label names, licences, ...) is left alone. A hub's file is data from elsewhere: a field
 * of the wrong kind is refused here, naming it, rather than reaching libtorch as `tensor():
 * expected numbers`.
 */
const statsSchema = z.array(z.number().min(0).max(1, "expected values in [0, 1] (pixel units)")).min(1);
const pretrainedFields = {
  num_classes: z.number().int().min(0).optional(),
  input_size: z.array(z.number().int().min(1)).length(3, "expected [channels, height, width]").optional(),
  mean: statsSchema.optional(),
  std: z.array(z.number().positive().max(1, "expected values in (0, 1] (pixel units)")).min(1).optional(),
};
const timmConfigSchema = z.looseObject({
  architecture: z.string().optional(),
  model_args: z.record(z.string(), z.unknown()).optional(),
  pretrained_cfg: z.looseObject(pretrainedFields).optional(),
  ...pretrainedFields,
});
type TimmConfig = z.infer<typeof timmConfigSchema>;

/** `pretrained_cfg.mean[0]` from a zod path. */
const fieldOf = (path: readonly PropertyKey[]): string =>
  path.reduce<string>(
    (out, p) => (typeof p === "number" ? `${out}[${p}]` : out ? `${out}.${String(p)}` : String(p)),
    "",
  );

/** A model's config.json, read and checked against timmConfigSchema; a problem names the file and the field. */
export function readTimmConfig(name: string, file: string): TimmConfig {
  const r = timmConfigSchema.safeParse(readJsonFile<unknown>(file, `${name}'s config.json`));
  if (!r.success) {
    const issue = r.error.issues[0];
    throw new Error(
      `${name}: ${file}: ${fieldOf(issue.path) || "(top level)"}: ${issue.message}; the hub's config.json is not timm's (or is damaged)`,
    );
  }
  return r.data;
}

/** The class count config.json gives, and the field it is in. */
const classesOf = (cfg: TimmConfig): { field: string; value: number } | undefined =>
  cfg.num_classes !== undefined
    ? { field: "num_classes", value: cfg.num_classes }
    : cfg.pretrained_cfg?.num_classes !== undefined
      ? { field: "pretrained_cfg.num_classes", value: cfg.pretrained_cfg.num_classes }
      : undefined;

/** The weights of a timm architecture that hold its classes: the head's weight, [classes, features]. */
const headOf = (arch: string): string => (arch.startsWith("vit") ? "head.weight" : "fc.weight");

/**
 * Refuses a config.json whose class count is not the weights' own, before a model is built from
 * it: the config's count becomes the model's head, and an absurd one (1e12) reached libtorch as an
 * allocation of 128 TB. The head's shape is read from the safetensors header alone; a torch.save
 * file is loaded for it (and freed).
 */
function checkClasses(name: string, configFile: string, cfg: TimmConfig, arch: string, weights: string): void {
  const classes = classesOf(cfg);
  if (!classes) return;
  const head = headOf(arch);
  let shape: number[] | undefined;
  if (weights.endsWith(".safetensors")) shape = safetensorsShapes(weights)[head];
  else {
    const obj = torchLoad(weights);
    try {
      shape = unwrapStateDict(obj, weights).stateDict[head]?.shape;
    } finally {
      torch.dispose(obj);
    }
  }
  if (classes.value === 0 && shape === undefined) return; // timm's headless form; the zoo's options say the rest
  if (shape?.[0] !== classes.value)
    throw new Error(
      `${name}: ${configFile}: ${classes.field} is ${classes.value}, but ${shape ? `the weights' head (${head} [${shape.join(", ")}]) has ${shape[0]} classes` : `the weights have no head (${head})`} (${weights}): the config does not belong to these weights; nothing was built`,
    );
}

/** What a timm model's config.json says, as the model source's fields; an architecture the zoo lacks is refused. */
export function timmConfigFacts(name: string, cfg: TimmConfig): Omit<ModelSource, "checkpoint"> {
  // The old form keeps everything at the top; the new one under pretrained_cfg.
  const pre = cfg.pretrained_cfg ?? cfg;
  const arch = cfg.architecture;
  if (typeof arch !== "string")
    throw new Error(`${name}: its config.json names no architecture: not a timm model (timm's config.json has one)`);
  if (arch === "vgg16_bn")
    throw new Error(
      `${name} is timm's vgg16_bn, whose classifier is held as convolutions (pre_logits.fc1 [4096, 512, 7, 7]); the zoo's vgg16_bn is torchvision's: name torchvision:vgg16_bn (the same ImageNet weights)`,
    );
  if (!TIMM_ARCHS.includes(arch))
    throw new Error(
      `${name} is timm's ${arch}, which the zoo lacks: from timm it takes ${TIMM_ARCHS.join(", ")}; torchvision's weights for ${Object.keys(TORCHVISION_WEIGHTS).join(", ")} (torchvision:ARCH)`,
    );
  const args = cfg.model_args ?? {};
  if (Object.keys(args).length)
    throw new Error(
      `${name}: timm builds it with model_args ${JSON.stringify(args)}, which change timm's ${arch}; the zoo builds ${arch} as timm's default only`,
    );
  const numClasses = classesOf(cfg)?.value;
  const inputSize = pre.input_size;
  const mean = pre.mean;
  const std = pre.std;
  const facts: Omit<ModelSource, "checkpoint"> = { arch };
  if (numClasses !== undefined) facts.options = { numClasses };
  if (inputSize) {
    const [c, hgt, w] = inputSize;
    if (hgt !== w)
      throw new Error(`${name}: input_size ${JSON.stringify(inputSize)}: the zoo's models take square images`);
    if (c !== 3) throw new Error(`${name}: input_size ${JSON.stringify(inputSize)}: the zoo's models take 3 channels`);
    facts.imageSize = hgt;
  }
  if (mean && std) {
    if (mean.length !== std.length)
      throw new Error(
        `${name}: its config.json gives ${mean.length} means and ${std.length} stds: one of each per channel`,
      );
    facts.normalization = namedNormalization(mean, std);
  } else throw new Error(`${name}: its config.json gives no mean and std (timm's pretrained_cfg has them)`);
  return facts;
}

/** ImageNet's statistics by name (as the rest of stitchlab writes them), others as numbers. */
function namedNormalization(mean: number[], std: number[]): ModelSource["normalization"] {
  const same = (a: number[], b: number[]) => a.length === b.length && a.every((x, i) => Math.abs(x - b[i]) < 1e-9);
  return same(mean, IMAGENET_NORMALIZATION.mean) && same(std, IMAGENET_NORMALIZATION.std) ? "imagenet" : { mean, std };
}

/**
 * A model source with its checkpoint as a local file: a hub name becomes the file in the cache
 * (downloaded, verified, when it is not there yet) with what the hub says of the model
 * (architecture, classes, input size, normalisation); the source's own fields override those,
 * except an architecture that contradicts the hub's. Any other source is returned as it is.
 */
export function resolveModelSource(source: ModelSourceLike): ModelSource {
  const src: ModelSource = typeof source === "string" ? { checkpoint: source } : source;
  if (!isHubName(src.checkpoint)) return src;
  const h = parseHubName(src.checkpoint);
  let checkpoint: string;
  let facts: Omit<ModelSource, "checkpoint">;
  if (h.hub === "hf") {
    const hf = new HfModel(h);
    const configFile = hf.configFile();
    const cfg = readTimmConfig(h.name, configFile);
    facts = timmConfigFacts(h.name, cfg);
    checkpoint = hf.weightsFile();
    checkClasses(h.name, configFile, cfg, facts.arch as string, checkpoint);
  } else {
    checkpoint = torchvisionFile(h);
    // torchvision's ImageNet classifiers: 1000 classes, 224 px crops, ImageNet's statistics.
    facts = { arch: h.arch, options: { numClasses: 1000 }, imageSize: 224, normalization: "imagenet" };
  }
  if (src.arch !== undefined && src.arch !== facts.arch)
    throw new Error(
      `${h.name} is ${h.hub === "hf" ? "timm" : "torchvision"}'s ${facts.arch}, not ${src.arch}: leave arch out`,
    );
  const { checkpoint: _, ...given } = src;
  const defined = Object.fromEntries(Object.entries(given).filter(([, v]) => v !== undefined));
  const options = { ...(facts.options ?? {}), ...(src.options ?? {}) };
  return {
    ...facts,
    ...defined,
    ...(Object.keys(options).length ? { options } : {}),
    checkpoint,
  };
}
