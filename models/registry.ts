// The model zoo: createModel(name, options), as timm's create_model. Each entry documents its
// stitch points (PROTOCOL.md, "Stitch points").
import { ResNet18, type ResNetOptions } from "./resnet.js";
import type { StitchableModel } from "./stitchable.js";
import { Vgg16Bn, type VggOptions } from "./vgg.js";
import { VisionTransformer, type VitOptions } from "./vit.js";

export type ModelOptions = ResNetOptions & VggOptions & VitOptions;

const REGISTRY: Record<string, { describe: string; create: (o: ModelOptions) => StitchableModel }> = {
  resnet18: {
    describe: "ResNet-18, CIFAR stem by default (stem: 'imagenet' for 224 px); 9 points: stem + 8 blocks",
    create: (o) => new ResNet18(o),
  },
  vgg16_bn: {
    describe: "VGG-16 with batch norm, torchvision's layout; 6 points: features.2, .5, .12, .22, .32, .42 (post-ReLU)",
    create: (o) => new Vgg16Bn(o),
  },
  vit_tiny_patch4_32: {
    describe: "ViT-Tiny, patch 4, 32 px, dim 192, depth 12, 3 heads; 13 points: 12 blocks + the head input",
    create: (o) =>
      new VisionTransformer("vit_tiny_patch4_32", { imageSize: 32, patchSize: 4, embedDim: 192, numHeads: 3, ...o }),
  },
  vit_base_patch16_224: {
    describe: "ViT-Base, patch 16, 224 px, dim 768, depth 12, 12 heads; 7 points: blocks 0,2,4,6,8,10 + the head input",
    create: (o) => {
      const depth = o.depth ?? 12;
      return new VisionTransformer("vit_base_patch16_224", {
        imageSize: 224,
        patchSize: 16,
        embedDim: 768,
        numHeads: 12,
        pointBlocks: Array.from({ length: depth }, (_, i) => i).filter((i) => i % 2 === 0 && i < depth - 1),
        ...o,
      });
    },
  },
};

export const modelNames = (): string[] => Object.keys(REGISTRY);
export const describeModel = (name: string): string => REGISTRY[name]?.describe ?? "";

/** Builds a zoo model; an unknown name is a clear error listing the known ones. */
export function createModel(name: string, options: ModelOptions = {}): StitchableModel {
  const entry = REGISTRY[name];
  if (!entry) throw new Error(`unknown model '${name}'; known models: ${modelNames().join(", ")}`);
  // Options left undefined must not override an entry's own defaults when spread.
  const given = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)) as ModelOptions;
  return entry.create(given);
}
