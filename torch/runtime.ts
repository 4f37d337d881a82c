// Threads, seeds, devices and build facts.
import { native } from "./native.js";

/** Sets libtorch's intra-op thread count (torch.set_num_threads). */
export function setNumThreads(n: number): void {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`setNumThreads: ${n} is not a positive integer`);
  native.setNumThreads(n);
}
export function getNumThreads(): number {
  return native.getNumThreads();
}

// The default thread count lives with the addon's loading, which applies it (torch/native.ts).
export { defaultThreads } from "./native.js";

/** Seeds libtorch's generators (torch.manual_seed): same seed, same numbers on the same build. */
export function manualSeed(seed: number): void {
  if (!Number.isInteger(seed) || seed < 0) throw new RangeError(`manualSeed: ${seed} is not a non-negative integer`);
  native.manualSeed(seed);
}

export const cuda = {
  isAvailable: (): boolean => native.cudaIsAvailable(),
  deviceCount: (): number => native.cudaDeviceCount(),
  synchronize: (): void => native.cudaSynchronize(),
};

/** What libtorch this process runs on. */
export function buildInfo(): ReturnType<typeof native.version> {
  return native.version();
}

/**
 * Throws, saying which half is missing, when this process cannot compute on `device` (cpu,
 * cuda, cuda:N). Here, below the CLI, so that a worker process checks its device as the
 * commands do (experiments/worker.ts).
 */
export function requireDevice(device: string): void {
  if (device === "cpu") return;
  const why = !buildInfo().builtWithCuda
    ? "this libtorch is a CPU build (build against a CUDA libtorch: see the README's GPU section)"
    : !cuda.isAvailable()
      ? "libtorch sees no GPU (driver? CUDA_VISIBLE_DEVICES?)"
      : null;
  if (why) throw new Error(`--device ${device}: ${why}; \`stitchlab doctor\` shows what this install has`);
  const n = cudaIndex(device) ?? 0;
  if (n >= cuda.deviceCount())
    throw new Error(`--device ${device}: there are ${cuda.deviceCount()} GPU(s), numbered from 0`);
}

/** The N of a device named cuda:N; null for "cpu" and for "cuda" (the current GPU). */
export function cudaIndex(device: string): number | null {
  const i = device.indexOf(":");
  return device.startsWith("cuda") && i >= 0 ? Number(device.slice(i + 1)) : null;
}

/** A device name as libtorch takes it: cpu, cuda (the current GPU) or cuda:N. */
export type DeviceName = "cpu" | "cuda" | `cuda:${number}`;

/** Checks the form of a device name (not whether this process can use it: requireDevice). */
export function parseDevice(v: string): DeviceName {
  if (!/^(cpu|cuda(:\d+)?)$/.test(v)) throw new Error(`device must be cpu, cuda or cuda:N, not '${v}'`);
  return v as DeviceName;
}
