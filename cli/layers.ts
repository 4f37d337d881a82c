// `stitchlab layers MODEL [--json]`: the stitch points of a zoo model.
import type { Command } from "commander";
import { createModel, describeModel, modelNames } from "../models/registry.js";

function positive(v: string): number {
  const n = Number(v);
  if (!(n > 0)) throw new Error(`expected a positive number, got '${v}'`);
  return n;
}

export function registerLayersCommand(program: Command): void {
  program
    .command("layers")
    .description(`list a model's stitch points (models: ${modelNames().join(", ")})`)
    .argument("<model>", "model name")
    .option("--json", 'print [{"name","channels","height","width"}] (ViTs: dimension, tokens, 1)')
    .option("--width <w>", "width multiplier (CNNs)", positive)
    .option("--stem <stem>", "resnet18 stem: cifar or imagenet")
    .option("--depth <n>", "number of blocks (ViTs)", positive)
    .option("--embed-dim <n>", "embedding dimension (ViTs)", positive)
    .option("--image-size <n>", "input height and width", positive)
    .action(
      (
        name: string,
        o: {
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
        const model = createModel(name, {
          width: o.width,
          stem: o.stem,
          depth: o.depth,
          embedDim: o.embedDim,
          imageSize: o.imageSize,
        });
        const points = model.stitchPoints;
        model.dispose();
        if (o.json) {
          console.log(
            JSON.stringify(points.map(({ name, channels, height, width }) => ({ name, channels, height, width }))),
          );
          return;
        }
        console.log(`${name}: ${describeModel(name)}`);
        const vit = points[0]?.kind === "vit";
        console.log(vit ? "point        tokens x dim" : "point        channels x height x width");
        for (const p of points)
          console.log(
            `${p.name.padEnd(12)} ${vit ? `${p.height} x ${p.channels}` : `${p.channels} x ${p.height} x ${p.width}`}`,
          );
      },
    );
}
