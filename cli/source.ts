// How the command line names a model: a checkpoint file, and for weights made elsewhere what the
// file cannot say, in the same words as an experiment file's model entry (one schema for both:
// models/checkpoint.ts modelSourceSchema):
//   --front FILE --front-arch resnet18 --front-options '{numClasses: 10, stem: imagenet}'
//       --front-normalization imagenet --front-image-size 224
// (and the same with --back-). Options and normalisation are YAML flow or JSON.
import { existsSync } from "node:fs";
import type { Command } from "commander";
import { parse as parseYaml } from "yaml";
import { isNormalizationName, NORMALIZATION_NAMES } from "../data/transforms.js";
import {
  checkpointDataset,
  foreignWeightsFacts,
  isOnnxFile,
  isStitchlabCheckpoint,
  type ModelSourceLike,
  modelSourceSchema,
} from "../models/checkpoint.js";
import { isHubName, resolveModelSource } from "../models/hub.js";
import { modelNames } from "../models/registry.js";
import { imageSide } from "./parse.js";

type Role = "front" | "back";

/** The architectures a file made elsewhere may fit, as every command's --arch help lists them. */
export const ARCH_HELP = (): string =>
  `for weights made elsewhere (a torch.save or safetensors file): the zoo architecture they fit (${modelNames().join(", ")})`;

/** The input statistics a model was trained with, as every command's --normalization help lists them. */
export const NORMALIZATION_HELP = `the statistics its inputs were normalised with in training: ${NORMALIZATION_NAMES.filter((n) => n !== "imagefolder" && n !== "none").join(", ")}, none ([0, 1] pixels as they are, as the reference's 32 px models), or '{mean: [...], std: [...]}'`;

/** Adds --ROLE-arch, --ROLE-options, --ROLE-normalization and --ROLE-image-size to a command. */
export function addModelSourceOptions(cmd: Command, role: Role): Command {
  return cmd
    .option(`--${role}-arch <name>`, ARCH_HELP())
    .option(
      `--${role}-options <yaml>`,
      "createModel options the weights' shapes do not show, e.g. '{numHeads: 6}' (classes, width, stem and ViT sizes are read from the weights)",
    )
    .option(`--${role}-normalization <name|yaml>`, NORMALIZATION_HELP)
    .option(`--${role}-image-size <px>`, "the side of the images it was trained on", imageSide);
}

/**
 * A command about two models takes the facts of both at once: --arch, --options and
 * --normalization, each a fallback of its --front-/--back- flag (bothModels applies them).
 */
export function addBothModelOptions(cmd: Command): Command {
  return cmd
    .option("--arch <name>", `${ARCH_HELP()}: both (or --front-arch / --back-arch)`)
    .option("--options <yaml>", "createModel options of both that the weights do not show, e.g. '{numHeads: 6}'")
    .option(
      "--normalization <name|yaml>",
      `${NORMALIZATION_HELP}: both (or --front-normalization / --back-normalization)`,
    );
}

/** Where bothModels puts the role keys it filled from a both-model flag: an error names the flag given. */
const FROM_BOTH = "__fromBoth";

/** The model flags for both models (--arch, ...) under each role's own name, where that one is not given. */
export function bothModels(
  o: Record<string, unknown>,
  keys = ["Arch", "Options", "Normalization"],
): Record<string, unknown> {
  const out: Record<string, unknown> = { ...o };
  const filled: string[] = [];
  for (const k of keys) {
    const both = o[`${k[0]?.toLowerCase()}${k.slice(1)}`];
    for (const role of ["front", "back"])
      if (out[`${role}${k}`] === undefined && both !== undefined) {
        out[`${role}${k}`] = both;
        filled.push(`${role}${k}`);
      }
  }
  out[FROM_BOTH] = filled;
  return out;
}

function yamlValue(flag: string, text: string | undefined): unknown {
  if (text === undefined) return undefined;
  try {
    return parseYaml(text);
  } catch (e) {
    throw new Error(`${flag}: not YAML or JSON: ${(e as Error).message.split("\n")[0]}`);
  }
}

