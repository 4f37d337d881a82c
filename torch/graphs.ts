// CUDA graphs for steps whose shapes never change (native/src/graphs.cc): the IRI descent's
// step is recorded once and replayed as one launch, so the host's cost per operator stops
// mattering on the GPU (issue 16).
//
// Off unless STITCHLAB_CUDA_GRAPHS=1: the path builds and falls back here, but has not yet run
// on a GPU, so it is not the default until it has been measured there (docs/gpu.md).
import { cudaIndex, type Device, isCuda } from "./device.js";
import { tidy } from "./memory.js";
import { native } from "./native.js";

/** Whether STITCHLAB_CUDA_GRAPHS asks for CUDA graphs (0, 1 or unset; anything else is refused). */
export function graphsRequested(): boolean {
  const v = process.env.STITCHLAB_CUDA_GRAPHS;
  if (v === undefined || v === "" || v === "0") return false;
  if (v === "1") return true;
  throw new RangeError(`STITCHLAB_CUDA_GRAPHS=${v}: expected 0 or 1`);
}

/** Why CUDA graphs cannot serve steps on `device`, or null when they can. */
export function graphsUnavailable(device: Device): string | null {
  if (!isCuda(device)) return `the device is ${device}`;
  if (!native.graphsBuilt())
    return "this build of stitchlab has no CUDA graphs (a CPU libtorch, or no CUDA runtime headers at build time)";
  return null;
}

/**
 * A step that reads and writes only tensors made before it (fixed shapes, nothing read back to
 * the host inside it), called again and again. With graphs, the first `warmup` calls run eagerly
 * on a side stream (as PyTorch's recipe does, so lazy set-up happens outside the capture), the
 * next is recorded and replayed, and every later call is a replay. Without, each call runs the
 * body eagerly: the same kernels in the same order, so the same results.
 */
export class GraphedStep {
  readonly graphed: boolean;
  private readonly warmup: number;
  #id: number | null = null;
  #calls = 0;

  constructor(
    device: Device,
    private readonly body: () => void,
    opts: { graphs: boolean; warmup?: number },
  ) {
    this.graphed = opts.graphs && graphsUnavailable(device) === null;
    this.warmup = opts.warmup ?? 2;
    // -1: libtorch's current GPU, for a device named plain "cuda".
    if (this.graphed) this.#id = native.graphCreate(cudaIndex(device) ?? -1);
  }

  step(): void {
    const calls = this.#calls++;
    if (this.#id === null) {
      tidy(this.body);
      return;
    }
    const run = () => tidy(this.body);
    if (calls < this.warmup) native.graphRun(this.#id, run, false);
    else {
      // Recording runs nothing, so the recorded step is replayed at once.
      if (calls === this.warmup) native.graphRun(this.#id, run, true);
      native.graphReplay(this.#id);
    }
  }

  dispose(): void {
    if (this.#id !== null) native.graphFree(this.#id);
    this.#id = null;
  }
}
