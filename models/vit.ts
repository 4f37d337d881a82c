// Vision Transformers with timm's parameter names (patch_embed.proj, cls_token, pos_embed,
// blocks.N.norm1 / attn.qkv / attn.proj / norm2 / mlp.fc1 / mlp.fc2, norm, head), pre-norm
// blocks with LayerNorm eps 1e-6 and exact GELU, a class token and a learned position embedding.
// Stitch points: chosen block outputs, which hold the token sequence [N, tokens, dim], and the
// head input "norm": the pooled class token after the final LayerNorm, a vector [N, dim]. That
// is what timm's head_drop receives (forward_head: pool, fc_norm, head_drop, head; the
// reference's models/model_utils.py hooks 'head_drop'), so least squares, DM/FuLA, IRI targets
// and CKA at the head point see only what the head reads, not the patch tokens it ignores.
import { Attention } from "../nn/attention.js";
import { truncNormal } from "../nn/init.js";
import { Conv2d, GELU, LayerNorm, Linear, Sequential } from "../nn/layers.js";
import { Module } from "../nn/module.js";
import * as torch from "../torch/index.js";
import { type ModelSize, type Stage, StitchableModel } from "./stitchable.js";

type Tensor = torch.Tensor;

export interface VitOptions {
  numClasses?: number;
  imageSize?: number;
  patchSize?: number;
  embedDim?: number;
  depth?: number;
  numHeads?: number;
  mlpRatio?: number;
  /** Indices of the blocks whose outputs are stitch points (the head input always is). */
  pointBlocks?: number[];
}

class Mlp extends Module {
  readonly fc1: Linear;
  readonly fc2: Linear;
  readonly #act = new GELU();
  constructor(dim: number, hidden: number) {
    super();
    this.fc1 = this.child("fc1", new Linear(dim, hidden));
    this.fc2 = this.child("fc2", new Linear(hidden, dim));
  }
  forward(x: Tensor): Tensor {
    return this.fc2.forward(this.#act.forward(this.fc1.forward(x)));
  }
}

export class Block extends Module {
  readonly norm1: LayerNorm;
  readonly attn: Attention;
  readonly norm2: LayerNorm;
  readonly mlp: Mlp;
  constructor(dim: number, numHeads: number, mlpRatio: number) {
    super();
    this.norm1 = this.child("norm1", new LayerNorm(dim, 1e-6));
    this.attn = this.child("attn", new Attention(dim, numHeads));
    this.norm2 = this.child("norm2", new LayerNorm(dim, 1e-6));
    this.mlp = this.child("mlp", new Mlp(dim, Math.round(dim * mlpRatio)));
  }
  forward(x: Tensor): Tensor {
    const h = torch.tidy(() => x.add(this.attn.forward(this.norm1.forward(x))));
    const out = torch.tidy(() => h.add(this.mlp.forward(this.norm2.forward(h))));
    h.dispose();
    return out;
  }
}

class PatchEmbed extends Module {
  readonly proj: Conv2d;
  constructor(patch: number, dim: number) {
    super();
    this.proj = this.child("proj", new Conv2d(3, dim, patch, { stride: patch }));
  }
  forward(x: Tensor): Tensor {
    return this.proj.forward(x).flatten(2).transpose(1, 2);
  }
}

/** The options with their defaults, once: the constructor and vitSize read the same. */
export function resolveVitOptions(opts: VitOptions = {}): Required<VitOptions> {
  const depth = opts.depth ?? 12;
  return {
    numClasses: opts.numClasses ?? 10,
    imageSize: opts.imageSize ?? 32,
    patchSize: opts.patchSize ?? 4,
    embedDim: opts.embedDim ?? 192,
    depth,
    numHeads: opts.numHeads ?? 3,
    mlpRatio: opts.mlpRatio ?? 4,
    pointBlocks: opts.pointBlocks ?? Array.from({ length: depth }, (_, i) => i),
  };
}

/**
 * The size of `new VisionTransformer(arch, opts)` (ModelSize), with the constructor's defaults:
 * the patch embedding, class token and position embedding, the blocks (two LayerNorms, qkv and
 * proj, the MLP), the final norm and the head. Activations per block: the norms, qkv, its
 * heads, the attention scores and their softmax (heads x tokens^2 each), the attention output,
 * proj, the MLP's hidden layer before and after GELU, and the two residual sums.
 */
export function vitSize(opts: VitOptions = {}): ModelSize {
  const c = resolveVitOptions(opts);
  const [d, depth, heads, patch, numClasses] = [c.embedDim, c.depth, c.numHeads, c.patchSize, c.numClasses];
  const hidden = Math.round(d * c.mlpRatio);
  const tokens = Math.floor(c.imageSize / patch) ** 2 + 1;
  const linear = (i: number, o: number) => i * o + o;
  const block = 4 * d + linear(d, 3 * d) + linear(d, d) + linear(d, hidden) + linear(hidden, d);
  const parameters = 3 * patch * patch * d + d + d + tokens * d + depth * block + 2 * d + linear(d, numClasses);
  const perBlock = tokens * (12 * d + 2 * hidden) + 2 * heads * tokens * tokens;
  return { parameters, buffers: 0, activations: 3 * tokens * d + depth * perBlock + d + numClasses };
}

export class VisionTransformer extends StitchableModel {
  readonly arch: string;
  readonly config: Required<VitOptions>;
  protected readonly stageList: Stage[];
  readonly patch_embed: PatchEmbed;
  readonly blocks: Block[];
  readonly norm: LayerNorm;
  readonly headLinear: Linear;

