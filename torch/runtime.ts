// Threads, seeds, devices and build facts.
import { availableParallelism } from "node:os";
import { native } from "./native.js";

/** Sets libtorch's intra-op thread count (torch.set_num_threads). */
export function setNumThreads(n: number): void {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`setNumThreads: ${n} is not a positive integer`);
  native.setNumThreads(n);
}
export function getNumThreads(): number {
  return native.getNumThreads();
}

/**
 * The default thread count: STITCHLAB_THREADS if set, else every core. Set explicitly because
 * a libtorch built with OpenMP can start with one thread (Debian's does on this machine).
 */
export function defaultThreads(): number {
  const env = process.env.STITCHLAB_THREADS;
  if (env !== undefined && env !== "") {
    const n = Number(env);
    if (!Number.isInteger(n) || n < 1) throw new RangeError(`STITCHLAB_THREADS=${env} is not a positive integer`);
    return n;
  }
  return availableParallelism();
}

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
