// APGD, the step-size-free PGD of Croce & Hein (2020), "Reliable evaluation of adversarial
// robustness with an ensemble of diverse parameter-free attacks" (Algorithm 1 and section 3),
// untargeted, under an L-inf budget, with the cross-entropy loss (APGD-CE) or the difference of
// logits ratio (APGD-DLR). The paper's reference evaluates its robust models with these two
// (external/attacks/attack.py get_attacks, through ART's AutoProjectedGradientDescent, combined
// per image by AutoAttack in evaluation/base/evaluator.py eval_robustness).
//
// The schedule, per image:
//   - the first step is a signed-gradient step of size eta = 2 eps from the start point;
//   - then z = P(x_k + eta sign(grad f(x_k))) and x_{k+1} = P(x_k + a (z - x_k) + (1 - a)(x_k - x_{k-1}))
//     with momentum a = 0.75 (P: projection onto the ball intersected with the valid pixel range);
//   - at checkpoints w_j = ceil(p_j N), p_0 = 0, p_1 = 0.22, p_{j+1} = p_j + max(p_j - p_{j-1} - 0.03, 0.06),
//     eta is halved and the iterate restarts from the best point so far when either
//       (1) fewer than rho = 0.75 of the steps since the last checkpoint raised the loss, or
//       (2) eta was not halved at the last checkpoint and the best loss has not grown since;
//   - an image counts as broken when the clean image or any iterate is misclassified.
// Inputs are normalised as the model sees them; eps and step sizes are in pixel units, scaled per
// channel by 1/std as in eval/pgd.ts. The model runs in eval mode.
import { type Dataset, type Normalization, validRange } from "../data/index.js";
import { inEvalMode, type Module } from "../nn/module.js";
import * as torch from "../torch/index.js";
import { type EvalOptions, forEachEvalBatch } from "./batches.js";
import { pixelsToNormalised } from "./pgd.js";

type Tensor = torch.Tensor;

export const APGD_LOSSES = ["ce", "dlr"] as const;
export type ApgdLoss = (typeof APGD_LOSSES)[number];

/** AutoAttack's number of APGD iterations. */
export const APGD_DEFAULT_STEPS = 100;

export interface ApgdOptions {
  /** L-inf radius in pixel units, e.g. 8/255. */
  eps: number;
  /** Iterations N: N new iterates, N gradient evaluations (AutoAttack: 100). */
  steps: number;
  loss: ApgdLoss;
  normalization: Normalization;
  /**
   * Start from a uniform point in the ball (AutoAttack's APGD; the reference's ART set-up, one
   * random initialisation) rather than from x. Default true. The clean image is checked either way.
   */
  randomStart?: boolean;
  /** Initial step size in pixel units (the paper's 2 eps: eval/config.ts apgdFirstStep, which resolveRobustEval applies). */
  stepSize: number;
  /** Momentum alpha. Default 0.75 (the paper). */
  momentum?: number;
  /** Share of loss-raising steps below which the step is halved (condition 1). Default 0.75. */
  rho?: number;
}

export interface ApgdResult {
  /** Per image: its first misclassified iterate if one was found, else the point of highest loss. */
  adv: Tensor;
  /** bool [N]: the clean image and every iterate were classified correctly. */
  robust: Tensor;
  /** float [N]: each image's final step size, in pixel units. */
  stepSize: Tensor;
}

/**
 * The DLR loss per image: -(z_y - max_{i != y} z_i) / (z_pi1 - z_pi3 + 1e-12), pi the classes
 * sorted by logit, descending. Invariant to shifting and scaling the logits; needs 3+ classes.
 */
export function dlrLoss(logits: Tensor, y: Tensor): Tensor {
  const classes = logits.shape[1];
  if (classes < 3) throw new Error(`the DLR loss needs at least 3 classes, got ${classes}`);
  return torch.tidy(() => {
    const [sorted, order] = torch.call("sort", logits, 1, true) as [Tensor, Tensor];
    const zy = logits.gather(1, y.reshape(-1, 1)).reshape(-1);
    const first = sorted.select(1, 0);
    const maxOther = torch.where(order.select(1, 0).eq(y), sorted.select(1, 1), first);
    return zy
      .sub(maxOther)
      .neg()
      .div(first.sub(sorted.select(1, 2)).add(1e-12));
  });
}

