// The engine benchmark: ResNet-18 and ViT-Tiny workloads on 32x32 images, timed here and, with
// the same protocol and thread count, in Python PyTorch (bench/engine_torch.py), so that the
// ratio shows what this library's layer over libtorch costs.
//
//   npm run bench -- engine [--quick] [--device cpu|cuda|cuda:N] [--batch N]
//                           [--workloads a,b] [--iters N]
//
// --quick (or STITCHLAB_BENCH_QUICK=1) runs batch 8 with one timed iteration, as a smoke test,
// and writes bench/results/engine-quick.json so that it never overwrites the real figures; a
// run of some workloads only (--workloads) prints its table and writes nothing. --iters N
// changes the number of timed iterations (5), for a closer look at one workload; --batch N the
// batch size (128; 8 with --quick). Value options also take the form --name=value.
//
// --device cuda (or cuda:N) runs both sides on that GPU: models and inputs are built on the CPU
// from the same seeds as a CPU run, then moved there, and every timed iteration (warm-up too)
// ends with a device synchronisation on both sides before the clock stops. It writes
// bench/results/engine-cuda.json (engine-cuda-quick.json), never the CPU figures, and records
// the device and the GPU's name (as PyTorch reports it). Where this libtorch cannot use the GPU
// (a CPU build, or no GPU visible) it stops at once, before the Python side starts.
//
// The Python process inherits this one's environment, so settings read from it (threads via
// STITCHLAB_THREADS, OMP_WAIT_POLICY, OPENBLAS_NUM_THREADS, CUDA_VISIBLE_DEVICES) apply to both
// sides alike.
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as torch from "../torch/index.js";
import * as resnet from "./models/resnet18.js";
import * as vit from "./models/vit_tiny.js";
import { deviceLabel, parseDeviceOptions, positiveInt, requireBenchDevice } from "./options.js";
import { PyTorchPeer } from "./pytorch_peer.js";
import { SGD } from "./sgd.js";
import { deviceSync, median, type Protocol, round, timeOnce, writeResult } from "./timing.js";

export const WORKLOADS = ["forward", "backward_input", "train_step", "vit_backward_input"] as const;
export type WorkloadName = (typeof WORKLOADS)[number];

const here = dirname(fileURLToPath(import.meta.url));

interface Options {
  quick: boolean;
  device: torch.Device;
  batch: number;
  protocol: Protocol;
  workloads: WorkloadName[];
}

function parseOptions(args: string[]): Options {
  let workloads: WorkloadName[] = [...WORKLOADS];
  let iters: number | undefined;
  const o = parseDeviceOptions("engine", args, {
    workloads: {
      arg: "a,b",
      set: (v) => {
        const names = v.split(",");
        for (const n of names)
          if (!(WORKLOADS as readonly string[]).includes(n))
            throw new Error(`engine: unknown workload '${n}'; known: ${WORKLOADS.join(", ")}`);
        workloads = names as WorkloadName[];
      },
    },
    iters: {
      arg: "N",
      set: (v) => {
        iters = positiveInt("engine", "--iters", v);
      },
    },
  });
  return {
    quick: o.quick,
    device: o.device,
    batch: o.batch ?? (o.quick ? 8 : 128),
    protocol: { warmup: 2, iters: iters ?? (o.quick ? 1 : 5) },
    workloads,
  };
}

/**
 * Moves every tensor of a model (plain objects and arrays of tensors) or an input to `device`,
 * in place, disposing the CPU originals; the weights are those a CPU run has, whatever the device.
 */
function toDevice<T>(value: T, device: torch.Device): T {
  if (!torch.isCuda(device) || value === null || typeof value !== "object") return value;
  if (value instanceof torch.Tensor) {
    const moved = value.to(device);
    value.dispose();
    return moved as T;
  }
  const record = value as Record<string, unknown>;
  for (const k of Object.keys(record)) record[k] = toDevice(record[k], device);
  return value;
}

interface Workload {
  /** Puts the models in the state this workload needs (which weights require grad). */
  setup(): void;
  /** One timed iteration; frees everything it creates. */
  step(): void;
}

