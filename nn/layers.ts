// The layers of the model zoo, with torch.nn's names, parameter names and defaults.
import * as torch from "../torch/index.js";
import { defaultWeightAndBias } from "./init.js";
import { Module } from "./module.js";

type Tensor = torch.Tensor;
type Pair = number | [number, number];

export class Conv2d extends Module {
  constructor(
    readonly inChannels: number,
    readonly outChannels: number,
    readonly kernelSize: number,
    readonly opts: { stride?: Pair; padding?: Pair; bias?: boolean; groups?: number } = {},
  ) {
    super();
    const { weight, bias } = defaultWeightAndBias(
      [outChannels, inChannels / (opts.groups ?? 1), kernelSize, kernelSize],
      opts.bias ?? true,
    );
    this.param("weight", weight);
    if (bias) this.param("bias", bias);
  }
  forward(x: Tensor): Tensor {
    // In the layout convolutions run fastest in here (torch/layout.ts): on one CPU thread,
    // channels-last; the output keeps it, so only a network's first convolution converts.
    return torch.conv2d(torch.toConvLayout(x, this.outChannels), this.tensor("weight"), this.tensor("bias", true), {
      stride: this.opts.stride,
      padding: this.opts.padding,
      groups: this.opts.groups,
    });
  }
}

export class Linear extends Module {
  constructor(
    readonly inFeatures: number,
    readonly outFeatures: number,
    bias = true,
  ) {
    super();
    const p = defaultWeightAndBias([outFeatures, inFeatures], bias);
    this.param("weight", p.weight);
    if (p.bias) this.param("bias", p.bias);
  }
  forward(x: Tensor): Tensor {
    return torch.linear(x, this.tensor("weight"), this.tensor("bias", true));
  }
}

/**
 * BatchNorm2d. In training mode it normalises with batch statistics and updates the running
 * ones; `trackRunningStats: false` in training mode (or setting `updateStats = false`) uses
 * batch statistics without touching them, as a frozen network in standard stitching needs.
 */
export class BatchNorm2d extends Module {
  /** When false, training mode still uses batch statistics but leaves the running ones alone. */
  updateStats = true;
  constructor(
    readonly numFeatures: number,
    readonly opts: { eps?: number; momentum?: number } = {},
  ) {
    super();
    this.param("weight", torch.ones([numFeatures]));
    this.param("bias", torch.zeros([numFeatures]));
    this.buffer("running_mean", torch.zeros([numFeatures]));
    this.buffer("running_var", torch.ones([numFeatures]));
    this.buffer("num_batches_tracked", torch.zeros([], { dtype: "int64" }));
  }
  forward(x: Tensor): Tensor {
    const update = this.training && this.updateStats;
    if (update) torch.noGrad(() => this.tensor("num_batches_tracked").add_(1));
    return torch.batchNorm(
      x,
      update || !this.training ? this.tensor("running_mean") : null,
      update || !this.training ? this.tensor("running_var") : null,
      {
        weight: this.tensor("weight"),
        bias: this.tensor("bias"),
        training: this.training,
        momentum: this.opts.momentum ?? 0.1,
        eps: this.opts.eps ?? 1e-5,
      },
    );
  }
}

export class LayerNorm extends Module {
  constructor(
    readonly dim: number,
    readonly eps = 1e-5,
  ) {
    super();
    this.param("weight", torch.ones([dim]));
    this.param("bias", torch.zeros([dim]));
  }
  forward(x: Tensor): Tensor {
    return torch.layerNorm(x, [this.dim], this.tensor("weight"), this.tensor("bias"), this.eps);
  }
}

export class Dropout extends Module {
  constructor(readonly p = 0.5) {
    super();
  }
  forward(x: Tensor): Tensor {
    return this.p === 0 || !this.training ? x.clone() : torch.dropout(x, this.p, true);
  }
}

export class ReLU extends Module {
  forward(x: Tensor): Tensor {
    return x.relu();
  }
}

export class GELU extends Module {
  forward(x: Tensor): Tensor {
    return torch.gelu(x);
  }
}

export class MaxPool2d extends Module {
  constructor(
    readonly kernelSize: number,
    readonly stride = kernelSize,
    readonly padding = 0,
  ) {
    super();
  }
  forward(x: Tensor): Tensor {
    return torch.maxPool2d(x, this.kernelSize, { stride: this.stride, padding: this.padding });
  }
}

export class AdaptiveAvgPool2d extends Module {
  constructor(readonly outputSize: Pair) {
    super();
  }
  forward(x: Tensor): Tensor {
    return torch.adaptiveAvgPool2d(x, this.outputSize);
  }
}

/**
 * Children applied in order, named "0", "1", ... as nn.Sequential. Each child runs in its own
 * tidy scope and the intermediate it consumed is freed at once, as Python would free it: what
 * backward needs stays alive through the autograd graph, and the smaller peak saves page faults.
 */
export class Sequential extends Module {
  readonly layers: Module[];
  constructor(...layers: Module[]) {
    super();
    this.layers = layers.map((m, i) => this.child(String(i), m));
  }
  forward(x: Tensor): Tensor {
    return runInOrder(x, this.layers);
  }
}

/** A step of runInOrder: a module, or a function of the previous step's output. */
export type Step = Module | ((h: Tensor) => Tensor);

/**
 * The one home of "run in order, freeing each intermediate once read" (Sequential, the model
 * stages, ResNet's residual branches): each step runs in its own scope, and each intermediate is
 * freed as soon as the next step has read it, unless `kept(h)` says the caller returns it (a
 * feature at a stitch point). x itself is left to the caller; with no steps the result is a copy.
 */
export function runInOrder(x: Tensor, steps: readonly Step[], kept?: (h: Tensor) => boolean): Tensor {
  let h = x;
  for (const s of steps) {
    const next = torch.tidy(() => (typeof s === "function" ? s(h) : s.forward(h)));
    if (h !== x && next !== h && !kept?.(h)) h.dispose();
    h = next;
  }
  return h === x ? x.clone() : h;
}

/** Flattens [N, ...] to [N, prod(...)] (nn.Flatten with start_dim=1). */
export class Flatten extends Module {
  forward(x: Tensor): Tensor {
    return x.flatten(1);
  }
}
