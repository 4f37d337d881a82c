// IRIs tight by construction (the IRI settings `target` and `maxSteps`). The descent of
// stitch/iris.ts runs every image for `steps` steps whatever its residual: an easy image has long
// been tight, and a hard one may end above any useful bound (docs/method.md "How tight an IRI must
// be": one demo set's mean residual was 0.316 after 200 steps, and so its point went unjudged).
// Here each image's descent stops as soon as its own residual is at most `target`, and leaves the
// batch (the rest run on a smaller batch, so early stops save time); an image still above `target`
// after `steps` restarts from another start (another image of the batch, or fresh noise), with its
// best iterate kept across restarts, until it is tight or has had `maxSteps` steps in all.
//
// Why restarts and not more steps: on a demo front (width 1/8, clean, layer2.1, 48 images, Adam
// from another image, keep-best), a 200-step cosine gave a mean residual of 0.140 (max 0.350), and
// 400 and 800 steps 0.123 and 0.127 (max 0.30): the hard images stall. The best of four starts of
// 200 steps gave 0.081 (max 0.237). The start, not the length, decides a hard image.
//
// The loss is the sum of the images' own relative residuals, not the batch's Frobenius residual:
// then an image's descent does not depend on which others are still in the batch. The signed step
// is the same under either loss (the gradients differ by a positive factor per image); Adam's
// differs by that factor's drift over the steps.
import { Rng } from "../data/index.js";
import * as torch from "../torch/index.js";
import { type IriOptions, iriStepCap } from "./iri-options.js";

type Tensor = torch.Tensor;

/**
 * Restart r descends at RESTART_LR^r times Adam's learning rate: the rate that suits a front varies
 * (measured, one 200-step start: a width-1/8 demo front, 48 images, left a mean residual of 0.14 at
 * lr 0.1 and 0.22 at 1.0; a full-width ResNet-18 at layer4.1, 16 images, 0.36 at 0.1, 0.35 at 0.3
 * and 0.27 at 1.0), and each image keeps its best over all its starts, so a start at another rate
 * can only help it. On that full-width front, target 0.2 and three starts left a mean of 0.272 with
 * restarts at 10x the rate, 0.280 at 3x, 0.36 in one start.
 */
export const RESTART_LR = 10;

/** Adam's moments of the images still descending (torch.optim.Adam's update, amsgrad off, no weight decay). */
interface Moments {
  m: Tensor;
  v: Tensor;
  step: number;
}

export interface TightDescentInput {
  /** Source images in pixel units [0, 1], [B, C, H, W]. */
  x01: Tensor;
  /** A's features of x01 at the point (no grad). */
  target: Tensor;
  /** A's features of pixel-unit images at the point (normalises inside). */
  features: (p01: Tensor) => Tensor;
  /** Runs fn under the descent's autocast, if any. */
  amp: <T>(fn: () => T) => T;
  /** The start of every image for restart r (0: the first start); same shape as x01. */
  startFor: (restart: number) => Tensor;
  opts: IriOptions & { target: number };
  /** Each step: its number, the mean residual of the images still descending, and how many they are. */
  onStep: (step: number, residual: number, active: number) => void;
}

export interface TightDescent {
  /** Each image's best iterate (pixel units, not quantised), [B, C, H, W]. */
  chosen: Tensor;
  /** Descent steps each image had, over all its starts. */
  steps: Int32Array;
}

/** The first start's seed mixed with the restart's number (restart 0 is the first start's own). */
export const restartSeed = (batchSeed: number, restart: number): number =>
  restart === 0 ? batchSeed : new Rng(batchSeed, 0x7e57 + restart).int(2 ** 31);