/** Per-image loss of the attack (raised by it). */
export function apgdLossValues(loss: ApgdLoss, logits: Tensor, y: Tensor): Tensor {
  return loss === "ce" ? torch.crossEntropy(logits, y, { reduction: "none" }) : dlrLoss(logits, y);
}

/**
 * The checkpoints w_0 = 0 < w_1 < ... <= steps of the step-size schedule. The fractions p_j are
 * kept in hundredths (integers) so that ceil(p_j N) has no rounding error: 100 steps give
 * 0, 22, 41, 57, 70, 80, 87, 93, 99. Few steps make some coincide; they count once.
 */
export function apgdCheckpoints(steps: number): number[] {
  const p = [0, 22];
  for (;;) {
    const next = p[p.length - 1] + Math.max(p[p.length - 1] - p[p.length - 2] - 3, 6);
    if (next > 100) break;
    p.push(next);
  }
  const w = p.map((h) => Math.ceil((h * steps) / 100)).filter((v) => v <= steps);
  return [...new Set(w)];
}

interface State {
  cur: Tensor;
  prev: Tensor;
  grad: Tensor;
  /** Loss at cur (condition 1 compares the next iterate's with it). */
  loss: Tensor;
  best: Tensor;
  bestGrad: Tensor;
  bestLoss: Tensor;
  eta: Tensor;
  /** Loss-raising steps since the last checkpoint. */
  raised: Tensor;
  bestLossAtCheck: Tensor;
  halvedAtCheck: Tensor;
  robust: Tensor;
  found: Tensor;
}

/** Disposes the tensors of `old` that `next` no longer holds. */
function advance(old: State, next: State): State {
  const kept = new Set<Tensor>(Object.values(next));
  for (const t of Object.values(old) as Tensor[]) if (!kept.has(t)) t.dispose();
  return next;
}

