// ONNX models on stitchlab's interpreter against PyTorch running the same module (issue 39): one
// step of what an IRI descent does with a front, the forward pass and the gradient with respect to
// the input, eval mode, on the same batch, for torchvision's ResNet-18 (32 px) and the
// cross-architecture preset's ConvNeXt and ViT. PyTorch exports each model (bench/onnx_torch.py)
// and the two sides alternate step by step (bench/timing.ts alternate). Then the two figures issue
// 39 sets: the forward pass (eval, no gradient) against onnxruntime-node on the same file, batch
// and thread count; and a stitch training step (SLM, A and B frozen with batch-statistics batch
// norm, T's Adam step: trainStitch's loop body, as bench/stitch.ts times it) between two
// graph-run ResNet-18s against the same step between two of the zoo's ResNet-18s of the same
// layout (ImageNet stem, 10 classes) at layer2.1. Prints the ratios and writes
// bench/results/onnx.json.
//
// --device cuda runs both sides' models and batches on the GPU (each timed step ends with a
// synchronisation; both sides keep cuDNN's default TF32) and writes onnx-cuda.json. onnxruntime-node
// is a CPU build, so the comparison with it is a CPU figure only and is left out there.
//
//   npm run bench -- onnx [--quick] [--batch N] [--device cpu|cuda|cuda:N]   (default batch 64, one thread: a worker's)
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import type * as Ort from "onnxruntime-node";
import { OnnxModel } from "../models/onnx/model.js";
import { createModel } from "../models/registry.js";
import type { StitchableModel } from "../models/stitchable.js";
import { Adam } from "../nn/optim.js";
import { stitchLoss } from "../stitch/objectives.js";
import { StitchedModel } from "../stitch/stitched.js";
import { setFrozenBnMode } from "../stitch/train.js";
import * as torch from "../torch/index.js";
import { deviceLabel, parseDeviceOptions, requireBenchDevice } from "./options.js";
import { PyTorchPeer } from "./pytorch_peer.js";
import { alternate, deviceSync, logTimings, median, type Protocol, round, timeOnce, writeResult } from "./timing.js";

const here = dirname(fileURLToPath(import.meta.url));
const MODELS = ["resnet18", "convnext", "vit"] as const;

/** An in-process other side for alternate(): each request times one call of `run`. */
const localPeer = (run: () => Promise<void> | void) => ({
  async request(): Promise<{ ms: number }> {
    const t0 = performance.now();
    await run();
    return { ms: performance.now() - t0 };
  },
});

/** The forward pass (eval, no gradient) here and in onnxruntime, one thread each, alternating. */
async function forwardAgainstOrt(file: string, model: OnnxModel, x: torch.Tensor, protocol: Protocol) {
  const ort: typeof Ort = await import("onnxruntime-node");
  const session = await ort.InferenceSession.create(file, {
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
    executionMode: "sequential",
  });
  const feed = {
    [session.inputNames[0] as string]: new ort.Tensor("float32", x.toTypedArray() as Float32Array, x.shape),
  };
  try {
    const step = () => torch.tidy(() => void torch.noGrad(() => model.forward(x)));
    return await alternate(
      protocol,
      step,
      localPeer(async () => void (await session.run(feed))),
    );
  } finally {
    await session.release();
  }
}

/** One stitch training step between two copies of `make()` at layer2.1 (bench/stitch.ts's loop body, SLM), on `device`. */
function stitchStep(
  make: () => StitchableModel,
  batch: number,
  device: torch.Device,
): { step(): void; dispose(): void } {
  torch.manualSeed(0);
  const front = make().to(device);
  const back = make().to(device);
  const s = new StitchedModel(front, back, "layer2.1");
  s.layer.to(device);
  setFrozenBnMode(front, "batch");
  setFrozenBnMode(back, "batch");
  const opt = new Adam(s.layer.parameters(), { lr: 1e-3, weightDecay: 1e-4 });
  const x = torch.keep(torch.rand([batch, 3, 32, 32]).to(device));
  const y = torch.keep(torch.randint(0, 10, [batch]).to(device));
  return {
    step: () =>
      torch.tidy(() => {
        const loss = stitchLoss(s, x, y, { slm: 1 });
        loss.item();
        loss.backward();
        opt.step();
        opt.zeroGrad();
      }),
    dispose: () => {
      opt.dispose();
      s.layer.dispose();
      front.dispose();
      back.dispose();
      torch.dispose([x, y]);
    },
  };
}

const row = (model: string, t: { ours: number[]; theirs: number[] }, against: string) => {
  const ms = median(t.ours);
  const other = median(t.theirs);
  return { model, ms: round(ms, 2), [`ms_${against}`]: round(other, 2), ratio: round(ms / other, 3) };
};

function printTable(title: string, against: string, rows: Record<string, unknown>[]): void {
  const eager = rows.some((r) => r.ms_pytorch_eager !== undefined);
  console.log(`\n${title}`);
  console.log(`model       ms here  ${`ms ${against}`.padStart(14)}  ratio${eager ? "  ms PyTorch (eager)" : ""}`);
  for (const r of rows)
    console.log(
      `${String(r.model).padEnd(10)}  ${String(r.ms).padStart(7)}  ${String(r[`ms_${against}`]).padStart(14)}  ${String(r.ratio).padStart(5)}${eager ? String(r.ms_pytorch_eager).padStart(20) : ""}`,
    );
}