/** The models, data and optimiser shared by the workloads, built once, on `device`. */
function buildWorkloads(
  batch: number,
  device: torch.Device,
): { workloads: Record<WorkloadName, Workload>; dispose(): void } {
  torch.manualSeed(0);
  // Built on the CPU in this order (the seeded draws of a CPU run), then moved.
  const net = toDevice(resnet.resnet18(), device);
  const vt = toDevice(vit.vitTiny(), device);
  const x = toDevice(torch.randn([batch, 3, 32, 32]), device);
  const y = toDevice(torch.randint(0, 10, [batch]), device);
  const weights = resnet.parameters(net);
  const xGrad = x.detach().requiresGrad_(); // the input that backward_input differentiates to
  const sgd = new SGD(weights, { lr: 0.01, momentum: 0.9, weightDecay: 5e-4, nesterov: true });
  const trainable = (flag: boolean) => {
    for (const p of weights) p.requiresGrad_(flag);
  };

  const workloads: Record<WorkloadName, Workload> = {
    forward: {
      setup: () => trainable(false),
      step: () => torch.tidy(() => void torch.noGrad(() => resnet.forward(net, x, false))),
    },
    backward_input: {
      setup: () => trainable(false),
      step: () => torch.tidy(() => void torch.grad(torch.crossEntropy(resnet.forward(net, xGrad, false), y), xGrad)),
    },
    train_step: {
      setup: () => trainable(true),
      step: () =>
        torch.tidy(() => {
          sgd.zeroGrad();
          torch.crossEntropy(resnet.forward(net, x, true), y).backward();
          sgd.step();
        }),
    },
    vit_backward_input: {
      setup: () => {},
      step: () => torch.tidy(() => void torch.grad(torch.crossEntropy(vit.forward(vt, xGrad), y), xGrad)),
    },
  };
  return {
    workloads,
    dispose: () => {
      sgd.dispose();
      torch.dispose([net, vt, x, y, xGrad]);
    },
  };
}

interface Row {
  name: WorkloadName;
  ms: number;
  ms_pytorch: number;
  ratio: number;
}

function printTable(rows: Row[], title: string, threads: number, libtorch: string, pytorch: string): void {
  const cols = ["workload", "ms TS", "ms PyTorch", "ratio"];
  const cells = rows.map((r) => [r.name, r.ms.toFixed(1), r.ms_pytorch.toFixed(1), r.ratio.toFixed(3)]);
  const width = cols.map((c, i) => Math.max(c.length, ...cells.map((row) => row[i].length)));
  const line = (row: string[]) => row.map((c, i) => (i === 0 ? c.padEnd(width[i]) : c.padStart(width[i]))).join("  ");
  const policy = process.env.OMP_WAIT_POLICY || "default";
  console.log(`\n${title}; libtorch ${libtorch} (PyTorch ${pytorch}), ${threads} threads, OMP_WAIT_POLICY ${policy}`);
  console.log(line(cols));
  for (const row of cells) console.log(line(row));
}

export async function main(args: string[]): Promise<void> {
  const o = parseOptions(args);
  requireBenchDevice("engine", o.device);
  const sync = deviceSync(o.device);
  const threads = torch.getNumThreads();
  const libtorch = torch.buildInfo().torch;
  console.error(
    `engine: ${o.device}, batch ${o.batch}, ${o.protocol.warmup} warm-up + ${o.protocol.iters} timed iterations, ${threads} threads`,
  );

  const { workloads, dispose } = buildWorkloads(o.batch, o.device);
  const { peer, hello } = await PyTorchPeer.start(join(here, "engine_torch.py"), [
    "--serve",
    `--batch=${o.batch}`,
    `--threads=${threads}`,
    `--device=${o.device}`,
  ]);
  const { torch: pytorch, threads: pyThreads, gpu } = hello as { torch: string; threads: number; gpu?: string };
  const rows: Row[] = [];
  try {
    if (pyThreads !== threads) throw new Error(`engine: PyTorch runs ${pyThreads} threads, not ${threads}`);
    for (const name of o.workloads) {
      const w = workloads[name];
      w.setup();
      await peer.request({ op: "setup", name });
      // Alternate the two sides iteration by iteration: the machine may be shared, and a
      // change of load then falls on both columns alike rather than on one.
      const ours: number[] = [];
      const theirs: number[] = [];
      for (let i = 0; i < o.protocol.warmup + o.protocol.iters; i++) {
        const ms = timeOnce(w.step, sync);
        const py = ((await peer.request({ op: "step", name })) as { ms: number }).ms;
        if (i >= o.protocol.warmup) {
          ours.push(ms);
          theirs.push(py);
        }
      }
      const row = { name, ms: median(ours), ms_pytorch: median(theirs), ratio: median(ours) / median(theirs) };
      rows.push(row);
      const list = (xs: number[]) => xs.map((x) => x.toFixed(0)).join(" ");
      console.error(`engine: ${name}: ${list(ours)} ms here; ${list(theirs)} ms in PyTorch`);
    }
  } finally {
    await peer.close();
    dispose();
  }

  printTable(rows, `engine on ${deviceLabel(o.device, gpu)}, batch ${o.batch}`, threads, libtorch, pytorch);
  const result = {
    workloads: rows.map((r) => ({
      name: r.name,
      ms: round(r.ms, 2),
      ms_pytorch: round(r.ms_pytorch, 2),
      ratio: round(r.ratio, 4),
    })),
    device: o.device,
    ...(torch.isCuda(o.device) ? { gpu: gpu ?? "unknown" } : {}),
    batch: o.batch,
    threads,
    libtorch,
  };
  if (o.workloads.length < WORKLOADS.length) return;
  writeResult("engine", o.quick, result, o.device);
}
