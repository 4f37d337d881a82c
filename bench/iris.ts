// The IRI benchmark: IRI generation steps (stitch/iris.ts, docs/method.md "IRI generation") for
// the zoo's ResNet-18 (CIFAR stem, full width) as the front model, at its middle stitch point,
// timed here and, with the same protocol and thread count, in Python PyTorch
// (bench/stitch_torch.py --workload=iris): the same algorithm written with plain torch.
//
//   npm run bench -- iris [--quick] [--device cpu|cuda|cuda:N] [--batch N] [--steps N]
//
// What is timed is the library itself: one generateIriBatch call per iteration, on a fixed
// batch of synthetic CIFAR-sized uint8 images with CIFAR-10 normalisation and IRI_DEFAULTS
// (uniform start, signed steps of 1/255, no ball, the last iterate) but only STEPS steps. A
// call is: A's target features once; per step a forward to the point from the pixel-space
// iterate, the relative Frobenius residual read back, backward to the input, the signed step
// and the clamp; then the 8-bit quantisation and one more forward for the residuals. The model
// is frozen and in eval mode (generateIriBatch does that itself). The figure is ms per step:
// the call's time / STEPS, so the per-call extras are spread over the steps on both sides.
//
// 2 warm-up + 8 timed calls of 5 steps each at batch 128 (about 4 minutes on 2 cores), the two
// sides alternating call by call; --quick (or STITCHLAB_BENCH_QUICK=1) runs batch 16, 2 steps
// per call, 1 warm-up + 2 timed calls, as a smoke test, and writes bench/results/iris-quick.json
// so that it never overwrites the real figures. --batch N (or --batch=N) changes the batch size.
//
// --device cuda (or cuda:N) runs both sides on that GPU: the model and the batch are built on the
// CPU from the same seeds as a CPU run, then moved there, and every call (warm-up too) ends with a
// device synchronisation on both sides before the clock stops. It writes
// bench/results/iris-cuda.json (iris-cuda-quick.json), never the CPU figures, and records the
// device and the GPU's name (as PyTorch reports it). Where this libtorch cannot use the GPU (a
// CPU build, or no GPU visible) it stops at once, before the Python side starts.
//
// --steps N sets the steps per call (5; 2 with --quick). With STITCHLAB_CUDA_GRAPHS=1 on a GPU
// whose build has CUDA graphs (docs/gpu.md), our side records each call's step as a graph after
// two warm-up steps and replays it (PyTorch's side stays eager), and the figures go to
// bench/results/iris-graphs-cuda.json; use a realistic --steps (the default IRI set takes 200)
// so that the capture is paid for as it is in a real run. The result records cuda_graphs.
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { CIFAR10_NORMALIZATION } from "../data/transforms.js";
import { createModel } from "../models/registry.js";
import { IRI_DEFAULTS } from "../stitch/iri-options.js";
import { generateIriBatch } from "../stitch/iris.js";
import * as torch from "../torch/index.js";
import { deviceLabel, parseDeviceOptions, positiveInt, requireBenchDevice } from "./options.js";
import { PyTorchPeer } from "./pytorch_peer.js";
import {
  alternate,
  deviceSync,
  logTimings,
  median,
  type Protocol,
  printComparison,
  round,
  writeResult,
} from "./timing.js";

const here = dirname(fileURLToPath(import.meta.url));

/** The model's middle stitch point (index 4 of stem, layer1.0, ..., layer4.1). */
export const POINT = "layer2.1";

interface Options {
  quick: boolean;
  device: torch.Device;
  batch: number;
  /** Signed steps per generateIriBatch call. */
  steps: number;
  protocol: Protocol;
}

function parseOptions(args: string[]): Options {
  let steps: number | undefined;
  const { quick, device, batch } = parseDeviceOptions("iris", args, {
    steps: {
      arg: "N",
      set: (v) => {
        steps = positiveInt("iris", "--steps", v);
      },
    },
  });
  return quick
    ? { quick, device, batch: batch ?? 16, steps: steps ?? 2, protocol: { warmup: 1, iters: 2 } }
    : { quick, device, batch: batch ?? 128, steps: steps ?? 5, protocol: { warmup: 2, iters: 8 } };
}

