// What the training-style benchmarks share: synthetic CIFAR-sized data held in memory, an
// endless supply of batches drawn through the real loader, and the --quick switch.
import type { Dataset } from "../data/dataset.js";
import { type Batch, batches, type LoaderOptions } from "../data/loader.js";
import * as torch from "../torch/index.js";

/** Seeded uint8 [batch * steps, 3, 32, 32] images and labels: every step gets a full batch. */
export function syntheticCifar(batch: number, steps: number): Dataset {
  const n = batch * steps;
  return {
    images: torch.randint(0, 256, [n, 3, 32, 32], { dtype: "uint8" }),
    labels: torch.randint(0, 10, [n]),
    classes: Array.from({ length: 10 }, (_, i) => `class${i}`),
    name: "synthetic-cifar",
  };
}

/** The next batch on each call, starting a new (reshuffled) epoch whenever one runs out. */
export function endlessBatches(data: Dataset, opts: Omit<LoaderOptions, "epoch">): () => Batch {
  let epoch = 0;
  let it = batches(data, { ...opts, epoch: epoch++ });
  return () => {
    let r = it.next();
    if (r.done) {
      it = batches(data, { ...opts, epoch: epoch++ });
      r = it.next();
    }
    return r.value as Batch;
  };
}

/** True for --quick (or STITCHLAB_BENCH_QUICK=1); any other argument is an error naming the benchmark. */
export function isQuick(name: string, args: string[]): boolean {
  let quick = process.env.STITCHLAB_BENCH_QUICK === "1";
  for (const a of args) {
    if (a === "--quick") quick = true;
    else throw new Error(`${name}: unknown option '${a}'; options: --quick`);
  }
  return quick;
}
