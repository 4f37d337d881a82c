// The objectives T is trained with (docs/method.md, "Objectives"). Each compares the stitched model
// with B on the same input x (a real image in standard mode, an IRI in invariance-aware mode;
// which one is the caller's choice of data, so the mode rule lives in the data, not here):
//   HLM  cross-entropy of the stitched logits with the ground-truth labels;
//   SLM  cross-entropy between the stitched softmax and B's softmax on x (soft labels);
//   DM   relative Frobenius distance between T(A_{<=i}(x)) and B_{<=i}(x);
//   FuLA the mean, over the stitch point and every later stitch point of B (up to the head
//        input), of the relative Frobenius distance between the stitched model's features
//        and B's own.
// Weighted sums of them are an option: { hlm: 1, fula: 0.5 }. Their names and spelling (OBJECTIVES,
// parseObjective, formatObjective) are settings, defined in stitch/config.ts.
import * as torch from "../torch/index.js";
import type { ObjectiveWeights } from "./config.js";
import type { ImageIds } from "./noise.js";
import type { StitchedModel } from "./stitched.js";

type Tensor = torch.Tensor;

/** ||a - b||_F / ||b||_F over the whole batch (docs/method.md: Frobenius norms over the batch). */
export function relativeDistance(a: Tensor, b: Tensor): Tensor {
  return a.sub(b).norm().div(b.norm().add(1e-12));
}

/** B's points from the stitch point to its last point: the features FuLA aligns. */
export function fulaPoints(s: StitchedModel): string[] {
  const names = s.back.stitchPoints.map((p) => p.name);
  // At the head's input (the "front only" end) the only later point is the point itself.
  const i = names.indexOf(s.backPoint);
  return i < 0 ? [s.backPoint] : names.slice(i);
}

/** HLM: cross-entropy of the stitched logits with the ground-truth labels. */
export const hlm = (logits: Tensor, labels: Tensor): Tensor => torch.crossEntropy(logits, labels);

/** SLM: cross-entropy of the stitched logits with B's softmax on the same input (soft labels). */
export const slm = (logits: Tensor, backLogits: Tensor): Tensor => torch.crossEntropy(logits, backLogits.softmax(1));

/** DM: relative Frobenius distance between T's output and B's features at the stitch point. */
export const dm = (stitched: Tensor, back: Tensor): Tensor => relativeDistance(stitched, back);

/** FuLA: the mean relative distance between the stitched model's and B's features over `points`. */
export function fula(stitched: Record<string, Tensor>, back: Record<string, Tensor>, points: string[]): Tensor {
  return torch.stack(points.map((p) => relativeDistance(stitched[p], back[p]))).mean();
}

/** B's targets for a batch: its logits and, when DM or FuLA need them, its features. */
export interface StitchTargets {
  logits: Tensor;
  features: Record<string, Tensor>;
}

/** The points whose features the objective needs from B (none for HLM and SLM alone). */
export function targetPoints(s: StitchedModel, weights: ObjectiveWeights): string[] {
  if ((weights.fula ?? 0) > 0) return fulaPoints(s);
  return (weights.dm ?? 0) > 0 ? [s.backPoint] : [];
}

/** B's targets on x, without gradients (B as it is set: eval or batch statistics). */
export function stitchTargets(s: StitchedModel, x: Tensor, weights: ObjectiveWeights): StitchTargets {
  return torch.noGrad(() => s.back.forwardIntermediates(s.backInput(x), targetPoints(s, weights)));
}

/**
 * The training loss of T on a batch: x is what both the stitched model and B see, labels are
 * HLM's targets. B runs without gradients (its targets); the stitched model runs A, T and B's
 * tail (s.tail, B's own layers or their adapting copy); the gradient reaches T only. `indices`
 * (the images' positions in the training set) are what a noise-cluster front reads with the labels.
 */
export function stitchLoss(
  s: StitchedModel,
  x: Tensor,
  labels: Tensor,
  weights: ObjectiveWeights,
  indices?: Int32Array,
): Tensor {
  const ids: ImageIds | undefined = indices ? { y: labels, indices, split: "train" } : undefined;
  return torch.tidy(() => stitchLossFrom(s, s.frontFeatures(x, ids), stitchTargets(s, x, weights), labels, weights));
}

/**
 * The same loss from A's features at the point and B's targets, however they were obtained
 * (computed now, or once per run when A and B are frozen in eval mode: stitch/frozen.ts).
 */
export function stitchLossFrom(
  s: StitchedModel,
  frontFeatures: Tensor,
  target: StitchTargets,
  labels: Tensor,
  weights: ObjectiveWeights,
): Tensor {
  return torch.tidy(() => {
    const points = targetPoints(s, weights);
    const h = s.layer.forward(frontFeatures);
    const mine = s.tail.forwardIntermediatesFrom(h, s.backPoint, points);
    const terms: Tensor[] = [];
    const add = (w: number | undefined, f: () => Tensor) => {
      if (w) terms.push(f().mul(w));
    };
    add(weights.hlm, () => hlm(mine.logits, labels));
    add(weights.slm, () => slm(mine.logits, target.logits));
    add(weights.dm, () => dm(h, target.features[s.backPoint]));
    add(weights.fula, () => fula(mine.features, target.features, points));
    if (terms.length === 0) throw new Error("stitchLoss: no objective has a positive weight");
    return terms.length === 1 ? terms[0] : torch.stack(terms).sum();
  });
}
