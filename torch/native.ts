// Loads the compiled Node-API addon (native/build/Release/stitchlab.node). The only module
// that names the addon's raw functions; everything else goes through Tensor and the ops.
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { availableParallelism } from "node:os";
import { join } from "node:path";
// The one import of io/ from torch/: the addon is a file under the repository root.
import { repoRoot as ROOT } from "../io/files.js";

/**
 * An opaque handle to one libtorch tensor, owned by a Tensor: a number that names a slot in the
 * addon's table and the slot's generation (native/src/common.h).
 */
export type Handle = number & { readonly __tensorHandle: unique symbol };

export interface NativeAddon {
  fromBuffer(bytes: ArrayBufferView | ArrayBuffer, dtype: number, shape: number[]): Handle;
  toBuffer(h: Handle): ArrayBuffer;
  free(h: Handle): void;
  setFreeBuffer(buffer: Float64Array): void;
  freeBuffered(n: number): void;
  isLive(h: Handle): boolean;
  finalizeWhenCollected(tensor: object, h: Handle): void;
  shape(h: Handle): number[];
  strides(h: Handle): number[];
  isContiguous(h: Handle): boolean;
  tensorVersion(h: Handle): number;
  isMkldnn(h: Handle): boolean;
  dtype(h: Handle): number;
  device(h: Handle): string;
  item(h: Handle): number | boolean;
  stats(): { liveHandles: number; accountedBytes: number; collectedHandles: number };
  findOp(name: string, overload: string): number;
  callOp(id: number, args: unknown[]): unknown;
  /** Train-mode batch norm of a channels-last float32 CPU tensor (native/src/batchnorm.cc); null when it does not apply. */
  batchNormChannelsLast(
    input: Handle,
    weight: Handle | null,
    bias: Handle | null,
    runningMean: Handle | null,
    runningVar: Handle | null,
    momentum: number,
    eps: number,
  ): Handle | null;
  opSchema(id: number): string;
  // Typed calls (native/src/fast.cc): bindTyped checks the schema against the kind's signature.
  bindTyped(id: number, kind: string): number;
  unaryOp(i: number, self: Handle): Handle;
  binaryOp(i: number, self: Handle, other: Handle): Handle;
  alphaOp(i: number, self: Handle, other: Handle, alpha: number | boolean): Handle;
  scalarOp(i: number, self: Handle, other: number | boolean): Handle;
  scalarAlphaOp(i: number, self: Handle, other: number | boolean, alpha: number | boolean): Handle;
  inplaceAlphaOp(i: number, self: Handle, other: Handle, alpha: number | boolean): void;
  inplaceOp(i: number, self: Handle, other: Handle): void;
  inplaceScalarOp(i: number, self: Handle, other: number | boolean): void;
  reduceOp(i: number, self: Handle): Handle;
  requiresGrad(h: Handle): boolean;
  setRequiresGrad(h: Handle, flag: boolean): void;
  isLeaf(h: Handle): boolean;
  getGrad(h: Handle): Handle | null;
  setGrad(h: Handle, g: Handle | null): void;
  backward(h: Handle, gradient: Handle | null, retainGraph: boolean, createGraph: boolean): void;
  grad(
    outputs: Handle[],
    inputs: Handle[],
    gradOutputs: (Handle | null)[] | null,
    retainGraph: boolean | undefined,
    createGraph: boolean,
    allowUnused: boolean,
  ): (Handle | null)[];
  isGradEnabled(): boolean;
  setGradEnabled(flag: boolean): void;
  isAutocastEnabled(deviceType: "cpu" | "cuda"): boolean;
  setAutocastEnabled(deviceType: "cpu" | "cuda", flag: boolean): void;
  getAutocastDtype(deviceType: "cpu" | "cuda"): number;
  setAutocastDtype(deviceType: "cpu" | "cuda", dtype: number): void;
  autocastIncrementNesting(): number;
  autocastDecrementNesting(): number;
  clearAutocastCache(): void;
  isAutocastCacheEnabled(): boolean;
  setAutocastCacheEnabled(flag: boolean): void;
  version(): {
    torch: string;
    cxx11abi: boolean;
    builtWithCuda: boolean;
    mkldnn: boolean;
    mkl: boolean;
    openmp: boolean;
    lapack: boolean;
    /** Whether this addon was built with AddressSanitizer (`npm run build:native -- --sanitize`). */
    addressSanitizer: boolean;
    parallelInfo: string;
    config: string;
  };
  setNumThreads(n: number): void;
  getNumThreads(): number;
  /** oneDNN's effective CPU ISA (dnnl_cpu_isa_t), or -1 where libtorch hides oneDNN's symbols (native/src/runtime.cc). */
  onednnIsa(): number;
  manualSeed(seed: number | bigint): void;
  cudaIsAvailable(): boolean;
  cudaDeviceCount(): number;
  cudaSynchronize(): void;
  cudnnAllowTF32(value?: boolean): boolean;
  pickleSave(value: unknown): ArrayBuffer;
  // CUDA graphs (native/src/graphs.cc; torch/graphs.ts).
  graphsBuilt(): boolean;
  graphCreate(deviceIndex: number): number;
  graphRun(id: number, fn: () => void, capture: boolean): void;
  graphReplay(id: number): void;
  graphFree(id: number): void;
}