/** APGD adversarial examples for (x, y) (x normalised), and which images resisted every iterate. */
export function apgdAttack(model: Module, x: Tensor, y: Tensor, opts: ApgdOptions): ApgdResult {
  if (!Number.isInteger(opts.steps) || opts.steps < 1)
    throw new Error(`APGD: steps must be a positive integer, got ${opts.steps}`);
  if (!(opts.eps > 0)) throw new Error(`APGD: eps must be positive, got ${opts.eps}`);
  const alpha = opts.momentum ?? 0.75;
  const rho = opts.rho ?? 0.75;
  const checkpoints = apgdCheckpoints(opts.steps);
  return inEvalMode([model], () =>
    torch.tidy(() => {
      const n = x.shape[0];
      const perImage = (t: Tensor) => t.reshape(n, ...x.shape.slice(1).map(() => 1));
      const scale = pixelsToNormalised(1, opts.normalization, x.device);
      const eps = scale.mul(opts.eps);
      const { min, max } = validRange(opts.normalization, x.device);
      // The ball and the valid range are both boxes: projecting onto their intersection is a clamp.
      const lo = x.sub(eps).maximum(min);
      const hi = x.add(eps).minimum(max);
      // The per-image loss at p, its gradient (the sum's: images do not interact in eval mode),
      // and which images p misclassifies.
      const at = (p: Tensor, withGrad: boolean) =>
        torch.tidy(() =>
          torch.enableGrad(() => {
            const a = p.detach().requiresGrad_(withGrad);
            const logits = model.forward(a);
            const loss = apgdLossValues(opts.loss, logits, y);
            const grad = withGrad ? torch.grad(loss.sum(), a)[0]! : null;
            return { loss: loss.detach(), grad, wrong: logits.detach().argmax(1).ne(y) };
          }),
        );

      const cleanWrong = torch.noGrad(() => model.forward(x).argmax(1).ne(y));
      const start =
        opts.randomStart === false ? x.clone() : x.add(torch.randLike(x).mul(2).sub(1).mul(eps)).clamp(lo, hi);
      const s0 = at(start, true);
      const broken0 = cleanWrong.logicalOr(s0.wrong);
      let s: State = {
        cur: start,
        prev: start,
        grad: s0.grad!,
        loss: s0.loss,
        best: start,
        bestGrad: s0.grad!,
        bestLoss: s0.loss,
        eta: torch.full([n], opts.stepSize, { device: x.device }),
        raised: torch.zeros([n], { device: x.device }),
        bestLossAtCheck: s0.loss,
        halvedAtCheck: torch.zerosLike(cleanWrong),
        robust: broken0.logicalNot(),
        found: torch.where(perImage(cleanWrong), x, start),
      };
      torch.dispose([s0.wrong, broken0]);
      let checkpoint = 1;
      for (let k = 0; k < opts.steps; k++) {
        const last = k === opts.steps - 1;
        const next: State = torch.tidy(() => {
          const step = perImage(s.eta).mul(scale);
          const z = s.cur.add(s.grad.sign().mul(step)).clamp(lo, hi);
          // The first step has no momentum (no previous iterate).
          const a = k === 0 ? 1 : alpha;
          const cur = s.cur
            .add(z.sub(s.cur).mul(a))
            .add(s.cur.sub(s.prev).mul(1 - a))
            .clamp(lo, hi);
          const r = at(cur, !last);
          const grad = r.grad ?? s.grad;
          const newlyBroken = s.robust.logicalAnd(r.wrong);
          const improved = r.loss.gt(s.bestLoss);
          const st: State = {
            ...s,
            cur,
            prev: s.cur,
            grad,
            loss: r.loss,
            best: torch.where(perImage(improved), cur, s.best),
            bestGrad: torch.where(perImage(improved), grad, s.bestGrad),
            bestLoss: torch.where(improved, r.loss, s.bestLoss),
            raised: s.raised.add(r.loss.gt(s.loss).float()),
            robust: s.robust.logicalAnd(r.wrong.logicalNot()),
            found: torch.where(perImage(newlyBroken), cur, s.found),
          };
          if (checkpoint < checkpoints.length && k + 1 === checkpoints[checkpoint]) {
            const span = checkpoints[checkpoint] - checkpoints[checkpoint - 1];
            const fewRaised = st.raised.lt(rho * span);
            const stalled = st.halvedAtCheck.logicalNot().logicalAnd(st.bestLoss.le(st.bestLossAtCheck));
            const halve = fewRaised.logicalOr(stalled);
            // Halve the step and go back to the best point (its gradient, its loss).
            st.eta = torch.where(halve, st.eta.div(2), st.eta);
            st.cur = torch.where(perImage(halve), st.best, st.cur);
            st.grad = torch.where(perImage(halve), st.bestGrad, st.grad);
            st.loss = torch.where(halve, st.bestLoss, st.loss);
            st.raised = torch.zerosLike(st.raised);
            st.bestLossAtCheck = st.bestLoss;
            st.halvedAtCheck = halve;
          }
          return st;
        });
        if (checkpoint < checkpoints.length && k + 1 === checkpoints[checkpoint]) checkpoint++;
        s = advance(s, next);
      }
      return {
        adv: torch.where(perImage(s.robust), s.best, s.found).detach(),
        robust: s.robust,
        stepSize: s.eta,
      };
    }),
  );
}

export interface ApgdRobustness {
  /** Accuracy under APGD-CE. */
  ce: number;
  /** Accuracy under APGD-DLR. */
  dlr: number;
  /** Share of images that resisted both attacks (the robust accuracy to report). */
  worst: number;
  n: number;
}

/** Robust accuracy of every image of `ds` under APGD-CE and APGD-DLR, and per image the worst of both. */
export function apgdRobustAccuracy(
  model: Module,
  ds: Dataset,
  opts: Omit<ApgdOptions, "loss"> & EvalOptions,
): ApgdRobustness {
  let ce = 0;
  let dlr = 0;
  let worst = 0;
  let n = 0;
  forEachEvalBatch(model, ds, opts, (b) => {
    const rc = apgdAttack(model, b.x, b.y, { ...opts, loss: "ce" }).robust;
    const rd = apgdAttack(model, b.x, b.y, { ...opts, loss: "dlr" }).robust;
    ce += rc.sum().item();
    dlr += rd.sum().item();
    worst += rc.logicalAnd(rd).sum().item();
    n += b.indices.length;
  });
  return { ce: ce / n, dlr: dlr / n, worst: worst / n, n };
}
