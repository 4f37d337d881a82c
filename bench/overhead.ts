// The per-call overhead benchmark: microseconds per call of small operators, where the
// arithmetic is negligible and what is timed is the host's cost of one call (argument
// conversion, dispatch, the result's wrapper and its release), here and in Python PyTorch
// (bench/overhead_torch.py), the same operators on the same shapes, alternating op by op.
//
//   npm run bench -- overhead [--quick]
//
// Each timed round is --calls calls of one operator (20,000; 2,000 with --quick) in the form a
// user writes it; ours run inside torch.tidy scopes of 64 calls, as a loop body would, so the
// results are released as often as Python's reference counting releases them. 2 warm-up + 7
// timed rounds per operator (1 + 2 with --quick), the median per side. Writes
// bench/results/overhead.json ({"ops": [{name, us, us_pytorch, ratio}], "median_ratio"};
// overhead-quick.json with --quick, so that a smoke test never overwrites the real figures).
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as torch from "../torch/index.js";
import { PyTorchPeer } from "./pytorch_peer.js";
import { isQuick } from "./synthetic.js";
import { median, round, timeOnce, writeResult } from "./timing.js";

const here = dirname(fileURLToPath(import.meta.url));
const SCOPE = 64;

/** The operators, as stitchlab code calls them; the same list as overhead_torch.py's. */
function workloads(): { ops: Record<string, () => unknown>; dispose(): void } {
  torch.manualSeed(0);
  const t = {
    one: torch.rand([1]),
    oneB: torch.rand([1]),
    k: torch.rand([1024]),
    kB: torch.rand([1024]),
    m: torch.rand([16, 16]),
    mB: torch.rand([16, 16]),
    x: torch.rand([1, 4, 8, 8]),
    w: torch.rand([4, 4, 3, 3]),
    acc: torch.zeros([1024]),
  };
  for (const v of Object.values(t)) torch.keep(v);
  return {
    ops: {
      add_1: () => t.one.add(t.oneB),
      add_1k: () => t.k.add(t.kB),
      mul_scalar_1k: () => t.k.mul(2),
      matmul_16: () => t.m.matmul(t.mB),
      conv2d_small: () => torch.conv2d(t.x, t.w, null, { padding: 1 }),
      relu_1k: () => t.k.relu(),
      add__inplace_1k: () => t.acc.add_(t.k),
      sum_1k: () => t.k.sum(),
    },
    dispose: () => torch.dispose(Object.values(t)),
  };
}

export interface OverheadResult {
  ops: { name: string; us: number; us_pytorch: number; ratio: number }[];
  median_ratio: number;
  calls: number;
  rounds: number;
  threads: number;
  libtorch: string;
  torch: string;
  node: string;
}

export async function main(args: string[]): Promise<void> {
  const quick = isQuick("overhead", args);
  const calls = quick ? 2_000 : 20_000;
  const protocol = quick ? { warmup: 1, iters: 2 } : { warmup: 2, iters: 7 };
  const threads = torch.getNumThreads();
  const libtorch = torch.buildInfo().torch;
  const w = workloads();
  const { peer, hello } = await PyTorchPeer.start(join(here, "overhead_torch.py"), [
    `--calls=${calls}`,
    `--threads=${threads}`,
  ]);
  const { torch: pytorch, threads: pyThreads, ops: pyOps } = hello as { torch: string; threads: number; ops: string[] };
  const rows: OverheadResult["ops"] = [];
  try {
    if (pyThreads !== threads) throw new Error(`overhead: PyTorch runs ${pyThreads} threads, not ${threads}`);
    if (pyOps.join() !== Object.keys(w.ops).join())
      throw new Error(`overhead: PyTorch's operators are ${pyOps.join(", ")}, not ${Object.keys(w.ops).join(", ")}`);
    for (const [name, op] of Object.entries(w.ops)) {
      const loop = () => {
        for (let done = 0; done < calls; done += SCOPE)
          torch.tidy(() => {
            for (let i = 0; i < SCOPE && done + i < calls; i++) op();
          });
      };
      const ours: number[] = [];
      const theirs: number[] = [];
      for (let r = 0; r < protocol.warmup + protocol.iters; r++) {
        const ms = timeOnce(loop);
        const py = ((await peer.request({ op: "step", name })) as { ms: number }).ms;
        if (r >= protocol.warmup) {
          ours.push(ms);
          theirs.push(py);
        }
      }
      const us = (median(ours) * 1000) / calls;
      const usPy = (median(theirs) * 1000) / calls;
      rows.push({ name, us: round(us, 3), us_pytorch: round(usPy, 3), ratio: round(us / usPy, 3) });
      console.error(`overhead: ${name}: ${us.toFixed(2)} us here, ${usPy.toFixed(2)} us in PyTorch`);
    }
  } finally {
    await peer.close();
    w.dispose();
  }
  const result: OverheadResult = {
    ops: rows,
    median_ratio: round(median(rows.map((r) => r.ratio)), 3),
    calls,
    rounds: protocol.iters,
    threads,
    libtorch,
    torch: pytorch,
    node: process.version,
  };
  const pad = (s: string, n: number) => s.padEnd(n);
  console.log(`Per-call overhead (${threads} threads, ${calls} calls per round, median of ${protocol.iters} rounds)`);
  console.log(`${pad("operator", 18)}${pad("stitchlab us", 14)}${pad("PyTorch us", 12)}ratio`);
  for (const r of rows)
    console.log(`${pad(r.name, 18)}${pad(r.us.toFixed(2), 14)}${pad(r.us_pytorch.toFixed(2), 12)}${r.ratio}`);
  console.log(`median ratio ${result.median_ratio}`);
  writeResult("overhead", quick, result);
}
