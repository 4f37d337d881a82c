// `stitchlab layers MODEL [--json]`: the stitch points of a zoo model, or of a checkpoint's model
// (`--checkpoint FILE`, with MODEL naming the architecture of weights made elsewhere), or of an
// ONNX graph (`stitchlab layers mine.onnx`): every tensor that cuts it, with its shape and names.
import type { Command } from "commander";
import { isOnnxFile, loadCheckpoint } from "../models/checkpoint.js";
import { OnnxModel } from "../models/onnx/model.js";
import { createModel, describeModel, modelNames } from "../models/registry.js";
import { HEAD_POINT, type StitchableModel } from "../models/stitchable.js";
import { imageSide } from "./parse.js";
import { modelSourceFrom } from "./source.js";

function positive(v: string): number {
  const n = Number(v);
  if (!(n > 0)) throw new Error(`expected a positive number, got '${v}'`);
  return n;
}

export function registerLayersCommand(program: Command): void {
  program
    .command("layers")
    .description(`list a model's stitch points (models: ${modelNames().join(", ")})`)
    .argument(
      "[model]",
      "model name (with --checkpoint: the architecture of weights made elsewhere), or an ONNX file (.onnx)",
    )
    .option(
      "--checkpoint <file>",
      "a stitchlab checkpoint, weights made elsewhere (torch.save, safetensors), or a model by hub (hf-hub:ORG/NAME, torchvision:ARCH; docs/models-and-data.md)",
    )
    .option("--options <yaml>", "with --checkpoint: createModel options the weights' shapes do not show")
    .option(
      "--json",
      'print [{"name","kind","channels","height","width"}] (kind vit: dimension, tokens, 1; vector: dimension, 1, 1)',
    )
    .option("--width <w>", "width multiplier (CNNs)", positive)
    .option("--stem <stem>", "resnet18 stem: cifar or imagenet")
    .option("--depth <n>", "number of blocks (ViTs)", positive)
    .option("--embed-dim <n>", "embedding dimension (ViTs)", positive)
    .option("--image-size <px>", "input height and width", imageSide)
    .action(
      (
        given: string | undefined,
        o: {
          checkpoint?: string;
          options?: string;
          json?: boolean;
          width?: number;
          stem?: "cifar" | "imagenet";
          depth?: number;
          embedDim?: number;
          imageSize?: number;
        },
      ) => {
        if (given && isOnnxFile(given) && !o.checkpoint) {
          o.checkpoint = given;
          given = undefined;
        }
        if (o.stem && o.stem !== "cifar" && o.stem !== "imagenet")
          throw new Error(`--stem must be cifar or imagenet, not '${o.stem}'`);
        let model: StitchableModel;
        if (o.checkpoint) {
          const source = modelSourceFrom(
            { arch: given, options: o.options, imageSize: o.imageSize },
            null,
            o.checkpoint,
          );
          model = loadCheckpoint(source).model;
        } else {
          if (!given) throw new Error("name a model (stitchlab layers resnet18) or give --checkpoint FILE");
          model = createModel(given, {
            width: o.width,
            stem: o.stem,
            depth: o.depth,
            embedDim: o.embedDim,
            imageSize: o.imageSize,
          });
        }
        if (model instanceof OnnxModel) {
          printCuts(model, Boolean(o.json));
          model.dispose();
          return;
        }
        const name = model.arch;
        const points = model.stitchPoints;
        const head = model.stitchPoint(HEAD_POINT);
        model.dispose();
        if (o.json) {
          console.log(JSON.stringify(points));
          return;
        }
        console.log(`${name}: ${describeModel(name)}`);
        // Each point's feature shape for one image. A ViT lists token sequences and then its
        // head input, a vector, so the header names the layout of every kind present.
        const layout = { cnn: "channels x height x width", vit: "tokens x dim", vector: "dim (vector)" };
        const shape = (p: (typeof points)[number]) =>
          p.kind === "cnn"
            ? `${p.channels} x ${p.height} x ${p.width}`
            : p.kind === "vit"
              ? `${p.tokens} x ${p.channels}`
              : `${p.channels} (vector)`;
        const kinds = [...new Set(points.map((p) => p.kind))];
        console.log(`point        ${kinds.map((k) => layout[k]).join("; ")}`);
        for (const p of points) console.log(`${p.name.padEnd(12)} ${shape(p)}`);
        console.log(`${head.name.padEnd(12)} ${shape(head)}  (the head's input: the front-only end, used when named)`);
      },
    );
}

/**
 * An ONNX graph's cuts in order: the stitch points by name (the module scope each is the output
 * of, where the graph names its nodes), the other cuts by tensor name, and the head's input.
 */
function printCuts(model: OnnxModel, json: boolean): void {
  const cuts = model.cutList();
  if (json) {
    console.log(JSON.stringify(cuts));
    return;
  }
  const c = model.config;
  console.log(
    `${c.file}: an ONNX graph (opset ${c.opset}${c.producer ? `, from ${c.producer}` : ""}), ${c.imageSize} px images, ${c.numClasses} classes; ${model.stitchPoints.length} stitch points`,
  );
  if (model.batchNormNote) console.log(`note: ${model.batchNormNote}`);
  const label = (k: (typeof cuts)[number]) => (k.point || k.headForm || k.note ? k.name : `(${k.tensor})`);
  const shape = (k: (typeof cuts)[number]) => k.shape.slice(1).join(" x ");
  // Columns as wide as their longest entry: scope names (blocks.11, features.denseblock4) vary.
  const w1 = Math.max("point / cut".length, ...cuts.map((k) => label(k).length));
  const w2 = Math.max("shape for one image".length, ...cuts.map((k) => shape(k).length));
  console.log(`${"point / cut".padEnd(w1)}  ${"shape for one image".padEnd(w2)}  (also named)`);
  for (const k of cuts) {
    const also = k.aliases.filter((a) => a !== k.name);
    console.log(
      `${label(k).padEnd(w1)}  ${shape(k).padEnd(w2)}${also.length ? `  (${also.join(", ")})` : ""}${k.point ? "" : k.note ? `  not a point: ${k.note}` : k.headForm ? `  not a point: the head's input, reshaped (give ${HEAD_POINT})` : "  not a point: inside a module"}${k.name === HEAD_POINT ? "  the head's input: the front-only end, used when named" : ""}`.trimEnd(),
    );
  }
}
