// Exact handle and byte counts for tests. Garbage from earlier code may be finalised at any
// collection (handles are freed during GC), which would shift a count between two reads; so
// collect first. npm test runs node with --expose-gc; without it the counts are best effort.
import * as torch from "../../torch/index.js";

export function settledMemory(): { liveHandles: number; accountedBytes: number; collectedHandles: number } {
  // Best effort: a forced collection frees most dead handles, but V8 may still run some
  // finalisers later, so tests built on this compare with a tolerance or check tensors directly.
  (globalThis as { gc?: () => void }).gc?.();
  return torch.memory();
}
