// `stitchlab layers MODEL [--json]`: the stitch points of a zoo model, or of a checkpoint's model
// (`--checkpoint FILE`, with MODEL naming the architecture of weights made elsewhere).
import type { Command } from "commander";
import { loadCheckpoint } from "../models/checkpoint.js";
import { createModel, describeModel, modelNames } from "../models/registry.js";
import { HEAD_POINT, type StitchableModel } from "../models/stitchable.js";
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
    .argument("[model]", "model name (with --checkpoint: the architecture of weights made elsewhere)")
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
    .option("--image-size <n>", "input height and width", positive)
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
