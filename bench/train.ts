// The training benchmark: real training steps of the zoo's ResNet-18 (CIFAR stem, full width)
// WITH the data pipeline, as train/trainer.ts runs them, timed here and, with the same protocol
// and thread count, in Python PyTorch (bench/train_torch.py): torch.nn, torch.optim.SGD and the
// augmentation done with torch ops. The ratio shows what stitchlab's whole training stack
// (loader, transforms, nn modules, optimiser, the layer over libtorch) costs against plain
// PyTorch, where the engine benchmark times the bare engine only.
//
//   npm run bench -- train [--quick]
//
// Each step draws its batch through data/loader.ts's batches() (shuffle, random crop with
// padding 4 + horizontal flip, CIFAR-10 normalisation) from synthetic CIFAR-sized uint8 images
// held in memory, then runs a train-mode forward, cross-entropy, backward, SGD (lr 0.1, momentum
// 0.9, Nesterov, weight decay 1e-4) step and zeroGrad, reading the loss and the number correct
// back as the trainer does. The batch draw is inside the timed step on both sides.
//
// 3 warm-up + 20 timed steps of batch 128, the two sides alternating step by step; --quick (or
// STITCHLAB_BENCH_QUICK=1) runs batch 16, 1 warm-up + 2 timed steps, as a smoke test, and writes
// bench/results/train-quick.json so that it never overwrites the real figures.
//
// `--demo-model` times the demo's model instead: width 1/8, batch 64, 3 warm-up + 40 timed
// steps, written to bench/results/train-demo-model.json. Run it as the demo's workers run,
// on one thread: STITCHLAB_THREADS=1 npm run bench -- train --demo-model.
//
// Both sides run the convolutions' memory layout stitchlab uses at this thread count
// (torch/layout.ts: channels-last on one thread, else contiguous), PyTorch by
// `.to(memory_format=torch.channels_last)` on the model and the batch; the result records it.
// `--layout contiguous|channels-last` runs both sides in that layout instead, and writes
// bench/results/NAME-LAYOUT.json beside the default figures.
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { CIFAR10_NORMALIZATION } from "../data/transforms.js";
import { createModel } from "../models/registry.js";
import { SGD } from "../nn/optim.js";
import * as torch from "../torch/index.js";
import { PyTorchPeer } from "./pytorch_peer.js";
import { endlessBatches, syntheticCifar } from "./synthetic.js";
import { alternate, logTimings, median, type Protocol, printComparison, round, writeResult } from "./timing.js";

const here = dirname(fileURLToPath(import.meta.url));

/** Base training's hyper-parameters (docs/method.md, "Base models"; train/trainer.ts's TRAIN_DEFAULTS). */
export const HYPER = { lr: 0.1, momentum: 0.9, nesterov: true, weightDecay: 1e-4 } as const;

interface Options {
  quick: boolean;
  /** Both sides' layout, when --layout forces one; else stitchlab's own at this thread count. */
  layout: torch.ConvLayout | null;
  batch: number;
  protocol: Protocol;
  /** The ResNet-18's width multiplier (1, or the demo's 1/8 with --demo-model). */
  width: number;
  /** Where the result goes: bench/results/NAME.json. */
  name: string;
}

function parseOptions(args: string[]): Options {
  let quick = process.env.STITCHLAB_BENCH_QUICK === "1";
  let demoModel = false;
  let layout: torch.ConvLayout | null = null;
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === "--quick") quick = true;
    else if (a === "--demo-model") demoModel = true;
    else if (a === "--layout") {
      const v = args[++i];
      if (v !== "contiguous" && v !== "channels-last")
        throw new Error(`train: --layout takes contiguous or channels-last, not '${v ?? ""}'`);
      layout = v;
    } else throw new Error(`train: unknown option '${a}'; options: --quick, --demo-model, --layout L`);
  }
  const base = demoModel
    ? quick
      ? { quick, batch: 16, protocol: { warmup: 1, iters: 2 }, width: 0.125, name: "train-demo-model" }
      : { quick, batch: 64, protocol: { warmup: 3, iters: 40 }, width: 0.125, name: "train-demo-model" }
    : quick
      ? { quick, batch: 16, protocol: { warmup: 1, iters: 2 }, width: 1, name: "train" }
      : { quick, batch: 128, protocol: { warmup: 3, iters: 20 }, width: 1, name: "train" };
  return { ...base, layout, name: layout ? `${base.name}-${layout}` : base.name };
}