/** Runs the tight descent; the caller owns `chosen`. */
export function tightDescent(input: TightDescentInput): TightDescent {
  const { x01, target, features, amp, opts, onStep } = input;
  const n = x01.shape[0] as number;
  const cap = iriStepCap(opts);
  const best: (Tensor | null)[] = new Array(n).fill(null);
  const bestResidual = new Float64Array(n).fill(Number.POSITIVE_INFINITY);
  const used = new Int32Array(n);
  const loose = () => Array.from({ length: n }, (_, i) => i).filter((i) => !(bestResidual[i] <= opts.target));
  let active = loose();
  // Per-image target norms: the residual of image i is ||A(x'_i) - A(x_i)|| / ||A(x_i)||.
  const targetNorm = torch.keep(torch.tidy(() => target.flatten(1).norm(2, 1).add(1e-12)));
  try {
    for (let restart = 0, first = 0; active.length && first < cap; restart++, first += opts.steps) {
      const length = Math.min(opts.steps, cap - first);
      runStart(restart, first, length);
      active = loose();
    }
    const chosen = torch.cat(best.map((b) => b as Tensor));
    return { chosen, steps: used };
  } finally {
    torch.dispose([targetNorm, ...best]);
  }

  /** One start of `length` steps for the images in `active`; writes their best iterates into `best`. */
  function runStart(restart: number, first: number, length: number): void {
    let rows = active.slice();
    const index = (ids: number[]) => torch.tensor(ids, { dtype: "int64", device: x01.device });
    const pick = (t: Tensor, ids: number[]) => torch.tidy(() => t.indexSelect(0, index(ids)));
    let state = torch.keep(
      torch.tidy(() => {
        const start = input.startFor(restart);
        return pick(start, rows);
      }),
    );
    const ball = opts.ball;
    let lo = ball === null ? null : torch.keep(torch.tidy(() => state.sub(ball).clamp(0, 1)));
    let hi = ball === null ? null : torch.keep(torch.tidy(() => state.add(ball).clamp(0, 1)));
    let goal = torch.keep(pick(target, rows));
    let goalNorm = torch.keep(pick(targetNorm, rows));
    let moments: Moments | null =
      opts.optimizer === "adam"
        ? { m: torch.keep(torch.zerosLike(state)), v: torch.keep(torch.zerosLike(state)), step: 0 }
        : null;
    const residualsOf = (p: Tensor) =>
      torch.tidy(() => {
        const f = amp(() => features(p));
        return f.sub(goal).flatten(1).norm(2, 1).div(goalNorm);
      });
    /** Records each row's iterate where it beats that image's best; returns the rows now tight. */
    const record = (values: Float32Array, p: Tensor): number[] => {
      const tight: number[] = [];
      for (let j = 0; j < rows.length; j++) {
        const i = rows[j] as number;
        const r = values[j] as number;
        if (!Number.isFinite(r)) throw new Error(`IRI generation diverged: residual ${r} of image ${i}`);
        if (r < bestResidual[i]) {
          bestResidual[i] = r;
          best[i]?.dispose();
          best[i] = torch.keep(torch.tidy(() => p.narrow(0, j, 1).detach().clone()));
        }
        if (r <= opts.target) tight.push(j);
      }
      return tight;
    };
    /** Drops the rows in `leaving` from every per-row tensor. */
    const drop = (leaving: number[]) => {
      const out = new Set(leaving);
      const keep = rows.map((_, j) => j).filter((j) => !out.has(j));
      const sub = (t: Tensor) => {
        const next = torch.keep(pick(t, keep));
        t.dispose();
        return next;
      };
      state = sub(state);
      goal = sub(goal);
      goalNorm = sub(goalNorm);
      if (lo) lo = sub(lo);
      if (hi) hi = sub(hi);
      if (moments) moments = { m: sub(moments.m), v: sub(moments.v), step: moments.step };
      rows = keep.map((j) => rows[j] as number);
    };
    try {
      for (let t = 0; t < length && rows.length; t++) {
        const p = state.detach().requiresGrad_(true);
        const left = torch.tidy(() => {
          const r = residualsOf(p);
          const values = torch.noGrad(() => r.detach().toTypedArray()) as Float32Array;
          onStep(first + t, values.reduce((s, v) => s + v, 0) / values.length, values.length);
          const tight = record(values, p);
          const [g] = torch.grad(r.sum(), p);
          torch.noGrad(() => {
            const next = update(p.detach(), g as Tensor, t, length, moments, {
              ...opts,
              lr: opts.lr * RESTART_LR ** restart,
            });
            const bounded = lo && hi ? next.clamp(lo, hi) : next.clamp(0, 1);
            state.copy_(bounded);
          });
          return tight;
        });
        p.dispose();
        for (let j = 0; j < rows.length; j++) if (!left.includes(j)) used[rows[j] as number]++;
        if (left.length) drop(left);
      }
      // The last iterate, measured as the others were.
      if (rows.length)
        torch.tidy(() => {
          const values = torch.noGrad(() => residualsOf(state).toTypedArray()) as Float32Array;
          record(values, state);
        });
    } finally {
      torch.dispose([state, goal, goalNorm, lo, hi, moments?.m, moments?.v]);
    }
  }
}

/**
 * One descent step of the rows: a signed step of `stepSize`, or Adam with the learning rate on a
 * cosine from `lr` to 0 over the start's `length` steps (as stitch/iris.ts's Adam with
 * CosineAnnealingLR). Returns the new iterate.
 */
function update(p: Tensor, g: Tensor, t: number, length: number, moments: Moments | null, opts: IriOptions): Tensor {
  if (!moments) return p.sub(g.sign().mul(opts.stepSize));
  const [beta1, beta2, eps] = [0.9, 0.999, 1e-8];
  const lr = (opts.lr * (1 + Math.cos((Math.PI * t) / length))) / 2;
  const step = ++moments.step;
  moments.m.mul_(beta1).add_(g, 1 - beta1);
  moments.v.mul_(beta2).addcmul_(g, g, 1 - beta2);
  const denom = moments.v
    .sqrt()
    .div_(Math.sqrt(1 - beta2 ** step))
    .add_(eps);
  return p.clone().addcdiv_(moments.m, denom, -lr / (1 - beta1 ** step));
}
