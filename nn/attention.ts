// Multi-head self-attention as timm's ViT writes it (attn.qkv, attn.proj), so timm state
// dicts load by name. Attention is computed explicitly (softmax(q k^T / sqrt(d)) v): libtorch
// 1.13 has no public fused kernel, and this is what PyTorch computes for the same module.
import * as torch from "../torch/index.js";
import { Linear } from "./layers.js";
import { Module } from "./module.js";

type Tensor = torch.Tensor;

export class Attention extends Module {
  readonly qkv: Linear;
  readonly proj: Linear;
  readonly headDim: number;
  constructor(
    readonly dim: number,
    readonly numHeads: number,
    qkvBias = true,
  ) {
    super();
    if (dim % numHeads !== 0) throw new Error(`Attention: dim ${dim} is not divisible by ${numHeads} heads`);
    this.headDim = dim / numHeads;
    this.qkv = this.child("qkv", new Linear(dim, dim * 3, qkvBias));
    this.proj = this.child("proj", new Linear(dim, dim));
  }
  forward(x: Tensor): Tensor {
    return torch.tidy(() => {
      const [B, N, C] = x.shape;
      const qkv = this.qkv.forward(x).reshape(B, N, 3, this.numHeads, this.headDim).permute(2, 0, 3, 1, 4);
      const [q, k, v] = qkv.unbind(0);
      const attn = q
        .matmul(k.transpose(-2, -1))
        .mul(1 / Math.sqrt(this.headDim))
        .softmax(-1);
      const out = attn.matmul(v).transpose(1, 2).reshape(B, N, C);
      return this.proj.forward(out);
    });
  }
}
