// The model zoo: createModel(name, options), as timm's create_model. Each entry documents its
// stitch points (docs/method.md, "Stitch points").
import { checkModelOptions } from "./options.js";
import { RESNET18, RESNET50, ResNet, type ResNetOptions, resnetSize } from "./resnet.js";
import type { ModelSize, StitchableModel } from "./stitchable.js";
import { Vgg16Bn, type VggOptions, vggSize } from "./vgg.js";
import { VisionTransformer, type VitOptions, vitSize } from "./vit.js";

export type ModelOptions = ResNetOptions & VggOptions & VitOptions;

/**
 * An architecture's facts, as timm's pretrained config keeps them: what it is, and the base learning
 * rate of the base-training recipe (docs/method.md, "Base models": 0.1 for ResNets; 0.01 for VGG
 * and the ViTs, the reference's configs/baselines/{low,high}_resolution). The one place they live.
 */
export interface ArchRecord {
  arch: string;
  describe: string;
  defaultLr: number;
}

const REGISTRY: Record<
  string,
  Omit<ArchRecord, "arch"> & {
    create: (o: ModelOptions) => StitchableModel;
    /** What create(o) would build, counted without building it (modelSize). */
    size: (o: ModelOptions) => ModelSize;
  }
> = {
  resnet18: {
    defaultLr: 0.1,
    describe: "ResNet-18, CIFAR stem by default (stem: 'imagenet' for 224 px); 9 points: stem + 8 blocks",
    create: (o) => new ResNet(RESNET18, o),
    size: (o) => resnetSize(RESNET18, o),
  },
  resnet50: {
    defaultLr: 0.1,
    describe:
      "ResNet-50 (Bottleneck blocks 3-4-6-3, torchvision's layout), CIFAR stem by default; 9 points: stem + the first and last block of each stage",
    create: (o) => new ResNet(RESNET50, o),
    size: (o) => resnetSize(RESNET50, o),
  },
  vgg16_bn: {
    defaultLr: 0.01,
    describe: "VGG-16 with batch norm, torchvision's layout; 6 points: features.2, .5, .12, .22, .32, .42 (post-ReLU)",
    create: (o) => new Vgg16Bn(o),
    size: (o) => vggSize(o),
  },
  vit_tiny_patch4_32: {
    defaultLr: 0.01,
    describe: "ViT-Tiny, patch 4, 32 px, dim 192, depth 12, 3 heads; 13 points: 12 blocks + the head input",
    create: (o) => new VisionTransformer("vit_tiny_patch4_32", { ...VIT_TINY_32, ...o }),
    size: (o) => vitSize({ ...VIT_TINY_32, ...o }),
  },
  vit_base_patch16_224: {
    defaultLr: 0.01,
    describe: "ViT-Base, patch 16, 224 px, dim 768, depth 12, 12 heads; 7 points: blocks 0,2,4,6,8,10 + the head input",
    create: (o) => vit224("vit_base_patch16_224", 768, 12, o),
    size: (o) => vitSize(vit224Options(768, 12, o)),
  },
  vit_small_patch16_224: {
    defaultLr: 0.01,
    describe:
      "timm's ViT-Small, patch 16, 224 px, dim 384, depth 12, 6 heads; 7 points: blocks 0,2,4,6,8,10 + the head input",
    create: (o) => vit224("vit_small_patch16_224", 384, 6, o),
    size: (o) => vitSize(vit224Options(384, 6, o)),
  },
  vit_tiny_patch16_224: {
    defaultLr: 0.01,
    describe:
      "timm's ViT-Tiny, patch 16, 224 px, dim 192, depth 12, 3 heads; 7 points: blocks 0,2,4,6,8,10 + the head input",
    create: (o) => vit224("vit_tiny_patch16_224", 192, 3, o),
    size: (o) => vitSize(vit224Options(192, 3, o)),
  },
};

const VIT_TINY_32: VitOptions = { imageSize: 32, patchSize: 4, embedDim: 192, numHeads: 3 };

/** A timm ViT's options at 224 px, patch 16, with the ViT-Base points: every other block and the head input. */
function vit224Options(embedDim: number, numHeads: number, o: ModelOptions): VitOptions {
  const depth = o.depth ?? 12;
  return {
    imageSize: 224,
    patchSize: 16,
    embedDim,
    numHeads,
    pointBlocks: Array.from({ length: depth }, (_, i) => i).filter((i) => i % 2 === 0 && i < depth - 1),
    ...o,
  };
}

const vit224 = (name: string, embedDim: number, numHeads: number, o: ModelOptions): StitchableModel =>
  new VisionTransformer(name, vit224Options(embedDim, numHeads, o));

export const modelNames = (): string[] => Object.keys(REGISTRY);
export const describeModel = (name: string): string => REGISTRY[name]?.describe ?? "";

/** An architecture's record; an unknown name is a clear error listing the known ones. */
export function archRecord(name: string): ArchRecord {
  const entry = REGISTRY[name];
  if (!entry) throw new Error(`unknown model '${name}'; known models: ${modelNames().join(", ")}`);
  return { arch: name, describe: entry.describe, defaultLr: entry.defaultLr };
}

/**
 * What createModel(name, options) would build (its parameters, buffers and one image's
 * activations), counted without building it; an unknown name is the same error as createModel's.
 */
export function modelSize(name: string, options: ModelOptions = {}): ModelSize {
  archRecord(name);
  const given = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)) as ModelOptions;
  return REGISTRY[name].size(given);
}

/**
 * Builds a zoo model; an unknown name is a clear error listing the known ones, and an option the
 * model does not take, or a value it cannot use, one naming the key and what is allowed.
 */
export function createModel(name: string, options: ModelOptions = {}): StitchableModel {
  archRecord(name);
  const entry = REGISTRY[name];
  // Options left undefined must not override an entry's own defaults when spread.
  const given = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)) as ModelOptions;
  checkModelOptions(name, given as Record<string, unknown>);
  return entry.create(given);
}
