// Relative numerical rank and condition number of a stitching layer's weight (docs/method.md,
// "Scores"): a linear layer's [out, in] matrix or a 1x1 convolution's [out, in, 1, 1] weight.
// Singular values are computed in float64.
// - rank: singular values above max(S) * max(out, in) * eps(float32), torch.linalg.matrix_rank's
//   default tolerance for a float32 matrix; relativeRank = rank / min(out, in), in [0, 1].
//   Larger = T keeps more directions (1: full rank). Not a similarity score in itself.
// - conditionNumber = max(S) / min(S) over the min(out, in) singular values (torch.linalg.cond's
//   2-norm); Infinity when min(S) is 0. Smaller = better conditioned (1: a scaled isometry).
import * as torch from "../torch/index.js";

/** Machine epsilon of float32 (torch.finfo(torch.float32).eps). */
export const FLOAT32_EPS = 2 ** -23;

export interface WeightSpectrum {
  /** Singular values, descending. */
  singularValues: number[];
  rank: number;
  relativeRank: number;
  conditionNumber: number;
}

/** The weight as an [out, in] matrix: 2-D as is, [out, in, 1, 1] reshaped. */
export function weightMatrix(w: torch.Tensor): torch.Tensor {
  const s = w.shape;
  if (s.length === 2) return w;
  if (s.length === 4 && s[2] === 1 && s[3] === 1) return w.reshape(s[0], s[1]);
  throw new RangeError(`weightMatrix: expected [out, in] or [out, in, 1, 1], got [${s}]`);
}

/** Singular values, numerical rank, relative rank and condition number of a stitching weight. */
export function weightSpectrum(w: torch.Tensor): WeightSpectrum {
  const m = weightMatrix(w);
  const [out, inp] = m.shape;
  const singularValues = Array.from(
    torch.tidy(() => torch.svdvals(m.detach().cpu().double()).toTypedArray() as Float64Array),
  );
  const max = singularValues[0] ?? 0;
  const min = singularValues[singularValues.length - 1] ?? 0;
  const tol = max * Math.max(out, inp) * FLOAT32_EPS;
  const rank = singularValues.filter((s) => s > tol).length;
  return {
    singularValues,
    rank,
    relativeRank: rank / Math.min(out, inp),
    conditionNumber: min === 0 ? Number.POSITIVE_INFINITY : max / min,
  };
}
