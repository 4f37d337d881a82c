// The memory layout convolutions run in (torch.channels_last in PyTorch). On the CPU, with one
// thread, libtorch 1.13's oneDNN convolutions are much faster on channels-last (NHWC) inputs
// than on the default contiguous (NCHW) ones for the narrow models of the demo. Measured on an
// Intel Xeon (AVX-512), one thread: a training step of the width-1/8 ResNet-18 (batch 64, with
// the data pipeline) took 66.6 against 94.7 ms (`npm run bench -- train --demo-model`, and
// `--layout contiguous`), an IRI step to layer4.1 35-37 against 45 ms; in Python PyTorch, at
// width 1/4, at full width and at batch 128, it was never slower. With two threads the
// width-1/8 step was slower in channels-last (PyTorch: 61 against 52 ms), and on a GPU nothing
// was measured, so there the layout stays contiguous. The AMD EPYC measured
// channels-last 1.6x faster on one thread in PyTorch (issue 23); our figures: docs/benchmarks.md.
//
// Only the activations change layout: a convolution's input is made channels-last, and oneDNN
// keeps its output so, through batch norm, ReLU and the additions of a residual block, to the
// next convolution. Weights stay contiguous (checkpoints are written and read as before), and
// every read of a tensor's data makes it contiguous first, so nothing outside the kernels sees
// the layout. It changes sums' order, as the thread count does (docs/experiments.md, "Threads"),
// and it follows from the thread count, which every cache entry records.
import type { Device } from "./device.js";
import { native } from "./native.js";
import type { MemoryFormat, Tensor } from "./tensor.js";

export type ConvLayout = MemoryFormat;

let forced: ConvLayout | null = null;

/**
 * Forces a layout for this process ("auto": channels-last on a CPU with one thread, else
 * contiguous). For benchmarks and tests that compare the two; results follow the layout.
 */
export function setConvLayout(layout: ConvLayout | "auto"): void {
  if (layout !== "auto" && layout !== "channels-last" && layout !== "contiguous")
    throw new RangeError(`setConvLayout: '${layout}' is not auto, channels-last or contiguous`);
  forced = layout === "auto" ? null : layout;
}

/** The layout convolutions run in on `device`, in this process now. */
export function convLayout(device: Device): ConvLayout {
  if (forced) return forced;
  return device === "cpu" && native.getNumThreads() === 1 ? "channels-last" : "contiguous";
}

/** A 4-d convolution input in the layout of convLayout (the same tensor when it already is). */
export function toConvLayout(x: Tensor): Tensor {
  if (x.ndim !== 4 || convLayout(x.device) !== "channels-last") return x;
  return x.contiguous("channels-last");
}
