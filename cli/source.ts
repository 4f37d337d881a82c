// How the command line names a model: a checkpoint file, and for weights made elsewhere what the
// file cannot say, in the same words as an experiment file's model entry (one schema for both:
// models/checkpoint.ts modelSourceSchema):
//   --front FILE --front-arch resnet18 --front-options '{numClasses: 10, stem: imagenet}'
//       --front-normalization imagenet --front-image-size 224
// (and the same with --back-). Options and normalisation are YAML flow or JSON.
import type { Command } from "commander";
import { parse as parseYaml } from "yaml";
import { type ModelSourceLike, modelSourceSchema } from "../models/checkpoint.js";
import { modelNames } from "../models/registry.js";
import { int } from "./parse.js";

type Role = "front" | "back";

/** Adds --ROLE-arch, --ROLE-options, --ROLE-normalization and --ROLE-image-size to a command. */
export function addModelSourceOptions(cmd: Command, role: Role): Command {
  return cmd
    .option(
      `--${role}-arch <name>`,
      `for weights made elsewhere (a torch.save or safetensors file): the zoo architecture they fit (${modelNames().join(", ")})`,
    )
    .option(
      `--${role}-options <yaml>`,
      "createModel options the weights' shapes do not show, e.g. '{numHeads: 6}' (classes, width, stem and ViT sizes are read from the weights)",
    )
    .option(
      `--${role}-normalization <name|yaml>`,
      "the statistics its inputs were normalised with in training: cifar10, imagenet, fashion-mnist, mnist, none ([0, 1] pixels as they are, as the reference's 32 px models), or '{mean: [...], std: [...]}'",
    )
    .option(`--${role}-image-size <px>`, "the side of the images it was trained on", int);
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
  const flag = (k: string) => `--${role ? `${role}-` : ""}${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
  const arch = o[key("Arch")] as string | undefined;
  const options = yamlValue(flag("options"), o[key("Options")] as string | undefined);
  const rawNorm = o[key("Normalization")] as string | undefined;
  // A bare word is a dataset's statistics (an empty one is refused as such); anything else is YAML ({mean, std}).
  const normalization =
    rawNorm === undefined || /^[\w-]*$/.test(rawNorm) ? rawNorm : yamlValue(flag("normalization"), rawNorm);
  const imageSize = o[key("ImageSize")] as number | undefined;
  const given = { arch, options, normalization, imageSize };
  if (Object.values(given).every((v) => v === undefined)) return file;
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
  return parsed.data;
}
