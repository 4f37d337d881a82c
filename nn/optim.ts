// Optimisers with torch.optim 1.13's update rules, operator for operator (its single-tensor
// code path, the default on CPU), so a run here and in Python follow the same arithmetic. One
// parameter group: `lr` is a plain property that schedulers (schedule.ts) set.
//
// Hot path: step() runs every training step, so per parameter it makes only the operator calls
// PyTorch makes (plain SGD: one add_), frees each temporary at once, and never reads shapes or
// data back to JavaScript. State buffers (momentum, moments) are created on a parameter's
// first step with a gradient, kept out of scopes, and freed by dispose().
import * as torch from "../torch/index.js";

type Tensor = torch.Tensor;

export interface Optimizer {
  /** One update of every parameter whose .grad is not null. */
  step(): void;
  /** Zeroes every gradient in place (PyTorch 1.13's default), or sets it to null with setToNone. */
  zeroGrad(setToNone?: boolean): void;
  /** The learning rate of the next step(). */
  lr: number;
  /** Frees the optimiser's state buffers; the optimiser cannot step afterwards. */
  dispose(): void;
}

function checkParams(params: Tensor[], who: string): Tensor[] {
  if (params.length === 0) throw new Error(`${who}: got an empty parameter list`);
  const seen = new Set<Tensor>();
  for (const [i, p] of params.entries()) {
    if (seen.has(p)) throw new Error(`${who}: parameter ${i} appears more than once in the parameter list`);
    seen.add(p);
    if (!p.isLeaf) throw new Error(`${who}: can't optimize a non-leaf Tensor (parameter ${i})`);
  }
  return [...params];
}

function checkNonNegative(who: string, name: string, v: number): void {
  if (!(v >= 0) || !Number.isFinite(v)) throw new Error(`${who}: invalid ${name}: ${v} (must be a finite number >= 0)`);
}

abstract class BaseOptimizer implements Optimizer {
  lr: number;
  protected readonly params: Tensor[];
  #disposed = false;

  constructor(params: Tensor[], lr: number, who: string) {
    this.params = checkParams(params, who);
    checkNonNegative(who, "learning rate", lr);
    this.lr = lr;
  }

  /** Updates parameter i from its gradient g (a wrapper the caller frees); runs under noGrad. */
  protected abstract update(i: number, p: Tensor, g: Tensor): void;
  /** Every state buffer (momentum, moments) created so far; freed by dispose(). */
  abstract stateTensors(): Tensor[];

  step(): void {
    if (this.#disposed) throw new Error(`${this.constructor.name}.step(): the optimizer has been disposed`);
    torch.noGrad(() =>
      torch.tidy(() => {
        const ps = this.params;
        for (let i = 0; i < ps.length; i++) {
          const p = ps[i];
          const g = p.grad;
          if (g === null) continue;
          this.update(i, p, g);
          g.dispose();
        }
      }),
    );
  }

  zeroGrad(setToNone = false): void {
    torch.noGrad(() => {
      for (const p of this.params) {
        if (setToNone) {
          p.grad = null;
          continue;
        }
        const g = p.grad;
        if (g === null) continue;
        // As PyTorch: a gradient with history (create_graph) is detached before zeroing.
        if (g.requiresGrad) g.detach_();
        g.zero_();
        g.dispose();
      }
    });
  }

  dispose(): void {
    for (const t of this.stateTensors()) t.dispose();
    this.#disposed = true;
  }
}

export interface SGDOptions {
  lr: number;
  momentum?: number;
  dampening?: number;
  nesterov?: boolean;
  weightDecay?: number;
}

/** torch.optim.SGD: weight decay added to the gradient, momentum buffer started at the first gradient. */
export class SGD extends BaseOptimizer {
  momentum: number;
  dampening: number;
  nesterov: boolean;
  weightDecay: number;
  readonly #buf: (Tensor | null)[];

  constructor(params: Tensor[], opts: SGDOptions) {
    super(params, opts.lr, "SGD");
    this.momentum = opts.momentum ?? 0;
    this.dampening = opts.dampening ?? 0;
    this.nesterov = opts.nesterov ?? false;
    this.weightDecay = opts.weightDecay ?? 0;
    checkNonNegative("SGD", "momentum", this.momentum);
    checkNonNegative("SGD", "weight decay", this.weightDecay);
    if (!Number.isFinite(this.dampening)) throw new Error(`SGD: invalid dampening: ${this.dampening}`);
    if (this.nesterov && (this.momentum <= 0 || this.dampening !== 0))
      throw new Error("SGD: Nesterov momentum requires a momentum and zero dampening");
    this.#buf = this.params.map(() => null);
  }

