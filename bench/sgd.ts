// SGD with momentum, weight decay and Nesterov, as torch.optim.SGD computes it (dampening 0),
// with in-place ops under noGrad. The gradient tensor doubles as the update's scratch space:
// it is zeroed before the next backward anyway.
import * as torch from "../torch/index.js";

type Tensor = torch.Tensor;

export interface SgdOptions {
  lr: number;
  momentum: number;
  weightDecay: number;
  nesterov: boolean;
}

export class SGD {
  readonly params: Tensor[];
  readonly opts: SgdOptions;
  /** Momentum buffers, zero-initialised up front so that every step does the same work. */
  readonly buffers: Tensor[];

  constructor(params: Tensor[], opts: SgdOptions) {
    this.params = params;
    this.opts = opts;
    this.buffers = params.map((p) => torch.keep(torch.zerosLike(p)));
  }

  /** optimizer.zero_grad(set_to_none=False): zero the accumulated gradients in place. */
  zeroGrad(): void {
    for (const p of this.params) {
      const g = p.grad; // a fresh handle on p's gradient: dispose it, not the gradient
      if (g) {
        g.zero_();
        g.dispose();
      }
    }
  }

  step(): void {
    const { lr, momentum, weightDecay, nesterov } = this.opts;
    torch.noGrad(() => {
      this.params.forEach((p, i) => {
        const g = p.grad;
        if (!g) return;
        const buf = this.buffers[i];
        g.add_(p, weightDecay);
        buf.mul_(momentum).add_(g);
        if (nesterov) g.add_(buf, momentum);
        p.add_(nesterov ? g : buf, -lr);
        g.dispose();
      });
    });
  }

  dispose(): void {
    for (const b of this.buffers) b.dispose();
  }
}
