// The stitching benchmark: training steps of the stitching layer T with FuLA between two of the
// zoo's ResNet-18s (CIFAR stem, full width; seeds 0 and 1) at their middle stitch point, as
// stitch/train.ts's trainStitch runs them, timed here and, with the same protocol and thread
// count, in Python PyTorch (bench/stitch_torch.py --workload=stitch): torch.nn modules, a 1x1
// Conv2d with bias as T and torch.optim.Adam.
//
//   npm run bench -- stitch [--quick] [--mode standard|iris]
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
//
// --mode iris times whole invariance-aware runs instead (stitch-iris.json): trainStitch with SLM
// and batch norm "eval" over stored images (synthetic, as IRIs are uint8 images), once with A's
// features and B's targets computed once per run (stitch/frozen.ts, the default), once with
// every step running A and B again (frozenOnce: false, the path before), and the same run in
// Python PyTorch as the reference loops it (stitch_torch.py --workload=stitch-iris). speedup is
// every-step / once; ratio is once / PyTorch. 256 images of batch 128, 8 epochs (16 steps, the
// precomputation included); 1 warm-up + 3 timed runs per side, the three alternating. --quick:
// batch 16, 32 images, 2 epochs, 1 + 1 runs.
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { CIFAR10_NORMALIZATION } from "../data/transforms.js";
import { createModel } from "../models/registry.js";
import { Adam } from "../nn/optim.js";
import { stitchSettingsSchema } from "../stitch/config.js";
import { fulaPoints, stitchLoss } from "../stitch/objectives.js";
import { StitchedModel } from "../stitch/stitched.js";
import { recipeOf, setFrozenBnMode, trainStitch } from "../stitch/train.js";
import * as torch from "../torch/index.js";
import { PyTorchPeer } from "./pytorch_peer.js";
import { endlessBatches, isQuick, syntheticCifar } from "./synthetic.js";
import {
  alternate,
  logTimings,
  median,
  type Protocol,
  printComparison,
  round,
  timeOnce,
  writeResult,
} from "./timing.js";

const here = dirname(fileURLToPath(import.meta.url));

/** The models' middle stitch point (index 4 of stem, layer1.0, ..., layer4.1). */
export const POINT = "layer2.1";

/** trainStitch's defaults (docs/method.md, "Training defaults"): Adam, lr 1e-3, weight decay 1e-4. */
export const HYPER = { lr: 1e-3, weightDecay: 1e-4 } as const;

interface Options {
  quick: boolean;
  batch: number;
  protocol: Protocol;
}

