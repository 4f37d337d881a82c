// ONNX models on stitchlab's interpreter against PyTorch running the same module (issue 39): one
// step of what an IRI descent does with a front, the forward pass and the gradient with respect to
// the input, eval mode, on the same batch, for torchvision's ResNet-18 (32 px) and the
// cross-architecture preset's ConvNeXt and ViT. PyTorch exports each model (bench/onnx_torch.py)
// and the two sides alternate step by step (bench/timing.ts alternate). Prints the ratio per model
// and writes bench/results/onnx.json.
//
//   npm run bench -- onnx [--quick] [--batch N]   (default batch 64, one thread: a worker's)
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { OnnxModel } from "../models/onnx/model.js";
import * as torch from "../torch/index.js";
import { parseDeviceOptions } from "./options.js";
import { PyTorchPeer } from "./pytorch_peer.js";
import { alternate, logTimings, median, round, writeResult } from "./timing.js";

const here = dirname(fileURLToPath(import.meta.url));
const MODELS = ["resnet18", "convnext", "vit"] as const;

export async function main(args: string[]): Promise<void> {
  const o = parseDeviceOptions("onnx", args);
  const batch = o.batch ?? (o.quick ? 8 : 64);
  const protocol = o.quick ? { warmup: 1, iters: 3 } : { warmup: 3, iters: 15 };
  // One thread on both sides, as each of the experiment runner's workers runs.
  torch.setNumThreads(1);
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-bench-onnx-"));
  const rows: Record<string, unknown>[] = [];
  let pytorch = "";
  try {
    for (const name of MODELS) {
      const { peer, hello } = await PyTorchPeer.start(join(here, "onnx_torch.py"), [
        `--model=${name}`,
        `--batch=${batch}`,
        "--threads=1",
        `--out=${dir}`,
      ]);
      const h = hello as { onnx: string; torch: string };
      pytorch = h.torch;
      const model = new OnnxModel(h.onnx).eval().requiresGrad_(false);
      torch.manualSeed(1);
      const x = torch.keep(torch.rand([batch, 3, 32, 32]));
      const r = torch.keep((torch.call("linspace", -1, 1, batch * 10) as torch.Tensor).reshape(batch, 10));
      const step = () =>
        torch.tidy(() => {
          const xg = x.detach().requiresGrad_(true);
          torch.grad(model.forward(xg).mul(r).sum(), [xg]);
        });
      let t: { ours: number[]; theirs: number[] };
      try {
        t = await alternate(protocol, step, peer);
      } finally {
        await peer.close();
        model.dispose();
        torch.dispose([x, r]);
      }
      logTimings(`onnx ${name}`, t);
      const ms = median(t.ours);
      const msPy = median(t.theirs);
      rows.push({ model: name, ms: round(ms, 2), ms_pytorch: round(msPy, 2), ratio: round(ms / msPy, 3) });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  console.log(
    `\nONNX models: forward + input gradient (an IRI step), batch ${batch}, 1 thread, median of ${protocol.iters} steps; libtorch ${torch.buildInfo().torch} (PyTorch ${pytorch})`,
  );
  console.log("model       ms here  ms PyTorch  ratio");
  for (const row of rows)
    console.log(
      `${String(row.model).padEnd(10)}  ${String(row.ms).padStart(7)}  ${String(row.ms_pytorch).padStart(10)}  ${String(row.ratio).padStart(5)}`,
    );
  writeResult("onnx", o.quick, { batch, threads: 1, steps: protocol.iters, torch: pytorch, models: rows });
}
