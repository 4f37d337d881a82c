// The timing protocol shared by the benchmarks: warm-up iterations (allocator pools, oneDNN
// primitive caches and lazy initialisation settle there), then timed iterations, reporting
// the median so that one disturbed iteration does not move the figure.
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { writeFileAtomic } from "../io/files.js";
import * as torch from "../torch/index.js";

export interface Protocol {
  warmup: number;
  iters: number;
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

/**
 * What ends a timed iteration on `device`: nothing on the CPU; on a GPU, where kernels run
 * asynchronously, a wait until everything queued is done (torch.cuda.synchronize()), so that the
 * clock stops when the work is finished rather than when it is queued.
 */
export function deviceSync(device: torch.Device): () => void {
  if (!torch.isCuda(device)) return () => {};
  const index = torch.cudaIndex(device) ?? 0;
  if (index === 0) return () => torch.cuda.synchronize();
  // torch.cuda.synchronize() waits for the current device, GPU 0. Reading one element of a
  // tensor on cuda:N back waits for everything queued on that GPU's stream before it.
  const probe = torch.keep(torch.zeros([1], { device }));
  return () => {
    torch.cuda.synchronize();
    probe.item();
  };
}

/**
 * Milliseconds that one call of fn takes. `sync` (deviceSync) runs before the clock starts, so
 * that no earlier work is counted, and after fn, before it stops.
 */
export function timeOnce(fn: () => void, sync: () => void = () => {}): number {
  sync();
  const t0 = performance.now();
  fn();
  sync();
  return performance.now() - t0;
}

/** What alternate() needs of the other side: one timed step per request. */
interface Peer {
  request(command: Record<string, unknown>): Promise<unknown>;
}

/**
 * Times `step` here and one peer step (PyTorch) in turn, warm-up iterations first, and returns
 * the timed milliseconds of both sides. Alternating step by step makes a change of load on a
 * shared machine fall on both columns alike. `sync` ends each of our steps (deviceSync); the
 * peer synchronises its own device before it stops its clock.
 */
export async function alternate(
  protocol: Protocol,
  step: () => void,
  peer: Peer,
  sync: () => void = () => {},
): Promise<{ ours: number[]; theirs: number[] }> {
  const ours: number[] = [];
  const theirs: number[] = [];
  for (let i = 0; i < protocol.warmup + protocol.iters; i++) {
    const ms = timeOnce(step, sync);
    const py = ((await peer.request({ op: "step" })) as { ms: number }).ms;
    if (i >= protocol.warmup) {
      ours.push(ms);
      theirs.push(py);
    }
  }
  return { ours, theirs };
}

/** Prints both sides' timings on stderr, one line: "NAME: 10 11 ms here; 9 10 ms in PyTorch". */
export function logTimings(name: string, t: { ours: number[]; theirs: number[] }, unit = "ms"): void {
  const list = (xs: number[]) => xs.map((x) => x.toFixed(0)).join(" ");
  console.error(`${name}: ${list(t.ours)} ${unit} here; ${list(t.theirs)} ${unit} in PyTorch`);
}

export const round = (v: number, digits: number): number => Number(v.toFixed(digits));

/**
 * Writes bench/results/NAME.json (NAME-quick.json for a quick run, so it never overwrites real
 * figures); a run on a GPU writes NAME-cuda.json (NAME-cuda-quick.json), so that it never
 * overwrites the CPU figures either.
 */
export function writeResult(
  name: string,
  quick: boolean,
  result: object,
  device: torch.Device = torch.DEFAULT_DEVICE,
): void {
  const file = `${name}${torch.isCuda(device) ? "-cuda" : ""}${quick ? "-quick" : ""}.json`;
  const path = join(dirname(fileURLToPath(import.meta.url)), "results", file);
  mkdirSync(dirname(path), { recursive: true });
  writeFileAtomic(path, [`${JSON.stringify(result, null, 2)}\n`]);
  console.error(`${name}: wrote ${path}`);
}

/**
 * Prints a title line (with the thread count and OMP_WAIT_POLICY) and a three-row table:
 * stitchlab, PyTorch, ratio. `columns` names the two figures of each side after the ms.
 */
export function printComparison(
  title: string,
  r: { ms: number; ms_pytorch: number; ratio: number; threads: number; libtorch: string },
  pytorch: string,
  extra: { name: string; ours: number; theirs: number },
): void {
  const cols = ["", "ms/step", extra.name];
  const rows = [
    ["stitchlab", r.ms.toFixed(1), extra.ours.toFixed(1)],
    ["PyTorch", r.ms_pytorch.toFixed(1), extra.theirs.toFixed(1)],
    ["ratio", r.ratio.toFixed(3), ""],
  ];
  const width = cols.map((c, i) => Math.max(c.length, ...rows.map((row) => row[i].length)));
  const line = (row: string[]) => row.map((c, i) => (i === 0 ? c.padEnd(width[i]) : c.padStart(width[i]))).join("  ");
  const policy = process.env.OMP_WAIT_POLICY || "default";
  console.log(
    `\n${title}; libtorch ${r.libtorch} (PyTorch ${pytorch}), ${r.threads} threads, OMP_WAIT_POLICY ${policy}`,
  );
  console.log(line(cols));
  for (const row of rows) console.log(line(row));
}
