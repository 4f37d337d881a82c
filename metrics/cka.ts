// Linear CKA (Kornblith et al. 2019) between two models' features at the same stitch point, a
// baseline similarity (docs/method.md, "Scores"). For centred feature matrices X [N, Dx], Y [N, Dy]:
//   CKA = ||Y^T X||_F² / (||X^T X||_F ||Y^T Y||_F),
// in [0, 1]; 1 when Y is an orthogonal transform times a scale of X. Larger = more similar.
// Samples: by default each image is one sample, its features flattened ([N, ...] -> [N, D]).
// With spatialAsSamples, a CNN map [N, C, H, W] gives N*H*W samples of C features (both maps
// must then have the same N, H, W). Everything is computed in float64.
import * as torch from "../torch/index.js";

export interface CkaOptions {
  /** Treat each spatial position of an [N, C, H, W] map as a sample (default: each image). */
  spatialAsSamples?: boolean;
}

/** Features as a float64 [samples, features] matrix (call inside tidy). */
export function featureMatrix(x: torch.Tensor, opts: CkaOptions = {}): torch.Tensor {
  const d = x.detach().double();
  if (opts.spatialAsSamples) {
    if (d.ndim !== 4) throw new RangeError(`spatialAsSamples needs [N, C, H, W], got [${x.shape}]`);
    return d.permute(0, 2, 3, 1).reshape(-1, d.shape[1]);
  }
  if (d.ndim < 1) throw new RangeError("featureMatrix: expected [N, ...]");
  return d.reshape(d.shape[0], -1);
}

/** Linear CKA between x [N, ...] and y [N, ...] (same N): see the file comment. */
export function linearCka(x: torch.Tensor, y: torch.Tensor, opts: CkaOptions = {}): number {
  return torch.tidy(() => {
    let X = featureMatrix(x, opts);
    let Y = featureMatrix(y, opts);
    if (X.shape[0] !== Y.shape[0]) throw new RangeError(`linearCka: ${X.shape[0]} vs ${Y.shape[0]} samples`);
    X = X.sub(X.mean(0, true));
    Y = Y.sub(Y.mean(0, true));
    const [n, dx] = X.shape;
    const dy = Y.shape[1];
    let cross: number;
    let xx: number;
    let yy: number;
    if (n * n < dx * dy || n < Math.max(dx, dy)) {
      // Gram form (cheaper when features outnumber samples): ||Y^T X||_F² = <X X^T, Y Y^T>_F.
      const K = X.mm(X.t());
      const L = Y.mm(Y.t());
      cross = K.mul(L).sum().item();
      xx = K.norm().item();
      yy = L.norm().item();
    } else {
      cross = Y.t().mm(X).square().sum().item();
      xx = X.t().mm(X).norm().item();
      yy = Y.t().mm(Y).norm().item();
    }
    return cross / (xx * yy);
  });
}

/**
 * Linear CKA accumulated over batches without holding all features: keeps sum x, sum y,
 * X^T X, Y^T Y and Y^T X (float64, Dx² + Dy² + Dx Dy numbers), so it suits moderate feature
 * counts (e.g. spatialAsSamples, or small flattened maps). Equals linearCka on the concatenation.
 */
export class StreamingCka {
  private n = 0;
  private sx: torch.Tensor | null = null;
  private sy: torch.Tensor | null = null;
  private sxx: torch.Tensor | null = null;
  private syy: torch.Tensor | null = null;
  private syx: torch.Tensor | null = null;

  constructor(private readonly opts: CkaOptions = {}) {}

  update(x: torch.Tensor, y: torch.Tensor): void {
    const next = torch.tidy(() => {
      const X = featureMatrix(x, this.opts).cpu();
      const Y = featureMatrix(y, this.opts).cpu();
      if (X.shape[0] !== Y.shape[0]) throw new RangeError(`StreamingCka: ${X.shape[0]} vs ${Y.shape[0]} samples`);
      const add = (acc: torch.Tensor | null, t: torch.Tensor) => (acc ? acc.add(t) : t);
      return {
        rows: X.shape[0],
        sx: add(this.sx, X.sum(0)),
        sy: add(this.sy, Y.sum(0)),
        sxx: add(this.sxx, X.t().mm(X)),
        syy: add(this.syy, Y.t().mm(Y)),
        syx: add(this.syx, Y.t().mm(X)),
      };
    });
    torch.dispose([this.sx, this.sy, this.sxx, this.syy, this.syx]);
    this.n += next.rows;
    this.sx = torch.keep(next.sx);
    this.sy = torch.keep(next.sy);
    this.sxx = torch.keep(next.sxx);
    this.syy = torch.keep(next.syy);
    this.syx = torch.keep(next.syx);
  }

  /** CKA over every sample seen; throws before the first. */
  result(): number {
    const { sx, sy, sxx, syy, syx } = this;
    if (!sx || !sy || !sxx || !syy || !syx || this.n === 0) throw new Error("StreamingCka.result(): no samples yet");
    const n = this.n;
    return torch.tidy(() => {
      // Centred second moments: S - s s'^T / n.
      const cxx = sxx.sub(sx.unsqueeze(1).mm(sx.unsqueeze(0)).div(n));
      const cyy = syy.sub(sy.unsqueeze(1).mm(sy.unsqueeze(0)).div(n));
      const cyx = syx.sub(sy.unsqueeze(1).mm(sx.unsqueeze(0)).div(n));
      return cyx.square().sum().item() / (cxx.norm().item() * cyy.norm().item());
    });
  }

  /** Frees the accumulated statistics. */
  dispose(): void {
    torch.dispose([this.sx, this.sy, this.sxx, this.syy, this.syx]);
    this.sx = this.sy = this.sxx = this.syy = this.syx = null;
  }
}
