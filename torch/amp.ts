// Mixed precision: torch.autocast as a scope. Inside it, libtorch's autocast dispatch keys run the
// ops on PyTorch's lower-precision list (conv2d, linear, matmul, bmm, ...) in the autocast dtype
// and the ops on its fp32 list (cross_entropy_loss, mse_loss, ...) in float32; other ops follow
// their inputs. Parameters stay float32 (the casts are cached within the outermost region), so
// gradients reach them as float32 and the optimiser steps in float32.
//
// PyTorch's recipe, which this follows: forward pass and loss inside autocast, backward outside
// (autograd runs each op's backward in the dtype its forward used). No GradScaler: bfloat16 has
// float32's exponent range, so gradients do not underflow and need no loss scaling; float16
// (CUDA only) would need one, and stitchlab offers only bfloat16 in its configs.
import { type Device, isCuda } from "./device.js";
import { dtypeCode, dtypeName } from "./dtype.js";
import { cpuBf16Refusal } from "./isa.js";
import { native } from "./native.js";

export type AutocastDeviceType = "cpu" | "cuda";
export type AutocastDtype = "bfloat16" | "float16";

export interface AutocastOptions {
  /** Default: bfloat16 on the CPU, float16 on CUDA (PyTorch's defaults). CPU autocast takes bfloat16 only. */
  dtype?: AutocastDtype;
  /** false runs fn with autocast off for this device (a float32 region inside an autocast one). */
  enabled?: boolean;
  /** Cache the lower-precision casts of leaf parameters within the region (default: as it is now). */
  cacheEnabled?: boolean;
}

/** The device type of a device ("cuda:1" -> "cuda"), for autocast. */
export function autocastDeviceType(device: Device): AutocastDeviceType {
  return isCuda(device) ? "cuda" : "cpu";
}

/**
 * Runs fn under autocast for one device type, as `with torch.autocast(deviceType, dtype=...)`:
 * the previous state (enabled flag, dtype, cache flag) is restored afterwards, also when fn
 * throws; regions nest, and leaving the outermost one clears the cache of casts.
 */
export function autocast<T>(deviceType: AutocastDeviceType, opts: AutocastOptions, fn: () => T): T {
  if (deviceType !== "cpu" && deviceType !== "cuda")
    throw new TypeError(`autocast: device type must be 'cpu' or 'cuda', not '${deviceType}'`);
  const dtype = opts.dtype ?? (deviceType === "cpu" ? "bfloat16" : "float16");
  if (dtype !== "bfloat16" && dtype !== "float16")
    throw new TypeError(`autocast: dtype must be bfloat16 or float16, not '${dtype}'`);
  if (deviceType === "cpu" && dtype !== "bfloat16")
    throw new TypeError("autocast: CPU autocast supports bfloat16 only (libtorch 1.13)");
  const enabled = opts.enabled ?? true;
  const refusal = deviceType === "cpu" && enabled ? cpuBf16Refusal() : null;
  if (refusal) throw new Error(`autocast: ${refusal}`);
  const prevEnabled = native.isAutocastEnabled(deviceType);
  const prevDtype = native.getAutocastDtype(deviceType);
  const prevCache = native.isAutocastCacheEnabled();
  native.setAutocastEnabled(deviceType, enabled);
  native.setAutocastDtype(deviceType, dtypeCode(dtype));
  native.autocastIncrementNesting();
  native.setAutocastCacheEnabled(opts.cacheEnabled ?? prevCache);
  try {
    const r = fn();
    if (r instanceof Promise) throw new Error("autocast: fn must be synchronous");
    return r;
  } finally {
    if (native.autocastDecrementNesting() === 0) native.clearAutocastCache();
    native.setAutocastEnabled(deviceType, prevEnabled);
    native.setAutocastDtype(deviceType, prevDtype);
    native.setAutocastCacheEnabled(prevCache);
  }
}

/** Whether autocast is on for a device type now (torch.is_autocast_enabled / is_autocast_cpu_enabled). */
export function isAutocastEnabled(deviceType: AutocastDeviceType = "cuda"): boolean {
  return native.isAutocastEnabled(deviceType);
}

/** The dtype autocast lowers to on a device type (torch.get_autocast_cpu_dtype / get_autocast_gpu_dtype). */
export function getAutocastDtype(deviceType: AutocastDeviceType): AutocastDtype {
  return dtypeName(native.getAutocastDtype(deviceType)) as AutocastDtype;
}

/** The mixed-precision settings a config can name: "bf16" is bfloat16 autocast; absent is float32. */
export const AUTOCAST_MODES = ["bf16"] as const;
export type AutocastMode = (typeof AUTOCAST_MODES)[number];

/** Runs fn under bfloat16 autocast on `device`'s type when mode is "bf16", plainly when it is absent. */
export function withAutocast<T>(mode: AutocastMode | undefined, device: Device, fn: () => T): T {
  if (mode === undefined) return fn();
  if (mode !== "bf16") throw new TypeError(`autocast must be one of ${AUTOCAST_MODES.join(", ")}, not '${mode}'`);
  return autocast(autocastDeviceType(device), { dtype: "bfloat16" }, fn);
}
