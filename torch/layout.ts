// The memory layout convolutions run in (torch.channels_last in PyTorch). On the CPU, with one
// thread, libtorch 1.13's oneDNN convolutions are much faster on channels-last (NHWC) inputs
// than on the default contiguous (NCHW) ones for the narrow models of the demo. Measured on an
// Intel Xeon (AVX-512), one thread: a training step of the width-1/8 ResNet-18 (batch 64, with
// the data pipeline) took 66.6 against 94.7 ms (`npm run bench -- train --demo-model`, and
// `--layout contiguous`), an IRI step to layer4.1 35-37 against 45 ms; in Python PyTorch, at
// width 1/4, at full width and at batch 128, it was never slower. With two threads the
// width-1/8 step was slower in channels-last (PyTorch: 61 against 52 ms), and on a GPU nothing
// was measured, so there the layout stays contiguous. The AMD EPYC measured channels-last
// 1.6x faster on one thread in PyTorch (issue 23); our figures: docs/benchmarks.md.
//
// Where it is safe, by measurement (issue 36): oneDNN 2.6's AVX2 channels-last convolutions
// corrupt the heap (a ResNet-18 at width 1/16 aborted with "double free or corruption" on an AVX2
// CPU, in plain PyTorch as well). bench/layout_safety.py runs every convolution from 1, 3, 4, 5,
// 7, 8, 12 or 16 channels to any of them, kernel 1 and 3, stride 1 and 2, 15, 16 and 32 px,
// batch 1 and 8, forward and backward in plain PyTorch under glibc's malloc checks: with oneDNN
// capped at AVX2, every pair with fewer than 8 input channels aborted at the 1x1 stride-2
// convolution at 16 px, batch 8 (the shape of a ResNet's downsampling shortcut), and the 24 pairs
// from 8 channels up ran clean; with AVX-512 (Zen 4, avx512_core_bf16), all 64 ran clean. And
// under AVX2 the layout gains little: a width-1/8 ResNet-18's training step (batch 64, one
// thread, the two layouts' steps alternated in one process) took 0.95 of the contiguous time with
// the guard below, against 0.75 under AVX-512 on the same Zen 4; on an AMD EPYC with AVX2 only,
// PyTorch's calibration epoch (two threads) gained nothing (12.9 s against 13.2 s). So "auto"
// takes channels-last only where oneDNN runs AVX-512 kernels, and a
// layout forced on an AVX2 CPU still keeps each convolution with fewer than AVX2_MIN_CHANNELS
// input or output channels contiguous. oneDNN's ISA is asked of oneDNN itself (it follows
// DNNL_MAX_CPU_ISA); where libtorch hides it (a PyTorch wheel's libtorch), from the
// CPU's flags and the cap (torch/isa.ts). docs/benchmarks.md, "Layout safety", has the table.
//
// Only the activations change layout: a convolution's input is made channels-last, and oneDNN
// keeps its output so, through batch norm, ReLU and the additions of a residual block, to the
// next convolution. Weights stay contiguous (checkpoints are written and read as before), and
// every read of a tensor's data makes it contiguous first, so nothing outside the kernels sees
// the layout. It changes sums' order, as the thread count does (docs/experiments.md, "Threads"),
// and it follows from the thread count and the CPU, which every cache entry records.
import type { Device } from "./device.js";
import { avx512 } from "./isa.js";
import { native } from "./native.js";
import type { MemoryFormat, Tensor } from "./tensor.js";

export type ConvLayout = MemoryFormat;

/** AVX2's vector holds 8 floats: convolutions with fewer channels were the ones that faulted. */
export const AVX2_MIN_CHANNELS = 8;

let forced: ConvLayout | null = null;

/**
 * Forces a layout for this process ("auto": channels-last on a CPU with one thread where oneDNN
 * runs AVX-512, else contiguous). For benchmarks and tests that compare the two; results follow
 * the layout. A forced channels-last still keeps the convolutions that are unsafe on this CPU
 * contiguous (see channelsLastSafe).
 */
export function setConvLayout(layout: ConvLayout | "auto"): void {
  if (layout !== "auto" && layout !== "channels-last" && layout !== "contiguous")
    throw new RangeError(`setConvLayout: '${layout}' is not auto, channels-last or contiguous`);
  forced = layout === "auto" ? null : layout;
}

/** The layout convolutions run in on `device`, in this process now. */
export function convLayout(device: Device): ConvLayout {
  if (forced) return forced;
  return device === "cpu" && native.getNumThreads() === 1 && avx512() ? "channels-last" : "contiguous";
}

/**
 * Whether a CPU convolution from `inChannels` to `outChannels` may run channels-last here: always
 * under AVX-512; under AVX2 (or an ISA we cannot ask) only from AVX2_MIN_CHANNELS channels up on
 * both sides.
 */
export function channelsLastSafe(inChannels: number, outChannels: number): boolean {
  return avx512() || Math.min(inChannels, outChannels) >= AVX2_MIN_CHANNELS;
}

/**
 * A 4-d convolution input in the layout the convolution should run in: channels-last where
 * convLayout says so and the convolution (to `outChannels`) is safe in it, else contiguous, so an
 * unsafe convolution after a channels-last one is converted back. The same tensor when it already is.
 */
export function toConvLayout(x: Tensor, outChannels: number): Tensor {
  if (x.ndim !== 4) return x;
  const safe = x.device !== "cpu" || channelsLastSafe(x.shape[1], outChannels);
  // A 1 x 1 map held (C, 1, 1, 1), as an add leaves it: libtorch 1.13 convolves it on a slow path
  // (a depthwise 7x7 over 64 x 256 x 1 x 1: 6.5 ms, in PyTorch alike, against 0.04 ms for the same
  // values with channels-last strides, which oneDNN takes: a small ConvNeXt's last stage).
  if (safe && x.shape[2] === 1 && x.shape[3] === 1 && x.stride()[2] !== x.shape[1])
    return x.reshape([x.shape[0] as number, 1, 1, x.shape[1] as number]).permute(0, 3, 1, 2);
  if (convLayout(x.device) === "channels-last") return safe ? x.contiguous("channels-last") : x.contiguous();
  // Contiguous wanted. An input that arrives strided channels last (an ONNX graph's Transpose, as a
  // ConvNeXt's) makes oneDNN run channels-last all the same: where that is unsafe, it is copied.
  return safe || x.isContiguous() ? x : x.contiguous();
}