  protected update(i: number, p: Tensor, g: Tensor): void {
    // d_p = g + wd * p (a temporary this method owns), or g itself
    let decayed = this.weightDecay !== 0 ? g.add(p, this.weightDecay) : null;
    const dp = decayed ?? g;
    if (this.momentum === 0) {
      p.add_(dp, -this.lr);
    } else {
      let buf = this.#buf[i];
      if (buf === null) {
        // buf = clone(d_p): a fresh d_p (weight decay) becomes the buffer as it is; the gradient is copied.
        buf = torch.keep(decayed ?? g.clone());
        decayed = null;
        this.#buf[i] = buf;
      } else {
        buf.mul_(this.momentum).add_(dp, 1 - this.dampening);
      }
      if (this.nesterov) {
        const update = dp.add(buf, this.momentum);
        p.add_(update, -this.lr);
        update.dispose();
      } else {
        p.add_(buf, -this.lr);
      }
    }
    decayed?.dispose();
  }

  stateTensors(): Tensor[] {
    return this.#buf.filter((b): b is Tensor => b !== null);
  }
}

export interface AdamOptions {
  lr?: number;
  betas?: [number, number];
  eps?: number;
  weightDecay?: number;
}

interface AdamState {
  step: number;
  expAvg: Tensor;
  expAvgSq: Tensor;
}

abstract class AdamBase extends BaseOptimizer {
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  readonly #state: (AdamState | null)[];

  constructor(params: Tensor[], opts: AdamOptions, defaultWeightDecay: number, who: string) {
    super(params, opts.lr ?? 1e-3, who);
    [this.beta1, this.beta2] = opts.betas ?? [0.9, 0.999];
    this.eps = opts.eps ?? 1e-8;
    this.weightDecay = opts.weightDecay ?? defaultWeightDecay;
    for (const [k, b] of [this.beta1, this.beta2].entries())
      if (!(b >= 0 && b < 1)) throw new Error(`${who}: invalid beta parameter at index ${k}: ${b}`);
    checkNonNegative(who, "epsilon value", this.eps);
    checkNonNegative(who, "weight_decay value", this.weightDecay);
    this.#state = this.params.map(() => null);
  }

  /** Adam: L2 added to the gradient (returns a new tensor); AdamW: p *= 1 - lr * wd (returns g). */
  protected abstract decay(p: Tensor, g: Tensor): Tensor;

  protected update(i: number, p: Tensor, g: Tensor): void {
    let s = this.#state[i];
    if (s === null) {
      s = { step: 0, expAvg: torch.keep(torch.zerosLike(p)), expAvgSq: torch.keep(torch.zerosLike(p)) };
      this.#state[i] = s;
    }
    const step = ++s.step;
    const grad = this.decay(p, g);
    const { beta1, beta2 } = this;
    s.expAvg.mul_(beta1).add_(grad, 1 - beta1);
    s.expAvgSq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
    if (grad !== g) grad.dispose();
    const biasCorrection1 = 1 - beta1 ** step;
    const biasCorrection2Sqrt = Math.sqrt(1 - beta2 ** step);
    const stepSize = this.lr / biasCorrection1;
    // denom = sqrt(v) / sqrt(bc2) + eps, then p -= step_size * m / denom
    const denom = s.expAvgSq.sqrt().div_(biasCorrection2Sqrt).add_(this.eps);
    p.addcdiv_(s.expAvg, denom, -stepSize);
    denom.dispose();
  }

  stateTensors(): Tensor[] {
    return this.#state.flatMap((s) => (s === null ? [] : [s.expAvg, s.expAvgSq]));
  }
}

/** torch.optim.Adam (amsgrad off): weight decay is L2 added to the gradient. */
export class Adam extends AdamBase {
  constructor(params: Tensor[], opts: AdamOptions = {}) {
    super(params, opts, 0, "Adam");
  }
  protected decay(p: Tensor, g: Tensor): Tensor {
    return this.weightDecay !== 0 ? g.add(p, this.weightDecay) : g;
  }
}

/** torch.optim.AdamW (amsgrad off): decoupled weight decay, p *= 1 - lr * wd before the Adam step; default 1e-2. */
export class AdamW extends AdamBase {
  constructor(params: Tensor[], opts: AdamOptions = {}) {
    super(params, opts, 1e-2, "AdamW");
  }
  protected decay(p: Tensor, g: Tensor): Tensor {
    // PyTorch multiplies even when weight_decay is 0 (by 1, a no-op); skip that call.
    if (this.weightDecay !== 0) p.mul_(1 - this.lr * this.weightDecay);
    return g;
  }
}
