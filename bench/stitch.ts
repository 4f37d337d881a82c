// The stitching benchmark: training steps of the stitching layer T with FuLA between two of the
// zoo's ResNet-18s (CIFAR stem, full width; seeds 0 and 1) at their middle stitch point, as
// stitch/train.ts's trainStitch runs them, timed here and, with the same protocol and thread
// count, in Python PyTorch (bench/stitch_torch.py --workload=stitch): torch.nn modules, a 1x1
// Conv2d with bias as T and torch.optim.Adam.
//
//   npm run bench -- stitch [--quick]
//
// Each step draws its batch through data/loader.ts's batches() (shuffle, CIFAR-10
// normalisation, no augmentation, as trainStitch does) from synthetic CIFAR-sized uint8 images
// held in memory, then runs trainStitch's loop body: stitchLoss(s, x, y, {fula: 1}) (B's own
// features at every point from the stitch point on without gradients, A to the point without
// gradients, T, B's tail from T's output with its features at the same points, the mean relative
// Frobenius distance), .item(), backward, an Adam step (lr 1e-3, weight decay 1e-4) and
// zeroGrad. A and B are frozen with setFrozenBnMode(model, "batch"): train-mode batch norm on
// batch statistics, running statistics untouched (standard mode). The least-squares
// initialisation of T is not timed (T keeps its random initialisation).
//
// 3 warm-up + 20 timed steps of batch 128 (about 3 minutes on 2 cores), the two sides
// alternating step by step; --quick (or STITCHLAB_BENCH_QUICK=1) runs batch 16, 1 warm-up + 2
// timed steps, as a smoke test, and writes bench/results/stitch-quick.json so that it never
// overwrites the real figures.
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { CIFAR10_NORMALIZATION } from "../data/transforms.js";
import { createModel } from "../models/registry.js";
import { Adam } from "../nn/optim.js";
import { fulaPoints, stitchLoss } from "../stitch/objectives.js";
import { StitchedModel } from "../stitch/stitched.js";
import { setFrozenBnMode } from "../stitch/train.js";
import * as torch from "../torch/index.js";
import { PyTorchPeer } from "./pytorch_peer.js";
import { endlessBatches, isQuick, syntheticCifar } from "./synthetic.js";
import { alternate, logTimings, median, type Protocol, printComparison, round, writeResult } from "./timing.js";

const here = dirname(fileURLToPath(import.meta.url));

/** The models' middle stitch point (index 4 of stem, layer1.0, ..., layer4.1). */
export const POINT = "layer2.1";

/** trainStitch's defaults (PROTOCOL.md): Adam, lr 1e-3, weight decay 1e-4. */
export const HYPER = { lr: 1e-3, weightDecay: 1e-4 } as const;

interface Options {
  quick: boolean;
  batch: number;
  protocol: Protocol;
}

function parseOptions(args: string[]): Options {
  const quick = isQuick("stitch", args);
  return quick
    ? { quick, batch: 16, protocol: { warmup: 1, iters: 2 } }
    : { quick, batch: 128, protocol: { warmup: 3, iters: 20 } };
}

/** The stitched model, optimiser and in-memory data, and one training step that draws its own batch. */
function buildTrainer(batch: number, steps: number): { step(): void; fula: string[]; dispose(): void } {
  torch.manualSeed(0);
  // Exactly one epoch's worth of full batches, so every step has a batch of the same size.
  const data = syntheticCifar(batch, steps);
  torch.manualSeed(0);
  const front = createModel("resnet18", { numClasses: 10 });
  torch.manualSeed(1);
  const back = createModel("resnet18", { numClasses: 10 });
  torch.manualSeed(2);
  const s = new StitchedModel(front, back, POINT);
  setFrozenBnMode(front, "batch");
  setFrozenBnMode(back, "batch");
  const opt = new Adam(s.layer.parameters(), { ...HYPER });
  const next = endlessBatches(data, {
    batchSize: batch,
    shuffle: true,
    seed: 0,
    normalization: CIFAR10_NORMALIZATION,
  });

  const step = () => {
    const b = next();
    // As trainStitch's loop body (without its progress report).
    torch.tidy(() => {
      const loss = stitchLoss(s, b.x, b.y, { fula: 1 });
      const v = loss.item();
      if (!Number.isFinite(v)) throw new Error(`stitch: loss is ${v}`);
      loss.backward();
      opt.step();
      opt.zeroGrad();
    });
    torch.dispose(b);
  };
  return {
    step,
    fula: fulaPoints(s),
    dispose: () => {
      opt.dispose();
      s.layer.dispose();
      front.dispose();
      back.dispose();
      torch.dispose([data.images, data.labels]);
    },
  };
}

export interface StitchResult {
  ms: number;
  ms_pytorch: number;
  ratio: number;
  images_per_second: number;
  images_per_second_pytorch: number;
  steps: number;
  batch: number;
  model: string;
  point: string;
  objective: string;
  fula_points: string[];
  bn_mode: string;
  threads: number;
  libtorch: string;
  torch: string;
}

export async function main(args: string[]): Promise<void> {
  const o = parseOptions(args);
  const { warmup, iters } = o.protocol;
  const threads = torch.getNumThreads();
  const libtorch = torch.buildInfo().torch;
  console.error(`stitch: batch ${o.batch}, ${warmup} warm-up + ${iters} timed steps, ${threads} threads`);

  const trainer = buildTrainer(o.batch, warmup + iters);
  const { peer, hello } = await PyTorchPeer.start(join(here, "stitch_torch.py"), [
    "--workload=stitch",
    `--batch=${o.batch}`,
    `--point=${POINT}`,
    `--batches=${warmup + iters}`,
    `--threads=${threads}`,
  ]);
  const { torch: pytorch, threads: pyThreads, points } = hello as { torch: string; threads: number; points: string[] };
  let t: { ours: number[]; theirs: number[] };
  try {
    if (pyThreads !== threads) throw new Error(`stitch: PyTorch runs ${pyThreads} threads, not ${threads}`);
    if (points.join() !== trainer.fula.join())
      throw new Error(`stitch: PyTorch's FuLA points are ${points.join(", ")}, not ${trainer.fula.join(", ")}`);
    t = await alternate(o.protocol, trainer.step, peer);
  } finally {
    await peer.close();
    trainer.dispose();
  }
  logTimings("stitch", t);

  const ms = median(t.ours);
  const msPy = median(t.theirs);
  const result: StitchResult = {
    ms: round(ms, 2),
    ms_pytorch: round(msPy, 2),
    ratio: round(ms / msPy, 4),
    images_per_second: round((o.batch * 1000) / ms, 2),
    images_per_second_pytorch: round((o.batch * 1000) / msPy, 2),
    steps: iters,
    batch: o.batch,
    model: "resnet18",
    point: POINT,
    objective: "fula",
    fula_points: trainer.fula,
    bn_mode: "batch",
    threads,
    libtorch,
    torch: pytorch,
  };
  printComparison(
    `Stitching-layer training (FuLA) between two ResNet-18s at ${result.point}, batch ${result.batch}, median of ${result.steps} steps`,
    result,
    pytorch,
    { name: "images/s", ours: result.images_per_second, theirs: result.images_per_second_pytorch },
  );
  writeResult("stitch", o.quick, result);
}
