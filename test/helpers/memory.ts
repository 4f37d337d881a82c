// Exact handle and byte counts for tests. Garbage from earlier code may be finalised at any
// collection (handles are freed during GC), which would shift a count between two reads; so
// collect first. npm test runs node with --expose-gc; without it the counts are best effort.
import assert from "node:assert/strict";
import * as torch from "../../torch/index.js";

export function settledMemory(): { liveHandles: number; accountedBytes: number; collectedHandles: number } {
  // Best effort: a forced collection frees most dead handles, but V8 may still run some
  // finalisers later, so tests built on this compare with a tolerance or check tensors directly.
  (globalThis as { gc?: () => void }).gc?.();
  return torch.memory();
}

/**
 * Runs `work` and asserts that it left no tensor behind: none still live, and none freed by the
 * garbage collector instead of by the code (a leak the finaliser would otherwise hide). Earlier
 * garbage is collected first, so only what `work` made is counted.
 */
export async function assertLeavesNothing(work: () => Promise<unknown>, what: string): Promise<void> {
  const before = settledMemory();
  await work();
  const after = settledMemory();
  assert.equal(after.liveHandles, before.liveHandles, `${what}: tensors still live`);
  assert.equal(after.collectedHandles, before.collectedHandles, `${what}: tensors left to the collector`);
}