  constructor(arch: string, opts: VitOptions = {}) {
    super();
    this.arch = arch;
    const c = resolveVitOptions(opts);
    this.config = c;
    if (c.imageSize % c.patchSize !== 0)
      throw new Error(`${arch}: image size ${c.imageSize} is not a multiple of patch ${c.patchSize}`);
    const tokens = (c.imageSize / c.patchSize) ** 2 + 1;
    const d = c.embedDim;
    this.param("cls_token", truncNormal([1, 1, d], 0.02));
    this.param("pos_embed", truncNormal([1, tokens, d], 0.02));
    this.patch_embed = this.child("patch_embed", new PatchEmbed(c.patchSize, d));
    this.blocks = Array.from({ length: c.depth }, () => new Block(d, c.numHeads, c.mlpRatio));
    this.child("blocks", new Sequential(...this.blocks)); // names blocks.0, blocks.1, ... as timm
    this.norm = this.child("norm", new LayerNorm(d, 1e-6));
    this.headLinear = this.child("head", new Linear(d, c.numClasses));
    const point = (name: string) => ({ name, channels: d, tokens, kind: "vit" }) as const;
    const headInput = { name: "norm", channels: d, kind: "vector" } as const;
    this.stageList = [
      {
        name: "embed",
        point: null,
        run: (x) => {
          const p = this.patch_embed.forward(x);
          const cls = this.tensor("cls_token").expand(p.shape[0], -1, -1);
          return torch.cat([cls, p], 1).add(this.tensor("pos_embed"));
        },
      },
      ...this.blocks.map((b, i) => ({
        name: `blocks.${i}`,
        point: c.pointBlocks.includes(i) ? point(`blocks.${i}`) : null,
        run: (h: Tensor) => b.forward(h),
      })),
      // timm normalises every token and then pools the class token; LayerNorm acts on each
      // token alone, so normalising the class token only gives the same vector at 1/tokens
      // of the cost.
      { name: "norm", point: headInput, run: (h) => this.norm.forward(h.select(1, 0)) },
    ];
  }

  /** The head input [N, dim] is the last point's output (timm's head_drop is the identity at rate 0). */
  protected embedFrom(h: Tensor): Tensor {
    return h;
  }

  get head(): Linear {
    return this.headLinear;
  }

  protected get embedDim(): number {
    return this.headLinear.inFeatures;
  }
}
