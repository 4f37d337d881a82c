// IRI generation (docs/method.md, "IRI generation"): for a batch of images x and a frozen front
// model A in eval mode, find x' with A_{<=i}(x') close to A_{<=i}(x) by descending the relative
// distance ||A_{<=i}(x') - A_{<=i}(x)||_F / ||A_{<=i}(x)||_F (Frobenius norms over the batch).
//
// The iterate lives in pixel space p in [0, 1] and the model sees (p - mean) / std. That is the
// method's clamp to the valid range, per channel in normalised space, exactly (clamping p to
// [0, 1] is clamping x' to [(0 - mean)/std, (1 - mean)/std] per channel), and it makes the step size a pixel unit:
// a signed step of 1/255 moves every pixel by one grey level whatever the channel's std, as
// the PGD attack's budget does (eval/pgd.ts). Sign steps are the same in either space.

import { type Normalization, Rng } from "../data/index.js";
import type { StitchableModel } from "../models/stitchable.js";
import { inEvalMode } from "../nn/module.js";
import { Adam } from "../nn/optim.js";
import { CosineAnnealingLR } from "../nn/schedule.js";
import * as torch from "../torch/index.js";
import { type IriOptions, type IriStart, iriOptionsProblem } from "./iri-options.js";
import { restartSeed, tightDescent } from "./iri-tight.js";

type Tensor = torch.Tensor;

export interface IriBatch {
  /** uint8 [B, C, H, W]: the IRIs quantised to 8 bits, as they are stored and used. */
  images: Tensor;
  /** Per image, ||A(x'_j) - A(x_j)|| / ||A(x_j)|| of the quantised x'. */
  residuals: Float32Array;
  /** ||A(x') - A(x)||_F / ||A(x)||_F over the batch (the minimised loss without a target), quantised x'. */
  batchResidual: number;
  /** Descent steps each image had (`steps` for every image unless the options give a target). */
  steps: Int32Array;
  /**
   * Per image, 1 where A's own head gives x' the class it gives x (A's layers after the point on
   * the stored x''s features against x's), else 0: whether A itself tells x' from x, a check that
   * needs no scale of features and so reads alike at every architecture and point.
   */
  frontAgrees: Uint8Array;
}

/** Per-image relative distance of features a to b (any shape with the batch first). */
export function perImageResidual(a: Tensor, b: Tensor): Tensor {
  return torch.tidy(() => a.sub(b).flatten(1).norm(2, 1).div(b.flatten(1).norm(2, 1).add(1e-12)));
}

function channelTensor(values: number[], device: torch.Device): Tensor {
  return torch.tensor(values, { device }).reshape(1, values.length, 1, 1);
}

function startingPoint(x01: Tensor, start: IriStart, norm: Normalization, batchSeed: number): Tensor {
  if (start === "uniform") return torch.randLike(x01);
  if (start === "gaussian")
    return torch
      .randnLike(x01)
      .mul(channelTensor(norm.std, x01.device))
      .add(channelTensor(norm.mean, x01.device))
      .clamp(0, 1);
  // Another image of the batch: image perm[i] starts from image perm[i + 1] (cyclically), a
  // seeded derangement, so no IRI starts from its own source and each seed (each replicate)
  // pairs the images differently. A batch of one has no other image and starts from itself.
  const n = x01.shape[0] as number;
  const perm = new Rng(batchSeed, 0x5a27).permutation(n);
  const from = new Array<number>(n);
  for (let i = 0; i < n; i++) from[perm[i] as number] = perm[(i + 1) % n] as number;
  return x01.indexSelect(0, torch.tensor(from, { dtype: "int64", device: x01.device }));
}

/**
 * The IRIs of the labels-only sender (stitch/noise.ts: a front that sends each image's label and
 * nothing of its pixels): every input is an IRI of its source, since the sender's features at the
 * point do not depend on the image, so the IRIs are their starts, drawn as the descent draws its
 * first start (the same seed), with residual 0 and no step. Invariance-aware stitching of the
 * sender then trains T to map the label's code to B's output on the start.
 */
