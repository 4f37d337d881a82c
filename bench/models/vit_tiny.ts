// ViT-Tiny for 32x32 inputs (patch 4: 64 patches + a class token = 65 tokens; dim 192,
// depth 12, 3 heads, MLP ratio 4, pre-norm LayerNorm with eps 1e-6, GELU, learned position
// embedding, head on the class token), written functionally. Attention is the explicit
// composition (qkv linear, q @ k^T * scale, softmax, @ v), not a fused kernel, and
// bench/engine_torch.py composes it the same way, so both sides do the same work.
import * as torch from "../../torch/index.js";
import { sequential } from "./sequential.js";

type Tensor = torch.Tensor;

export interface VitConfig {
  imageSize: number;
  patch: number;
  dim: number;
  depth: number;
  heads: number;
  mlpRatio: number;
  numClasses: number;
}

export const VIT_TINY: VitConfig = {
  imageSize: 32,
  patch: 4,
  dim: 192,
  depth: 12,
  heads: 3,
  mlpRatio: 4,
  numClasses: 10,
};

interface Linear {
  weight: Tensor;
  bias: Tensor;
}
interface LayerNorm {
  weight: Tensor;
  bias: Tensor;
}
interface Block {
  norm1: LayerNorm;
  qkv: Linear;
  proj: Linear;
  norm2: LayerNorm;
  fc1: Linear;
  fc2: Linear;
}

export interface VisionTransformer {
  config: VitConfig;
  patchEmbed: { weight: Tensor; bias: Tensor };
  clsToken: Tensor;
  posEmbed: Tensor;
  blocks: Block[];
  norm: LayerNorm;
  head: Linear;
}

const EPS = 1e-6;

// Truncation does not change the cost, so plain randn * 0.02 stands in for timm's trunc_normal_.
const small = (shape: number[]) => torch.randn(shape).mul_(0.02);
const linear = (out: number, inp: number): Linear => ({ weight: small([out, inp]), bias: torch.zeros([out]) });
const layerNorm = (d: number): LayerNorm => ({ weight: torch.ones([d]), bias: torch.zeros([d]) });

export function vitTiny(config: VitConfig = VIT_TINY): VisionTransformer {
  const { dim, patch } = config;
  const tokens = (config.imageSize / patch) ** 2 + 1;
  const hidden = dim * config.mlpRatio;
  const blocks: Block[] = [];
  for (let i = 0; i < config.depth; i++) {
    blocks.push({
      norm1: layerNorm(dim),
      qkv: linear(3 * dim, dim),
      proj: linear(dim, dim),
      norm2: layerNorm(dim),
      fc1: linear(hidden, dim),
      fc2: linear(dim, hidden),
    });
  }
  return {
    config,
    patchEmbed: { weight: small([dim, 3, patch, patch]), bias: torch.zeros([dim]) },
    clsToken: small([1, 1, dim]),
    posEmbed: small([1, tokens, dim]),
    blocks,
    norm: layerNorm(dim),
    head: linear(config.numClasses, dim),
  };
}

/** Every tensor of the model, for toggling requiresGrad or disposing. */
export function parameters(m: VisionTransformer): Tensor[] {
  const pair = (p: Linear | LayerNorm) => [p.weight, p.bias];
  const out = [m.patchEmbed.weight, m.patchEmbed.bias, m.clsToken, m.posEmbed];
  for (const b of m.blocks) out.push(...[b.norm1, b.qkv, b.proj, b.norm2, b.fc1, b.fc2].flatMap(pair));
  out.push(...pair(m.norm), ...pair(m.head));
  return out;
}

function attention(x: Tensor, b: Block, heads: number): Tensor {
  const [n, t, d] = x.shape;
  const headDim = d / heads;
  // [N, T, 3D] -> [3, N, heads, T, headDim]
  const qkv = torch.linear(x, b.qkv.weight, b.qkv.bias).reshape(n, t, 3, heads, headDim).permute(2, 0, 3, 1, 4);
  const [q, k, v] = qkv.unbind(0);
  const attn = q
    .matmul(k.transpose(-2, -1))
    .mul(headDim ** -0.5)
    .softmax(-1);
  const out = attn.matmul(v).transpose(1, 2).reshape(n, t, d);
  return torch.linear(out, b.proj.weight, b.proj.bias);
}

function mlp(x: Tensor, b: Block): Tensor {
  return torch.linear(torch.gelu(torch.linear(x, b.fc1.weight, b.fc1.bias)), b.fc2.weight, b.fc2.bias);
}

const norm = (x: Tensor, p: LayerNorm, dim: number) => torch.layerNorm(x, [dim], p.weight, p.bias, EPS);

/** Logits [N, numClasses] of images [N, 3, H, W]. */
export function forward(m: VisionTransformer, x: Tensor): Tensor {
  const { patch, dim, heads } = m.config;
  const n = x.shape[0];
  // Patch embedding as a strided conv, then [N, D, H/p, W/p] -> [N, tokens, D].
  let h = torch.conv2d(x, m.patchEmbed.weight, m.patchEmbed.bias, { stride: patch }).flatten(2).transpose(1, 2);
  h = torch.cat([m.clsToken.expand(n, -1, -1), h], 1).add(m.posEmbed);
  h = sequential(h, m.blocks, (h, b) => {
    const a = h.add(attention(norm(h, b.norm1, dim), b, heads));
    return a.add(mlp(norm(a, b.norm2, dim), b));
  });
  const cls = norm(h, m.norm, dim).select(1, 0);
  return torch.linear(cls, m.head.weight, m.head.bias);
}