function parseOptions(args: string[]): Options & { mode: "standard" | "iris" } {
  let mode: "standard" | "iris" = "standard";
  const i = args.indexOf("--mode");
  if (i >= 0) {
    const v = args[i + 1];
    if (v !== "standard" && v !== "iris") throw new Error(`stitch: --mode takes standard or iris, got '${v ?? ""}'`);
    mode = v;
    args = [...args.slice(0, i), ...args.slice(i + 2)];
  }
  const quick = isQuick("stitch", args);
  if (mode === "iris")
    return quick
      ? { mode, quick, batch: 16, protocol: { warmup: 1, iters: 1 } }
      : { mode, quick, batch: 128, protocol: { warmup: 1, iters: 3 } };
  return quick
    ? { mode, quick, batch: 16, protocol: { warmup: 1, iters: 2 } }
    : { mode, quick, batch: 128, protocol: { warmup: 3, iters: 20 } };
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
  if (o.mode === "iris") return mainIris(o);
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

/** Batches of stored images per invariance-aware run, and its epochs (see the top of this file). */
const IRIS_RUN = { batches: 2, epochs: 8, quick: { batches: 2, epochs: 2 } } as const;

export interface StitchIrisResult {
  /** Median ms of one whole run, A's features and B's targets computed once (the default). */
  ms: number;
  /** The same run with A and B on every step (frozenOnce: false), as before. */
  ms_every_step: number;
  ms_pytorch: number;
  speedup: number;
  ratio: number;
  ratio_every_step: number;
  runs: number;
  images: number;
  epochs: number;
  batch: number;
  model: string;
  point: string;
  objective: string;
  bn_mode: string;
  threads: number;
  libtorch: string;
  torch: string;
}

async function mainIris(o: Options): Promise<void> {
  const { warmup, iters } = o.protocol;
  const shape = o.quick ? IRIS_RUN.quick : IRIS_RUN;
  const threads = torch.getNumThreads();
  const libtorch = torch.buildInfo().torch;
  console.error(
    `stitch --mode iris: ${o.batch * shape.batches} images, batch ${o.batch}, ${shape.epochs} epochs per run, ${warmup} warm-up + ${iters} timed runs per side, ${threads} threads`,
  );
  torch.manualSeed(0);
  const data = syntheticCifar(o.batch, shape.batches);
  torch.manualSeed(0);
  const front = createModel("resnet18", { numClasses: 10 });
  torch.manualSeed(1);
  const back = createModel("resnet18", { numClasses: 10 });
  const run = (frozenOnce: boolean) => () => {
    torch.manualSeed(2);
    const s = new StitchedModel(front, back, POINT);
    try {
      const r = trainStitch(s, data, data, {
        objective: { slm: 1 },
        normalization: CIFAR10_NORMALIZATION,
        epochs: shape.epochs,
        batchSize: o.batch,
        // The stitching schema's recipe (Adam's betas and epsilon, the lr's drops), HYPER's lr and weight decay.
        ...recipeOf(stitchSettingsSchema.parse({})),
        ...HYPER,
        seed: 0,
        bnMode: "eval",
        init: "random",
        initImages: 0, // a random start draws no images
        augment: null,
        markers: null,
        initMarkers: null,
        device: "cpu",
        adversarial: null,
        frozenOnce,
      });
      if (r.frozen !== (frozenOnce ? "memory" : null)) throw new Error(`stitch: frozen rows kept in ${r.frozen}`);
    } finally {
      s.layer.dispose();
    }
  };
  const once = run(true);
  const every = run(false);
  const { peer, hello } = await PyTorchPeer.start(join(here, "stitch_torch.py"), [
    "--workload=stitch-iris",
    `--batch=${o.batch}`,
    `--point=${POINT}`,
    `--batches=${shape.batches}`,
    `--epochs=${shape.epochs}`,
    `--threads=${threads}`,
  ]);
  const { torch: pytorch, threads: pyThreads } = hello as { torch: string; threads: number };
  const t = { once: [] as number[], every: [] as number[], theirs: [] as number[] };
  try {
    if (pyThreads !== threads) throw new Error(`stitch: PyTorch runs ${pyThreads} threads, not ${threads}`);
    // Three sides, alternating run by run, so that all three see the same machine load.
    for (let i = 0; i < warmup + iters; i++) {
      const a = await alternate({ warmup: 0, iters: 1 }, once, peer);
      const b = timeOnce(every);
      if (i < warmup) continue;
      t.once.push(...a.ours);
      t.theirs.push(...a.theirs);
      t.every.push(b);
    }
  } finally {
    await peer.close();
    front.dispose();
    back.dispose();
    torch.dispose([data.images, data.labels]);
  }
  logTimings("stitch --mode iris (computed once)", { ours: t.once, theirs: t.theirs });
  console.error(`stitch --mode iris (every step): ${t.every.map((x) => x.toFixed(0)).join(" ")} ms`);
  const ms = median(t.once);
  const msEvery = median(t.every);
  const msPy = median(t.theirs);
  const result: StitchIrisResult = {
    ms: round(ms, 1),
    ms_every_step: round(msEvery, 1),
    ms_pytorch: round(msPy, 1),
    speedup: round(msEvery / ms, 3),
    ratio: round(ms / msPy, 4),
    ratio_every_step: round(msEvery / msPy, 4),
    runs: iters,
    images: o.batch * shape.batches,
    epochs: shape.epochs,
    batch: o.batch,
    model: "resnet18",
    point: POINT,
    objective: "slm",
    bn_mode: "eval",
    threads,
    libtorch,
    torch: pytorch,
  };
  console.log(
    [
      `Invariance-aware stitching runs (SLM, eval batch norm) between two ResNet-18s at ${POINT}: ${result.images} images, batch ${o.batch}, ${result.epochs} epochs, median of ${iters}`,
      `  computed once   ${result.ms} ms`,
      `  every step      ${result.ms_every_step} ms   speedup ${result.speedup}`,
      `  PyTorch (ref.)  ${result.ms_pytorch} ms   ratio ${result.ratio} (every step: ${result.ratio_every_step})`,
    ].join("\n"),
  );
  writeResult("stitch-iris", o.quick, result);
}