export function labelsOnlyIriBatch(x: Tensor, norm: Normalization, opts: IriOptions, batchSeed: number): IriBatch {
  if (x.dtype !== "uint8") throw new Error(`labelsOnlyIriBatch: expected uint8 images, got ${x.dtype}`);
  const n = x.shape[0] as number;
  return torch.tidy(() => {
    torch.manualSeed(batchSeed);
    const start = startingPoint(x.float().div(255), opts.start, norm, batchSeed);
    return {
      images: torch.keep(start.mul(255).round().clamp(0, 255).to("uint8")),
      residuals: new Float32Array(n),
      batchResidual: 0,
      steps: new Int32Array(n),
      // The sender sends x''s code for x': A's answer is x''s by construction.
      frontAgrees: new Uint8Array(n).fill(1),
    };
  });
}

/**
 * IRIs for one batch. x is uint8 [B, C, H, W]; the front model is used frozen, in eval mode
 * (its weights stop requiring gradients; only x' does). `batchSeed` seeds the start.
 * `onStep(t, residual, active)` sees the batch residual of the iterate before step t, and the images
 * still descending (all of them, unless the options give a target).
 */
export function generateIriBatch(
  front: StitchableModel,
  point: string,
  x: Tensor,
  norm: Normalization,
  opts: IriOptions,
  batchSeed: number,
  onStep: (step: number, residual: number, active: number) => void = () => {},
): IriBatch {
  front.stitchPoint(point); // one error, naming the points, when there is no such point
  if (x.dtype !== "uint8") throw new Error(`generateIriBatch: expected uint8 images, got ${x.dtype}`);
  const problem = iriOptionsProblem(opts);
  if (problem) throw new Error(`IRI settings: ${problem}`);
  front.requiresGrad_(false);
  return inEvalMode([front], () =>
    torch.tidy(() => {
      const mean = channelTensor(norm.mean, x.device);
      const std = channelTensor(norm.std, x.device);
      const features = (p01: Tensor) => front.forwardTo(p01.sub(mean).div(std), point);
      // The descent's forward (and loss) under autocast when asked; target and stored residuals in float32.
      const amp = <T>(fn: () => T): T => torch.withAutocast(opts.autocast ?? undefined, x.device, fn);
      const x01 = x.float().div(255);
      const target = torch.noGrad(() => features(x01));
      const targetNorm = target.norm().item();
      if (!(targetNorm > 0))
        throw new Error(`A's features at ${point} are ${targetNorm} for this batch: nothing to match`);

      // Quantise as stored, then measure what is stored: the features' residual and A's own answer.
      const store = (chosen: Tensor, steps: Int32Array): IriBatch => {
        const images = chosen.mul(255).round().clamp(0, 255).to("uint8");
        const stored = torch.noGrad(() => features(images.float().div(255)));
        const agrees = torch.noGrad(() =>
          front.forwardFrom(stored, point).argmax(1).eq(front.forwardFrom(target, point).argmax(1)).to("uint8"),
        );
        return {
          images,
          residuals: perImageResidual(stored, target).toTypedArray() as Float32Array,
          batchResidual: stored.sub(target).norm().item() / targetNorm,
          steps,
          frontAgrees: Uint8Array.from(agrees.toTypedArray() as Uint8Array),
        };
      };
      const { target: tight } = opts;
      if (tight !== undefined) {
        const startFor = (restart: number) => {
          const seed = restartSeed(batchSeed, restart);
          torch.manualSeed(seed);
          return startingPoint(x01, opts.start, norm, seed);
        };
        const out = tightDescent({ x01, target, features, amp, startFor, opts: { ...opts, target: tight }, onStep });
        try {
          return store(out.chosen, out.steps);
        } finally {
          out.chosen.dispose();
        }
      }

      torch.manualSeed(batchSeed);
      const start = startingPoint(x01, opts.start, norm, batchSeed);
      const lo = opts.ball === null ? 0 : start.sub(opts.ball).clamp(0, 1);
      const hi = opts.ball === null ? 1 : start.add(opts.ball).clamp(0, 1);
      const p = torch.keep(start.clone()).requiresGrad_(true);
      const adam = opts.optimizer === "adam" ? new Adam([p], { lr: opts.lr }) : null;
      const schedule = adam ? new CosineAnnealingLR(adam, opts.steps) : null;
      let best: Tensor | null = null;
      let bestResidual: Tensor | null = null;
      const track = (current: Tensor, residual: Tensor) => {
        const next = torch.noGrad(() => {
          if (!best || !bestResidual) return { b: current.clone(), r: residual.clone() };
          const better = residual.lt(bestResidual);
          return {
            b: torch.where(better.reshape(-1, 1, 1, 1), current, best),
            r: torch.where(better, residual, bestResidual),
          };
        });
        torch.dispose([best, bestResidual]);
        best = torch.keep(next.b);
        bestResidual = torch.keep(next.r);
      };
      // The default descent (signed steps, last iterate) as a step with no host read inside it,
      // so that on a GPU it can be a CUDA graph (torch/graphs.ts; STITCHLAB_CUDA_GRAPHS=1). The
      // residual is read after each step; it is the one before the step, as in the loop below.
      const graphable = !adam && !opts.keepBest;
      const residualOut = graphable ? torch.keep(torch.zeros([], { device: x.device })) : null;
      const graphed = residualOut
        ? new torch.GraphedStep(
            x.device,
            () => {
              const { loss } = amp(() => ({ loss: features(p).sub(target).norm().div(targetNorm) }));
              torch.noGrad(() => residualOut.copy_(loss));
              const [g] = torch.grad(loss, p);
              torch.noGrad(() => {
                p.sub_((g as Tensor).sign().mul(opts.stepSize));
                p.clamp_(lo, hi);
              });
            },
            { graphs: torch.graphsRequested() && !opts.autocast },
          )
        : null;
      try {
        if (graphed && residualOut)
          for (let t = 0; t < opts.steps; t++) {
            graphed.step();
            const value = residualOut.item();
            if (!Number.isFinite(value)) throw new Error(`IRI generation diverged at step ${t + 1}: residual ${value}`);
            onStep(t, value, x.shape[0] as number);
          }
        else
          for (let t = 0; t < opts.steps; t++) {
            torch.tidy(() => {
              const { f, loss } = amp(() => {
                const f = features(p);
                return { f, loss: f.sub(target).norm().div(targetNorm) };
              });
              const value = loss.item();
              if (!Number.isFinite(value))
                throw new Error(`IRI generation diverged at step ${t + 1}: residual ${value}`);
              onStep(t, value, x.shape[0] as number);
              if (opts.keepBest)
                track(
                  p.detach(),
                  torch.noGrad(() => perImageResidual(f.detach(), target)),
                );
              loss.backward();
              torch.noGrad(() => {
                if (adam) {
                  adam.step();
                  schedule?.step();
                } else {
                  const g = p.grad as Tensor;
                  p.sub_(g.sign().mul(opts.stepSize));
                }
                p.clamp_(lo, hi);
              });
              p.grad = null;
            });
          }
        const last = p.detach();
        if (opts.keepBest)
          track(
            last,
            // Measured as the iterates were (under autocast when asked), to compare like with like.
            torch.noGrad(() =>
              perImageResidual(
                amp(() => features(last)),
                target,
              ),
            ),
          );
        const chosen: Tensor = opts.keepBest && best ? best : last;
        return store(chosen, new Int32Array(x.shape[0] as number).fill(opts.steps));
      } finally {
        adam?.dispose();
        graphed?.dispose();
        torch.dispose([p, best, bestResidual, residualOut]);
      }
    }),
  );
}
