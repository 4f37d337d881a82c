// Exact handle and byte counts for tests. Garbage from earlier code may be finalised at any
// collection (handles are freed during GC), which would shift a count between two reads; so
// collect first. npm test runs node with --expose-gc; without it the counts are best effort.
import * as torch from "../../torch/index.js";

export function settledMemory(): { liveHandles: number; accountedBytes: number } {
  const gc = (globalThis as { gc?: () => void }).gc;
  // Twice: V8 runs the finalisers of one collection's dead handles (second-pass weak callbacks)
  // at the latest during the next one.
  gc?.();
  gc?.();
  return torch.memory();
}
