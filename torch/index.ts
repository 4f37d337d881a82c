// stitchlab's tensor library: PyTorch's names over libtorch. Import as
//   import * as torch from "../torch/index.js";
export {
  AUTOCAST_MODES,
  type AutocastDeviceType,
  type AutocastDtype,
  type AutocastMode,
  type AutocastOptions,
  autocast,
  autocastDeviceType,
  getAutocastDtype,
  isAutocastEnabled,
  withAutocast,
} from "./amp.js";
export { enableGrad, grad, isGradEnabled, noGrad } from "./autograd.js";
export * from "./creation.js";
export {
  cudaIndex,
  DEFAULT_DEVICE,
  type Device,
  isCuda,
  isDevice,
  parseDevice,
  requireDevice,
} from "./device.js";
export { type DType, isFloating } from "./dtype.js";
export * from "./functional.js";
export { GraphedStep, graphsRequested, graphsUnavailable } from "./graphs.js";
export { avx512 as onednnAvx512, cpuBf16Refusal, onednnIsa } from "./isa.js";
export {
  AVX2_MIN_CHANNELS,
  type ConvLayout,
  channelsLastSafe,
  convLayout,
  setConvLayout,
  toConvLayout,
} from "./layout.js";
export { dispose, keep, memory, tidy } from "./memory.js";
export { buildInfo, cuda, cudnn, defaultThreads, getNumThreads, manualSeed, setNumThreads } from "./runtime.js";
export { call, type MemoryFormat, type Scalar, schema, Tensor } from "./tensor.js";

// Libtorch's thread count (every core, or STITCHLAB_THREADS) is set when the addon loads, on
// first use (torch/native.ts), not on import: importing torch/ starts nothing.
