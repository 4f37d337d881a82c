// The timing protocol shared by the benchmarks: warm-up iterations (allocator pools, oneDNN
// primitive caches and lazy initialisation settle there), then timed iterations, reporting
// the median so that one disturbed iteration does not move the figure.
import { performance } from "node:perf_hooks";

export interface Protocol {
  warmup: number;
  iters: number;
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

/** Milliseconds that one call of fn takes. */
export function timeOnce(fn: () => void): number {
  const t0 = performance.now();
  fn();
  return performance.now() - t0;
}
