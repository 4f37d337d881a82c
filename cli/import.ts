// `stitchlab import FILE --arch NAME --out DIR`: weights made elsewhere become a stitchlab
// checkpoint (models/import.ts), so every command and experiment file takes them by path alone.
import type { Command } from "commander";
import { asModelSource } from "../models/checkpoint.js";
import { isHubName } from "../models/hub.js";
import { CHECK_IMAGES, importModel, LOGIT_SPREAD_LIMIT } from "../models/import.js";
import { modelNames } from "../models/registry.js";
import { printDone } from "./output.js";
import { imageSide, int, optional } from "./parse.js";
import { modelSourceFrom, requireModelSettings } from "./source.js";

export function registerImportCommand(program: Command): void {
  program
    .command("import")
    .description(
      "convert a torch.save or safetensors file (a state dict, a {state_dict | model | model_state_dict} wrapper, DataParallel's module. prefix, or a whole pickled nn.Module) into a stitchlab checkpoint, after a forward-pass check",
    )
    .argument(
      "<file>",
      "the weights, or a model by hub (hf-hub:ORG/NAME, torchvision:ARCH: downloaded into the cache, its architecture and statistics from the hub)",
    )
    .option("--arch <name>", `the zoo architecture they fit (required for a file): ${modelNames().join(", ")}`)
    .requiredOption("--out <dir>", "a new folder: model.safetensors and model.json")
    .option(
      "--options <yaml>",
      "createModel options the shapes do not show, e.g. '{numHeads: 6}' (classes, width, stem, ViT sizes are read from the weights)",
    )
    .option(
      "--normalization <name|yaml>",
      "the statistics its inputs were normalised with in training: cifar10, imagenet, fashion-mnist, mnist, none ([0, 1] pixels as they are, as the reference's 32 px models), or '{mean: [...], std: [...]}'",
    )
    .option("--image-size <px>", "the side of the images it was trained on", imageSide)
    .option(
      "--dataset <name>",
      "the dataset it was trained on: the forward check runs it on that dataset's test images, and stitch and iris then default to it",
    )
    .option("--root <path>", "where the dataset's files are (all but fashion-mnist in its Debian place need it)")
    .option("--check-images <n>", `test images the forward check runs on (default ${CHECK_IMAGES})`, int)
    .option("--json", "print the result as one JSON line (the default when the output is not a terminal)")
    .action(async (file: string, o: Record<string, unknown>) => {
      const given = modelSourceFrom(o, null, file);
      requireModelSettings(o, [{ role: null, file }], {
        normalization: "dataset",
        dataset: { flag: "--dataset", given: o.dataset as string | undefined, why: "the dataset it was trained on" },
      });
      if (typeof given === "string" && !isHubName(file)) throw new Error("--arch is required");
      const source = asModelSource(given);
      // Checked on real images: a scale bound means nothing on noise (models/import.ts, LOGIT_SPREAD_LIMIT).
      if (o.dataset === undefined)
        throw new Error(
          "give --dataset (the dataset it was trained on, and --root where its files are): the forward check runs the model on its test images before anything is written",
        );
      const r = await importModel(source, o.out as string, {
        dataset: o.dataset as string,
        ...optional("root", o.root as string | undefined),
        ...optional("checkImages", o.checkImages as number | undefined),
      });
      const c = r.check;
      printDone(o, { ...r }, [
        `imported ${r.arch} from ${file}`,
        ...(r.notes.unwrapped.length ? [`  unwrapped: ${r.notes.unwrapped.join("; ")}`] : []),
        ...(r.notes.batchNorm ? [`  note: ${r.notes.batchNorm}`] : []),
        ...(Object.keys(r.notes.inferred).length
          ? [`  read from the weights: ${JSON.stringify(r.notes.inferred)}`]
          : []),
        `  options: ${JSON.stringify(r.options)}`,
        `  forward check on ${c.images} ${c.data} images: logits [${c.logits.join(", ")}] finite, spread at most ${c.logitSpread.toFixed(1)} (limit ${LOGIT_SPREAD_LIMIT})`,
        `  accuracy ${c.accuracy.toFixed(3)} (chance ${(1 / c.classes).toFixed(3)})`,
        "  the checkpoint read back gives the same logits",
        `  wrote ${r.checkpoint} and its sidecar`,
      ]);
    });
}