/** The front model and a fixed uint8 batch on `device`, and one generateIriBatch call of `steps` steps. */
function buildGenerator(batch: number, steps: number, device: torch.Device): { call(): void; dispose(): void } {
  torch.manualSeed(0);
  // Built on the CPU (the seeded draws of a CPU run), then moved.
  const cpu = torch.randint(0, 256, [batch, 3, 32, 32], { dtype: "uint8" });
  const x = cpu.to(device);
  cpu.dispose();
  const model = createModel("resnet18", { numClasses: 10 });
  model.to(device);
  const opts = { ...IRI_DEFAULTS, steps, batchSize: batch };
  let seed = 0;
  const call = () => {
    const r = generateIriBatch(model, POINT, x, CIFAR10_NORMALIZATION, opts, seed++);
    if (!Number.isFinite(r.batchResidual)) throw new Error(`iris: residual is ${r.batchResidual}`);
    r.images.dispose();
  };
  return {
    call,
    dispose: () => {
      model.dispose();
      x.dispose();
    },
  };
}

export interface IrisResult {
  /** Per signed step: the call's median time / steps_per_call. */
  ms: number;
  ms_pytorch: number;
  ratio: number;
  ms_per_call: number;
  ms_per_call_pytorch: number;
  steps_per_call: number;
  calls: number;
  batch: number;
  model: string;
  point: string;
  device: torch.Device;
  /** The GPU's name as PyTorch reports it (torch.cuda.get_device_name), on a GPU only. */
  gpu?: string;
  /** Our side ran each call's steps as a CUDA graph (STITCHLAB_CUDA_GRAPHS=1 on a GPU build with them). */
  cuda_graphs: boolean;
  threads: number;
  libtorch: string;
  torch: string;
}

export async function main(args: string[]): Promise<void> {
  const o = parseOptions(args);
  requireBenchDevice("iris", o.device);
  const sync = deviceSync(o.device);
  const graphs = torch.graphsRequested() && torch.graphsUnavailable(o.device) === null;
  const { warmup, iters } = o.protocol;
  const threads = torch.getNumThreads();
  const libtorch = torch.buildInfo().torch;
  console.error(
    `iris: ${o.device}, batch ${o.batch}, ${warmup} warm-up + ${iters} timed calls of ${o.steps} steps, ${threads} threads${graphs ? ", CUDA graphs" : ""}`,
  );

  const generator = buildGenerator(o.batch, o.steps, o.device);
  const { peer, hello } = await PyTorchPeer.start(join(here, "stitch_torch.py"), [
    "--workload=iris",
    `--batch=${o.batch}`,
    `--point=${POINT}`,
    `--steps=${o.steps}`,
    `--threads=${threads}`,
    `--device=${o.device}`,
  ]);
  const { torch: pytorch, threads: pyThreads, gpu } = hello as { torch: string; threads: number; gpu?: string };
  let t: { ours: number[]; theirs: number[] };
  try {
    if (pyThreads !== threads) throw new Error(`iris: PyTorch runs ${pyThreads} threads, not ${threads}`);
    t = await alternate(o.protocol, generator.call, peer, sync);
  } finally {
    await peer.close();
    generator.dispose();
  }
  logTimings("iris", t, "ms per call");

  const call = median(t.ours);
  const callPy = median(t.theirs);
  const result: IrisResult = {
    ms: round(call / o.steps, 2),
    ms_pytorch: round(callPy / o.steps, 2),
    ratio: round(call / callPy, 4),
    ms_per_call: round(call, 2),
    ms_per_call_pytorch: round(callPy, 2),
    steps_per_call: o.steps,
    calls: iters,
    batch: o.batch,
    model: "resnet18",
    point: POINT,
    device: o.device,
    ...(torch.isCuda(o.device) ? { gpu: gpu ?? "unknown" } : {}),
    cuda_graphs: graphs,
    threads,
    libtorch,
    torch: pytorch,
  };
  printComparison(
    `IRI generation on ${deviceLabel(o.device, gpu)}, ResNet-18 to ${result.point}, batch ${result.batch}, median of ${result.calls} calls of ${result.steps_per_call} steps`,
    result,
    pytorch,
    { name: "ms/call", ours: result.ms_per_call, theirs: result.ms_per_call_pytorch },
  );
  writeResult(graphs ? "iris-graphs" : "iris", o.quick, result, o.device);
}