/**
 * The addon's file: the release build, or with STITCHLAB_ADDON=asan the AddressSanitizer build
 * (`npm run build:native -- --sanitize`; run Node with libasan preloaded: docs/benchmarks.md).
 */
export const addonPath =
  process.env.STITCHLAB_ADDON === "asan"
    ? join(ROOT, "native", "build-asan", "build", "Release", "stitchlab.node")
    : join(ROOT, "native", "build", "Release", "stitchlab.node");

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

function load(): NativeAddon {
  // Read before libtorch starts, so that a bad value is the error rather than a half-set-up addon.
  const threads = defaultThreads();
  if (!existsSync(addonPath)) {
    throw new Error(
      `stitchlab's native addon is not built (${addonPath} is missing). ` +
        (process.env.STITCHLAB_ADDON === "asan"
          ? "Run `npm run build:native -- --sanitize` (STITCHLAB_ADDON=asan asks for the sanitizer build)."
          : "Run `npm run build:native` (or scripts/setup.sh on a fresh machine)."),
    );
  }
  // OpenMP threads that spin while idle steal the cores from OpenBLAS's threads and from the
  // other side of a benchmark; passive waiting made ViT-Tiny forward+backward ~1.7x faster on
  // 2 cores (for Python PyTorch alike). libgomp reads this when the addon loads libtorch, so it
  // is set first; a value the user set wins.
  process.env.OMP_WAIT_POLICY ??= "PASSIVE";
  const require = createRequire(import.meta.url);
  let addon: NativeAddon;
  try {
    addon = require(addonPath) as NativeAddon;
  } catch (e) {
    throw new Error(
      `stitchlab's native addon at ${addonPath} failed to load: ${(e as Error).message}\n` +
        "If libtorch moved or changed, rebuild with `npm run build:native`.",
    );
  }
  // Libtorch may start with one thread; use every core (or STITCHLAB_THREADS) unless told
  // otherwise. Here rather than where torch/ is imported, so that it holds however libtorch starts.
  addon.setNumThreads(threads);
  return addon;
}

/**
 * The addon, loaded on first use rather than on import (issue 14): `stitchlab --version`,
 * `--help`, `schema` and `status` import modules that import torch/ but never compute, and should
 * neither pay for starting libtorch nor need it to load. Until then `native` is a stand-in whose
 * every method loads the addon, puts it in `native`'s place and calls through; `native` is a live
 * ES module binding, so from then on every importer calls the addon itself, at no cost per call.
 */
const standIn: NativeAddon = new Proxy({} as NativeAddon, {
  get(_, name) {
    // Only method names: not a thenable to `await`, nothing for util.inspect's symbols.
    if (typeof name !== "string" || name === "then") return undefined;
    return (...args: unknown[]) => {
      if (native === standIn) native = load();
      return Reflect.apply(native[name as keyof NativeAddon] as (...a: unknown[]) => unknown, native, args);
    };
  },
});

export let native: NativeAddon = standIn;
