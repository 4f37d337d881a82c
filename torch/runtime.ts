// Threads, seeds, the GPU count and build facts (devices: device.ts).
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

/**
 * cuDNN's TF32 switch (torch.backends.cudnn.allow_tf32): on by default, as in PyTorch, so float32
 * convolutions on an Ampere or later GPU round their inputs to TF32's 10-bit mantissa (errors of
 * about 1e-3 relative). `allowTF32(false)` asks for full float32, as the CUDA tests do where they
 * hold a GPU's answers to the CPU's within 1e-4. Returns the setting after the call.
 */
export const cudnn = {
  allowTF32: (value?: boolean): boolean => native.cudnnAllowTF32(value),
};

/** What libtorch this process runs on. */
export function buildInfo(): ReturnType<typeof native.version> {
  return native.version();
}