/** The model, optimiser and in-memory data, and one training step that draws its own batch. */
function buildTrainer(batch: number, steps: number, width: number): { step(): void; dispose(): void } {
  torch.manualSeed(0);
  // Exactly one epoch's worth of full batches, so every step has a batch of the same size.
  const data = syntheticCifar(batch, steps);
  const model = createModel("resnet18", { width });
  model.train();
  const opt = new SGD(model.parameters(), { ...HYPER });
  const next = endlessBatches(data, {
    batchSize: batch,
    shuffle: true,
    seed: 0,
    augment: { padding: 4, flip: true },
    normalization: CIFAR10_NORMALIZATION,
  });

  const step = () => {
    const b = next();
    // As train/trainer.ts's inner loop (without its adversarial branch and progress report).
    torch.tidy(() => {
      const logits = model.forward(b.x);
      const loss = torch.crossEntropy(logits, b.y);
      const value = loss.item();
      if (!Number.isFinite(value)) throw new Error(`train: loss is ${value}`);
      loss.backward();
      opt.step();
      opt.zeroGrad();
      torch.noGrad(() => logits.argmax(1).eq(b.y).sum().item());
    });
    torch.dispose(b);
  };
  return {
    step,
    dispose: () => {
      opt.dispose();
      model.dispose();
      torch.dispose([data.images, data.labels]);
    },
  };
}

export interface TrainResult {
  ms: number;
  ms_pytorch: number;
  ratio: number;
  images_per_second: number;
  images_per_second_pytorch: number;
  threads: number;
  /** The convolutions' memory layout, the same on both sides. */
  layout: torch.ConvLayout;
  libtorch: string;
  steps: number;
  batch: number;
  width: number;
}

export async function main(args: string[]): Promise<void> {
  const o = parseOptions(args);
  const { warmup, iters } = o.protocol;
  const threads = torch.getNumThreads();
  const libtorch = torch.buildInfo().torch;
  if (o.layout) torch.setConvLayout(o.layout);
  const layout = torch.convLayout("cpu");
  console.error(
    `train: width ${o.width}, batch ${o.batch}, ${warmup} warm-up + ${iters} timed steps, ${threads} threads, ${layout}`,
  );

  const trainer = buildTrainer(o.batch, warmup + iters, o.width);
  const { peer, hello } = await PyTorchPeer.start(join(here, "train_torch.py"), [
    `--batch=${o.batch}`,
    `--steps=${warmup + iters}`,
    `--threads=${threads}`,
    `--width=${o.width}`,
    ...(layout === "channels-last" ? ["--channels-last"] : []),
  ]);
  const { torch: pytorch, threads: pyThreads } = hello as { torch: string; threads: number };
  let t: { ours: number[]; theirs: number[] };
  try {
    if (pyThreads !== threads) throw new Error(`train: PyTorch runs ${pyThreads} threads, not ${threads}`);
    t = await alternate(o.protocol, trainer.step, peer);
  } finally {
    await peer.close();
    trainer.dispose();
  }
  logTimings("train", t);

  const ms = median(t.ours);
  const msPy = median(t.theirs);
  const result: TrainResult = {
    ms: round(ms, 2),
    ms_pytorch: round(msPy, 2),
    ratio: round(ms / msPy, 4),
    images_per_second: round((o.batch * 1000) / ms, 2),
    images_per_second_pytorch: round((o.batch * 1000) / msPy, 2),
    threads,
    layout,
    libtorch,
    steps: iters,
    batch: o.batch,
    width: o.width,
  };
  printComparison(
    `ResNet-18${o.width === 1 ? "" : ` at width ${o.width}`} training with the data pipeline, batch ${result.batch}, ${layout}, median of ${result.steps} steps`,
    result,
    pytorch,
    { name: "images/s", ours: result.images_per_second, theirs: result.images_per_second_pytorch },
  );
  writeResult(o.name, o.quick, result);
}
