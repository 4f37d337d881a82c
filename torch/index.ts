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
export { type DType, isFloating } from "./dtype.js";
export * from "./functional.js";
export { GraphedStep, graphsRequested, graphsUnavailable } from "./graphs.js";
export { loadSafetensors, type SafetensorsFile, saveSafetensors, torchLoad, torchSave, writeFileAtomic } from "./io.js";
export { dispose, keep, memory, tidy } from "./memory.js";
export {
  buildInfo,
  cuda,
  cudaIndex,
  type DeviceName,
  defaultThreads,
  getNumThreads,
  manualSeed,
  parseDevice,
  requireDevice,
  setNumThreads,
} from "./runtime.js";
export { call, type Device, type Scalar, schema, Tensor } from "./tensor.js";

// Libtorch's thread count (every core, or STITCHLAB_THREADS) is set when the addon loads, on
// first use (torch/native.ts), not on import: importing torch/ starts nothing.