/**
 * The model source the flags give for ROLE ("front", "back", or null for a command about one
 * model, whose flags are --arch, --options, --normalization, --image-size): the checkpoint path
 * alone (a stitchlab checkpoint), or the path with the rest, validated by the experiment file's
 * schema (errors name the flag).
 */
export function modelSourceFrom(o: Record<string, unknown>, role: Role | null, file: string): ModelSourceLike {
  const key = (k: string) => (role ? `${role}${k}` : `${k[0]?.toLowerCase()}${k.slice(1)}`);
  // A value that came from a both-model flag (--normalization for --front-normalization) is named by it.
  const fromBoth = new Set((o[FROM_BOTH] as string[] | undefined) ?? []);
  const flag = (k: string) => {
    const both = role !== null && fromBoth.has(`${role}${k[0]?.toUpperCase()}${k.slice(1)}`);
    return `--${role && !both ? `${role}-` : ""}${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
  };
  const arch = o[key("Arch")] as string | undefined;
  const options = yamlValue(flag("options"), o[key("Options")] as string | undefined);
  const rawNorm = o[key("Normalization")] as string | undefined;
  // A bare word is a dataset's statistics (an empty one is refused as such); anything else is YAML ({mean, std}).
  const normalization =
    rawNorm === undefined || /^[\w-]*$/.test(rawNorm) ? rawNorm : yamlValue(flag("normalization"), rawNorm);
  const imageSize = o[key("ImageSize")] as number | undefined;
  const given = { arch, options, normalization, imageSize };
  if (Object.values(given).every((v) => v === undefined)) {
    askOnce(o, role);
    return file;
  }
  const parsed = modelSourceSchema.safeParse({
    checkpoint: file,
    ...Object.fromEntries(Object.entries(given).filter(([, v]) => v !== undefined)),
  });
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const field = String(issue?.path[0] ?? "");
    throw new Error(
      `${field === "checkpoint" ? `--${role ?? "checkpoint"}` : flag(field)}: ${issue?.message ?? "invalid"}`,
    );
  }
  askOnce(o, role);
  return parsed.data;
}

/**
 * A command that names its models by --front and --back (stitch, iris) asks for what their files
 * do not say all at once, on its first modelSourceFrom, before any weights are loaded: the dataset
 * defaults to the back's (stitch) or else the front's (iris). Other commands ask for themselves
 * (compare, import: requireModelSettings).
 */
function askOnce(o: Record<string, unknown>, role: Role | null): void {
  if (!role || (typeof o.front !== "string" && typeof o.back !== "string")) return;
  const models = (["front", "back"] as const)
    .filter((r) => typeof o[r] === "string")
    .map((r): CommandModel => ({ role: r, file: o[r] as string }));
  // Asked by role (--front-*, --back-*), not by stitch's both-model flags: stitch's --image-size is
  // the data's side, so a prompt by both-model names would send a model's side to the data.
  requireModelSettings(o, models, {
    dataset: { flag: "--dataset", given: o.dataset as string | undefined, from: o.back ? "back" : "front" },
  });
}

/** A model of a command, for requireModelSettings: its role (null: the command's one model), its file, and its name in words. */
export interface CommandModel {
  role: Role | null;
  file: string;
  /** What the message calls it (default: "the front", "the back", or its path). */
  name?: string;
}

export interface SettingsContext {
  /** The command has flags for both models at once (compare's --arch, --normalization, --image-size). */
  both?: boolean;
  /**
   * Whether a model's normalisation must be given ("required": it is run on data), or defaults to
   * the dataset's statistics ("dataset": import, whose --dataset is the data it was trained on).
   */
  normalization?: "required" | "dataset";
  /**
   * The command's dataset flag and its value; `from`: the model whose recorded dataset is the
   * default (the dataset is missing when that one is weights made elsewhere); absent: always needed.
   */
  dataset?: { flag: string; given?: string; from?: Role | null; why?: string };
}

/** Fashion-MNIST's and MNIST's side: 28 px, or 32 padded; CIFAR-10's 32. */
const DATASET_SIDES: Record<string, string> = {
  "fashion-mnist": "28 px, or 32 padded",
  mnist: "28 px, or 32 padded",
  cifar10: "32 px",
};

/**
 * The settings weights made elsewhere cannot show, asked for all at once in the command's own flag
 * names: the architecture (with the one their keys look like), the input statistics (with the
 * dataset's own where the dataset is known), the side of their images where the weights do not show
 * it (left out, the architecture's default is taken), and the dataset where no model records one.
 * Null when nothing required is missing; a stitchlab checkpoint, a model by hub and a file not found
 * (the load names it) are never asked about. The weights are read only when something is missing.
 */
export function missingModelSettings(
  o: Record<string, unknown>,
  models: CommandModel[],
  ctx: SettingsContext = {},
): string | null {
  const norm = ctx.normalization ?? "required";
  const flag = (role: Role | null, k: string, both: boolean) =>
    `--${role && !both ? `${role}-` : ""}${k[0].toLowerCase()}${k.slice(1).replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
  const value = (role: Role | null, k: string) => o[role ? `${role}${k}` : `${k[0].toLowerCase()}${k.slice(1)}`];
  const foreign = (file: string) => !isHubName(file) && existsSync(file) && !isStitchlabCheckpoint(file);
  const nameOf = (m: CommandModel) => m.name ?? (m.role ? `the ${m.role}` : m.file);
  // The dataset: given, or recorded by a stitchlab checkpoint among the models (its statistics are suggested).
  const recorded = models.map((m) => (foreign(m.file) || isHubName(m.file) ? null : checkpointDataset(m.file)));
  const known = ctx.dataset?.given ?? recorded.find((d) => d) ?? undefined;
  const from = ctx.dataset ? models.find((m) => m.role === ctx.dataset?.from) : undefined;
  const dataMissing =
    ctx.dataset !== undefined &&
    ctx.dataset.given === undefined &&
    (ctx.dataset.from === undefined || (from !== undefined && foreign(from.file)));

  type Ask = { model: CommandModel; setting: "Arch" | "Normalization" | "ImageSize"; value: string; why: string };
  const asks: Ask[] = [];
  const normalizationAsk = (m: CommandModel): Ask => {
    const stats = known && isNormalizationName(known) ? known : undefined;
    return {
      model: m,
      setting: "Normalization",
      value: stats ?? "<stats>",
      why: `the statistics the inputs were normalised with in training: ${stats ? `${stats} (the dataset's own)` : "a dataset's (cifar10, imagenet, fashion-mnist, mnist)"}, none (pixels in [0, 1] as ToTensor() gives them), or '{mean: [...], std: [...]}'${norm === "dataset" ? `; left out: ${stats ? `${stats}'s` : "the dataset's"}` : ""}`,
    };
  };
  let required = false;
  for (const m of models) {
    if (!foreign(m.file)) continue;
    const given = (k: string) => value(m.role, k) !== undefined;
    const needNorm = norm === "required" && !given("Normalization");
    // An ONNX graph fixes its architecture and input side: only its statistics can be missing.
    if (isOnnxFile(m.file)) {
      if (needNorm) asks.push(normalizationAsk(m));
      required ||= needNorm;
      continue;
    }
    if (given("Arch") && !needNorm) continue;
    const facts = foreignWeightsFacts(m.file, value(m.role, "Arch") as string | undefined);
    const arch = !given("Arch") && !facts?.recorded;
    if (!arch && !needNorm) continue;
    required = true;
    if (arch)
      asks.push({
        model: m,
        setting: "Arch",
        value: facts?.arch ?? "<name>",
        why: `the architecture the weights fit${facts?.looks ? `: their keys look like ${facts.looks}` : ""}${facts?.arch ? "" : `; the zoo has ${modelNames().join(", ")}`}`,
      });
    if (!given("Normalization")) asks.push(normalizationAsk(m));
    if (!given("ImageSize") && facts?.imageSize == null) {
      const side = known ? DATASET_SIDES[known] : undefined;
      asks.push({
        model: m,
        setting: "ImageSize",
        value: "<px>",
        why: `the side of the training images, which the weights do not show${side ? ` (${known}'s: ${side})` : ""}; left out: ${facts?.defaultImageSize ?? 32} px`,
      });
    }
  }
  if (!required) return null;

  const lines: [string, string][] = [];
  for (const setting of ["Arch", "Normalization", "ImageSize"] as const) {
    const these = asks.filter((a) => a.setting === setting);
    if (!these.length) continue;
    // One flag for both models where the command has one and they need the same (compare's --arch).
    const shared =
      ctx.both &&
      these.length === models.length &&
      these.every((a) => a.value === these[0].value && a.why === these[0].why);
    if (shared) lines.push([`${flag(null, setting, true)} ${these[0].value}`, these[0].why]);
    // Per model, on one line where the reason is the same (stitch's --front-arch and --back-arch).
    else
      for (const why of new Set(these.map((a) => a.why))) {
        const group = these.filter((a) => a.why === why);
        const named = group.length === 1 && models.length > 1;
        lines.push([
          group.map((a) => `${flag(a.model.role, setting, false)} ${a.value}`).join(" "),
          named ? `${nameOf(group[0].model)}: ${why}` : why,
        ]);
      }
  }
  if (dataMissing && ctx.dataset)
    lines.push([
      `${ctx.dataset.flag} <name>`,
      `${ctx.dataset.why ?? "the dataset"} (fashion-mnist, mnist, cifar10, or imagefolder with --root)${from ? `: ${nameOf(from)} does not record one` : ""}`,
    ]);
  const asked = models.filter((m) => asks.some((a) => a.model === m));
  const who = asked.map((m) => (m.name ? `${m.name} (${m.file})` : m.role ? `the ${m.role} (${m.file})` : m.file));
  const width = Math.max(...lines.map(([f]) => f.length));
  return [
    `${who.join(" and ")} ${asked.length > 1 ? "are" : "is"} not ${asked.length > 1 ? "stitchlab checkpoints" : "a stitchlab checkpoint"}: give what ${asked.length > 1 ? "the files do" : "the file does"} not say:`,
    ...lines.map(([f, why]) => `  ${f.padEnd(width)}  ${why}`),
  ].join("\n");
}

/**
 * What stops a source from being read at all: a file that is not there, a hub name that cannot be
 * had (offline and not in the cache, unknown, unreachable; resolved now, downloading what it
 * needs, which is kept). One line per model.
 */
export function sourceProblems(models: CommandModel[]): string[] {
  const out: string[] = [];
  for (const file of new Set(models.map((m) => m.file))) {
    const m = models.find((x) => x.file === file) as CommandModel;
    const who = m.name ? `${m.name} (${file})` : m.role ? `the ${m.role} (${file})` : file;
    if (isHubName(file))
      try {
        resolveModelSource(file);
      } catch (e) {
        out.push(`${who}: ${(e as Error).message.split("\n")[0]}`);
      }
    else if (!existsSync(file)) out.push(`${who}: no such file`);
  }
  return out;
}

/**
 * missingModelSettings's message as an error, when anything required is missing; with it, every
 * source that cannot be read (sourceProblems), so that one message lists all there is to fix: a
 * user told first of one model's facts and only on the next try that the other's hub name is not
 * cached learns it a run too late. Where nothing is missing, a source's problem is left to its
 * load, which names it as it always has.
 */
export function requireModelSettings(o: Record<string, unknown>, models: CommandModel[], ctx?: SettingsContext): void {
  const missing = missingModelSettings(o, models, ctx);
  if (!missing) return;
  const problems = sourceProblems(models);
  if (!problems.length) throw new Error(missing);
  throw new Error(
    [
      `${problems.length === 1 ? "A model" : "Models"} that cannot be read:`,
      ...problems.map((p) => `  ${p}`),
      missing,
    ].join("\n"),
  );
}
