// Devices: one type from the parse to the use. A device name is checked once, where it enters
// (a flag, a file, a worker's argv: parseDevice), and carried as a Device from there on, so
// code below asks isCuda(device) rather than comparing strings.
import { buildInfo, cuda } from "./runtime.js";

/** A device name as libtorch takes it: cpu, cuda (the current GPU) or cuda:N. */
export type Device = "cpu" | "cuda" | `cuda:${number}`;

/**
 * Where work runs when no one says: the CPU, which every libtorch build has (a GPU needs a CUDA
 * build, and is asked for with --device). The one default of the commands' --device and of the
 * resolvers' device, which no cache key holds (a model trained on a GPU serves a CPU run).
 */
export const DEFAULT_DEVICE: Device = "cpu";

const DEVICE = /^(cpu|cuda(:\d+)?)$/;

/** Whether a string names a device (cpu, cuda, cuda:N). */
export function isDevice(v: string): v is Device {
  return DEVICE.test(v);
}

/** Checks the form of a device name (not whether this process can use it: requireDevice). */
export function parseDevice(v: string): Device {
  if (!isDevice(v)) throw new Error(`device must be cpu, cuda or cuda:N, not '${v}'`);
  return v;
}

/** Whether a device is a GPU (cuda or cuda:N). */
export function isCuda(device: Device): boolean {
  return device !== "cpu";
}

/** The N of a device named cuda:N; null for "cpu" and for "cuda" (the current GPU). */
export function cudaIndex(device: Device): number | null {
  const i = device.indexOf(":");
  return i >= 0 ? Number(device.slice(i + 1)) : null;
}

/**
 * Throws, saying which half is missing, when this process cannot compute on `device`. Here,
 * below the CLI, so that a worker process checks its device as the commands do
 * (experiments/worker.ts).
 */
export function requireDevice(device: Device): void {
  if (!isCuda(device)) return;
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
