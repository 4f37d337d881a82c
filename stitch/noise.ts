// The noise-cluster sender (issue 40's third null front): Smith, Mannering & Marcu, "Functional
// alignment can mislead: examining model stitching" (ICML 2025), stitched clustered random noise
// into MNIST- and ImageNet-trained receivers with high accuracy. Here it takes the front's place
// at a point: image i of class y sends
//     center[y] + sigma * eps(seed, split, i)
// at the point's shape, where each class's center is one draw of N(0, 1) per element (seeded by
// the stitch's seed) and eps is N(0, 1) per element, fixed per image (keyed by the split and the
// image's position, so an image sends the same noise in every epoch, at the least-squares start
// and in training, and a re-scored test set scores the same): a dataset of clustered noise paired
// with the images by their labels. sigma is 1: the clusters are as wide as their centers are
// spread, and at a feature map's size (thousands of numbers; tens at a narrow model's head point)
// still linearly separable, which is the case Smith et al. make: a sender with nothing of the
// images but their labels.
//
// The draws come from data/rng.ts's Mulberry32, one stream per image: every stream is a stretch
// of one cycle of 2^32, so over a large split two images' stretches can overlap (shifted, rarely
// aligned). That leaves a faint correlation between some images' noise, which a null does not
// need to be free of; the draws are made in JavaScript on every step (the frozen path makes them
// once), cheap at the demo's sizes and a cost at ImageNet's.
//
// Its invariance-aware score: the method trains T on the front's IRIs, inputs whose features equal
// a source image's. The sender's features do not depend on the image at all (image i sends its
// label's code whatever its pixels), so every input is an exact IRI of image i, residual 0 at the
// start: its IRIs are their starts (stitch/iris.ts labelsOnlyIriBatch). T then learns to map the
// label's code to B's output on those starts (noise, or another image), and B's answer on them
// says nothing of the label. So a stitch that reads the label alone keeps its standard score
// (what a stitch reaches from the labels alone, a ceiling of label information, not chance) and
// should lose its invariance-aware one: the reading tests both (findings/chance.ts, "the label
// alone").
import { Rng } from "../data/rng.js";
import * as torch from "../torch/index.js";

type Tensor = torch.Tensor;

/** Which images a batch holds: their labels, positions in their dataset, and that dataset's split. */
export interface ImageIds {
  y: Tensor;
  indices: Int32Array;
  split: "train" | "test";
}

const SPLIT_STREAM = { train: 0x7a11, test: 0x7e57 } as const;

/** Standard normal draws (Box-Muller), n of them, into out at offset. */
function normals(rng: Rng, out: Float32Array, offset: number, n: number): void {
  for (let k = 0; k < n; k += 2) {
    // 1 - u keeps the logarithm's argument in (0, 1].
    const r = Math.sqrt(-2 * Math.log(1 - rng.random()));
    const t = 2 * Math.PI * rng.random();
    out[offset + k] = r * Math.cos(t);
    if (k + 1 < n) out[offset + k + 1] = r * Math.sin(t);
  }
}

export class NoiseClusters {
  readonly sigma = 1;
  /** [classes, ...shape]: one center per class. */
  readonly #centers: Tensor;
  readonly #size: number;

  /** shape: one image's features at the point ([C, H, W], [tokens, dim] or [D]). */
  constructor(
    readonly shape: number[],
    readonly classes: number,
    readonly seed: number,
    readonly device: torch.Device = "cpu",
  ) {
    this.#size = shape.reduce((a, b) => a * b, 1);
    const centers = new Float32Array(classes * this.#size);
    normals(new Rng(seed, 0xc1a55), centers, 0, centers.length);
    this.#centers = torch.keep(torch.tensor(centers, { shape: [classes, ...shape], device }));
  }

  /** What the sender sends for these images: their class's center plus their own noise. */
  sample(ids: ImageIds): Tensor {
    const n = ids.indices.length;
    const eps = new Float32Array(n * this.#size);
    for (let k = 0; k < n; k++)
      normals(new Rng(this.seed, SPLIT_STREAM[ids.split], ids.indices[k] as number), eps, k * this.#size, this.#size);
    return torch.tidy(() => {
      const noise = torch.tensor(eps, { shape: [n, ...this.shape], device: this.device });
      return this.#centers.indexSelect(0, ids.y.to(this.device)).add(noise.mul(this.sigma));
    });
  }

  dispose(): void {
    this.#centers.dispose();
  }
}