export async function main(args: string[]): Promise<void> {
  const o = parseDeviceOptions("onnx", args);
  requireBenchDevice("onnx", o.device);
  const device = o.device;
  const cuda = torch.isCuda(device);
  const sync = deviceSync(device);
  const batch = o.batch ?? (o.quick ? 8 : 64);
  const protocol = o.quick ? { warmup: 1, iters: 3 } : { warmup: 3, iters: 15 };
  const forwardProtocol = { ...protocol, iters: 3 * protocol.iters };
  // One thread on every side, as each of the experiment runner's workers runs.
  torch.setNumThreads(1);
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-bench-onnx-"));
  // onnxruntime's telemetry leaves an empty mat-debug-<pid>.log in the temporary folder of the
  // first session a process makes: here, in the bench's own folder, removed after.
  process.env.TMPDIR = dir;
  const iriRows: Record<string, unknown>[] = [];
  const ortRows: Record<string, unknown>[] = [];
  const forwardRows: Record<string, unknown>[] = [];
  let stitchRow: Record<string, unknown> = {};
  let pytorch = "";
  let gpu: string | undefined;
  try {
    for (const name of MODELS) {
      const { peer, hello } = await PyTorchPeer.start(join(here, "onnx_torch.py"), [
        `--model=${name}`,
        `--batch=${batch}`,
        "--threads=1",
        `--out=${dir}`,
        `--device=${device}`,
      ]);
      const h = hello as { onnx: string; torch: string; gpu?: string };
      pytorch = h.torch;
      gpu = h.gpu;
      const model = new OnnxModel(h.onnx).eval().requiresGrad_(false).to(device);
      torch.manualSeed(1);
      const x = torch.keep(torch.rand([batch, 3, 32, 32]).to(device));
      const r = torch.keep((torch.call("linspace", -1, 1, batch * 10) as torch.Tensor).reshape(batch, 10).to(device));
      const step = () =>
        torch.tidy(() => {
          const xg = x.detach().requiresGrad_(true);
          torch.grad(model.forward(xg).mul(r).sum(), [xg]);
        });
      try {
        const t = await alternate(protocol, step, peer, sync);
        logTimings(`onnx ${name}`, t);
        iriRows.push(row(name, t, "pytorch"));
        // A forward pass is short (20 ms for the ResNet-18) and its medians over 15 steps moved by
        // 1-5% from run to run: three times as many steps for the ratio the issue sets a bar on.
        // onnxruntime-node runs on the CPU only: no such figure on a GPU.
        const f = cuda ? null : await forwardAgainstOrt(h.onnx, model, x, forwardProtocol);
        if (f) logTimings(`onnx ${name} forward`, f, "ms (onnxruntime on the right)");
        // PyTorch's eager forward of the same module, beside: where both trail onnxruntime, the
        // gap is the engine's kernels (ORT fuses convolution, batch norm and activation), not the graph's.
        const fwdDir = join(dir, `${name}-forward`);
        mkdirSync(fwdDir);
        const py = await PyTorchPeer.start(join(here, "onnx_torch.py"), [
          `--model=${name}`,
          `--batch=${batch}`,
          "--threads=1",
          `--out=${fwdDir}`,
          "--forward",
          `--device=${device}`,
        ]);
        let p: { ours: number[]; theirs: number[] };
        try {
          const forward = () => torch.tidy(() => void torch.noGrad(() => model.forward(x)));
          p = await alternate(protocol, forward, py.peer, sync);
        } finally {
          await py.peer.close();
        }
        logTimings(`onnx ${name} forward`, p);
        if (f) ortRows.push({ ...row(name, f, "onnxruntime"), ms_pytorch_eager: round(median(p.theirs), 2) });
        else forwardRows.push(row(name, p, "pytorch"));
      } finally {
        await peer.close();
        model.dispose();
        torch.dispose([x, r]);
      }
      if (name === "resnet18") {
        const graph = stitchStep(() => new OnnxModel(h.onnx), batch, device);
        const zoo = stitchStep(() => createModel("resnet18", { stem: "imagenet", numClasses: 10 }), batch, device);
        try {
          const t = await alternate(
            protocol,
            graph.step,
            { request: async () => ({ ms: timeOnce(zoo.step, sync) }) },
            sync,
          );
          logTimings("stitch step, graph", t, "ms (the zoo's on the right)");
          stitchRow = row("resnet18", t, "zoo");
        } finally {
          graph.dispose();
          zoo.dispose();
        }
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const head = `${deviceLabel(device, gpu)}, batch ${batch}, 1 thread, median of ${protocol.iters} steps; libtorch ${torch.buildInfo().torch}`;
  const forwardHead = head.replace(`median of ${protocol.iters}`, `median of ${forwardProtocol.iters}`);
  printTable(`ONNX models: forward + input gradient (an IRI step), ${head} (PyTorch ${pytorch})`, "pytorch", iriRows);
  if (cuda) printTable(`ONNX models: forward in eval mode, against PyTorch's module, ${head}`, "pytorch", forwardRows);
  else
    printTable(
      `ONNX models: forward in eval mode, against onnxruntime-node on the same file, ${forwardHead}`,
      "onnxruntime",
      ortRows,
    );
  printTable(
    `A stitch training step at layer2.1 (SLM, batch-statistics batch norm, Adam on T): two graph-run ResNet-18s against two of the zoo's, ${head}`,
    "zoo",
    [stitchRow],
  );
  writeResult(
    "onnx",
    o.quick,
    {
      device,
      ...(cuda ? { gpu: gpu ?? "unknown" } : {}),
      batch,
      threads: 1,
      steps: protocol.iters,
      torch: pytorch,
      models: iriRows,
      ...(cuda
        ? { forward_vs_pytorch: forwardRows }
        : { forward_steps: forwardProtocol.iters, forward_vs_onnxruntime: ortRows }),
      stitch_step_vs_zoo: stitchRow,
    },
    device,
  );
}
