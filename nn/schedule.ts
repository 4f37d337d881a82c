// Learning-rate schedules with torch.optim.lr_scheduler 1.13's semantics: constructing one
// takes the optimiser's current lr as the base and leaves it as it is (epoch 0); each step()
// advances one epoch (or one iteration, as the caller decides) and sets optimizer.lr.
// StepLR and MultiStepLR use PyTorch's chainable rule (multiply the current lr by gamma at a
// boundary), so the sequence of floats is PyTorch's; CosineAnnealingLR uses the closed form.
import type { Optimizer } from "./optim.js";

export interface LRScheduler {
  /** Advances one epoch and sets the optimiser's lr. */
  step(): void;
  /** Epochs advanced so far (0 after construction). */
  readonly lastEpoch: number;
}

abstract class BaseScheduler implements LRScheduler {
  /** The optimiser's lr when the scheduler was made (PyTorch's initial_lr / base_lrs). */
  readonly baseLr: number;
  #lastEpoch = 0;

  constructor(protected readonly optimizer: Optimizer) {
    this.baseLr = optimizer.lr;
  }
  get lastEpoch(): number {
    return this.#lastEpoch;
  }
  /** The lr the last step (or the construction) set, as get_last_lr()[0]. */
  getLastLr(): number {
    return this.optimizer.lr;
  }
  step(): void {
    this.#lastEpoch++;
    this.optimizer.lr = this.lrAt(this.#lastEpoch, this.optimizer.lr);
  }
  /** The lr for epoch `epoch` (>= 1), given the current one. */
  protected abstract lrAt(epoch: number, current: number): number;
}

function checkPositiveInt(who: string, name: string, v: number): void {
  if (!Number.isInteger(v) || v < 1) throw new Error(`${who}: ${name} must be a positive integer, got ${v}`);
}

/** Multiplies the lr by gamma every stepSize epochs. */
export class StepLR extends BaseScheduler {
  constructor(
    opt: Optimizer,
    readonly stepSize: number,
    readonly gamma = 0.1,
  ) {
    super(opt);
    checkPositiveInt("StepLR", "stepSize", stepSize);
  }
  protected lrAt(epoch: number, current: number): number {
    return epoch % this.stepSize === 0 ? current * this.gamma : current;
  }
}

/** Multiplies the lr by gamma at each milestone epoch (a milestone listed k times: gamma^k). */
export class MultiStepLR extends BaseScheduler {
  readonly #counts = new Map<number, number>();
  constructor(
    opt: Optimizer,
    milestones: number[],
    readonly gamma = 0.1,
  ) {
    super(opt);
    for (const m of milestones) {
      if (!Number.isInteger(m)) throw new Error(`MultiStepLR: milestones must be integers, got ${m}`);
      this.#counts.set(m, (this.#counts.get(m) ?? 0) + 1);
    }
  }
  get milestones(): number[] {
    return [...this.#counts.keys()].sort((a, b) => a - b);
  }
  protected lrAt(epoch: number, current: number): number {
    const k = this.#counts.get(epoch);
    return k === undefined ? current : current * this.gamma ** k;
  }
}

/** eta_min + (base - eta_min) (1 + cos(pi t / tMax)) / 2; past tMax the cosine goes on (back up), as PyTorch's. */
export class CosineAnnealingLR extends BaseScheduler {
  constructor(
    opt: Optimizer,
    readonly tMax: number,
    readonly etaMin = 0,
  ) {
    super(opt);
    checkPositiveInt("CosineAnnealingLR", "tMax", tMax);
  }
  protected lrAt(epoch: number): number {
    return this.etaMin + ((this.baseLr - this.etaMin) * (1 + Math.cos((Math.PI * epoch) / this.tMax))) / 2;
  }
}
