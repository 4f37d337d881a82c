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

/**
 * The step schedule's drops, as fractions of training: lr x0.1 at 1/3 and 2/3 (docs/method.md,
 * "Base models" and "Training defaults").
 */
export const STEP_SCHEDULE_FRACTIONS: readonly number[] = [1 / 3, 2 / 3];

/**
 * The epochs at which the step schedule multiplies the lr by 0.1: floor(f * epochs) for each
 * fraction f, as the reference's int(1/3 * epochs) (train_base.py, training/schedulers.py); 200
 * epochs give 66 and 133, 4 give 1 and 2. The one rule for base training and stitching alike.
 * A milestone at epoch 0 (fewer than 3 epochs) never fires: the first epoch runs at the base lr.
 */
export function stepScheduleMilestones(fractions: readonly number[], epochs: number): number[] {
  for (const f of fractions)
    if (!(f >= 0 && f <= 1)) throw new Error(`milestones are fractions of training in [0, 1], got ${f}`);
  // The tolerance keeps 0.57 * 100 (56.99999999999999 in floating point) at 57.
  return fractions.map((f) => Math.floor(f * epochs + 1e-9));
}

/** The step schedule over `epochs`: MultiStepLR at stepScheduleMilestones(fractions, epochs), gamma from the recipe (its lrDecay). */
export function stepSchedule(opt: Optimizer, fractions: readonly number[], epochs: number, gamma: number): MultiStepLR {
  return new MultiStepLR(opt, stepScheduleMilestones(fractions, epochs), gamma);
}
