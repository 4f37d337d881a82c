// Inference in oneDNN's blocked layout (issue 39: a graph's forward no slower than onnxruntime's).
// Eager libtorch hands oneDNN each convolution's input in NCHW (or NHWC) and takes its output
// back in the same layout, reordering both, and reorders the weights on every call; onnxruntime
// keeps activations in a blocked layout (NCHWc) from one convolution to the next and its weights
// packed once. PyTorch's own answer is torch.utils.mkldnn / optimize_for_inference: activations as
// mkldnn tensors (oneDNN's opaque blocked layout) through convolution, batch norm, ReLU, addition
// and pooling, and convolution weights reordered once. Measured on torchvision's ResNet-18 at 32 px,
// batch 64, one thread (Zen 4, AVX-512): eager 33.7 ms, mkldnn tensors 21.6-22.3 ms, onnxruntime 28.3.
//
// Here the same, for a graph's forward pass where nothing needs a gradient (no autograd graph is
// recorded: IRIs and stitching training take the ordinary path) on the CPU in float32: a run of
// nodes the blocked layout serves (Conv in 2-d with symmetric padding, BatchNormalization in eval
// mode, Relu, Add of two maps of one shape, MaxPool in 2-d, GlobalAveragePool) keeps its tensors
// blocked; any other node gets its inputs back in the dense layout first, and so does the run's
// output; a batch norm that is a convolution's one reader within a stage is folded into it
// (PackedWeights). The same oneDNN kernels in another layout sum in another order: test/onnx.test.ts
// holds the path to the dense one within 1e-5. STITCHLAB_ONNX_BLOCKED=0 turns it off.
import type { BatchNorm2d } from "../../nn/layers.js";
import * as torch from "../../torch/index.js";
import { type GraphNode, tensorReaders } from "./graph.js";
import { attrInt, attrInts, convGeometry, type OpCall, padsOf } from "./ops.js";

type Tensor = torch.Tensor;

/** The nodes this path runs blocked (each with its own conditions: runBlocked). */
const BLOCKED_OPS = new Set(["Conv", "BatchNormalization", "Relu", "Add", "MaxPool", "GlobalAveragePool"]);

let built: boolean | undefined;
/** Whether this libtorch has oneDNN (a build without it has no mkldnn tensors). */
const mkldnnBuilt = (): boolean => (built ??= torch.buildInfo().mkldnn);

/**
 * For each node whose every live reader is of a kind this path serves, those readers (a node with
 * none, or with another reader, is absent: the graph's output and a ConvNeXt's convolutions).
 * Whether they run blocked also depends on their batch norms' mode at the time (blockedReadersNow).
 */
export function blockedReaders(nodes: GraphNode[]): Map<number, GraphNode[]> {
  const readers = tensorReaders(
    nodes.filter((n) => n.live),
    (n) => n.inputs,
  );
  const out = new Map<number, GraphNode[]>();
  for (const n of nodes) {
    const rs = n.outputs.flatMap((o) => readers.get(o) ?? []);
    if (rs.length > 0 && rs.every((r) => BLOCKED_OPS.has(r.opType))) out.set(n.index, rs);
  }
  return out;
}

/** Whether n's readers (blockedReaders) all run blocked now: none is a batch norm on batch statistics. */
export function blockedReadersNow(
  readers: Map<number, GraphNode[]>,
  n: GraphNode,
  batchNorm: (index: number) => BatchNorm2d | undefined,
): boolean {
  const rs = readers.get(n.index);
  return rs?.every((r) => r.opType !== "BatchNormalization" || !batchNorm(r.index)?.training) ?? false;
}

/** Whether a forward pass from `x` may run blocked: the CPU, float32, no gradient recorded, not turned off. */
export function blockedUsable(x: Tensor): boolean {
  return (
    process.env.STITCHLAB_ONNX_BLOCKED !== "0" &&
    !torch.isGradEnabled() &&
    x.device === "cpu" &&
    x.dtype === "float32" &&
    // Also under AVX2, where oneDNN 2.6's channels-last convolutions corrupt the heap at narrow
    // channel counts (torch/layout.ts): its blocked ones ran clean there under glibc's malloc
    // checks, every pair of 1-16 input and output channels and 3-128 (kernels 1 and 3, strides 1
    // and 2, 15-32 px, batch 1 and 8, with batch norm, ReLU, addition and max pool after), where
    // the same harness aborts 40 of 64 channels-last pairs (bench/layout_safety.py --layout blocked).
    mkldnnBuilt()
  );
}

/** A convolution's weight as oneDNN takes it, and with a batch norm folded in, the folded bias (else null: the graph's own). */
export interface Packed {
  weight: Tensor;
  bias: Tensor | null;
}

/**
 * A graph's convolution weights reordered for oneDNN, each kept until a tensor it was made from
 * changes. A convolution read only by a batch norm in eval mode has that batch norm folded in (as
 * onnxruntime and PyTorch's optimize_for_inference do): W * s per output channel and
 * (b - mean) * s + beta, with s = gamma / sqrt(var + eps); the batch norm node then passes its
 * input on. That saves a pass over every such activation (3-7% of a ResNet-18's forward).
 */
export class PackedWeights {
  private readonly packed = new Map<
    string,
    { sources: Tensor[]; versions: number[]; stats: Tensor[]; packed: Packed }
  >();

  get(
    name: string,
    w: Tensor,
    bias: Tensor | null,
    fold: BatchNorm2d | undefined,
    padding: number[],
    strides: number[],
    dilations: number[],
    groups: number,
  ): Packed {
    // Keyed by the settings too: a weight two convolutions share with other strides is packed for each.
    const key = JSON.stringify([name, padding, strides, dilations, groups, Boolean(fold)]);
    const stats = fold ? Object.fromEntries([...fold.namedParameters(), ...fold.namedBuffers()]) : {};
    const bn = fold
      ? {
          gamma: stats.weight as Tensor,
          beta: stats.bias as Tensor,
          mean: stats.running_mean as Tensor,
          variance: stats.running_var as Tensor,
          eps: fold.opts.eps ?? 1e-5,
        }
      : null;
    const sources = [w, ...(bias ? [bias] : []), ...(bn ? [bn.gamma, bn.beta, bn.mean, bn.variance] : [])];
    const had = this.packed.get(key);
    // The same tensors, none written in place since: an optimiser's step or a state dict's copy_
    // bumps a tensor's version; moved or replaced ones are other objects. A batch norm's running
    // statistics are written by its training-mode kernel (ATen's, or native/src/batchnorm.cc),
    // which bumps no version: those are compared by value with the copy the fold was made from.
    if (
      had &&
      had.sources.length === sources.length &&
      had.sources.every((t, i) => t === sources[i] && had.versions[i] === t.version()) &&
      had.stats.every((c, i) => torch.call("equal", c, bn ? [bn.mean, bn.variance][i] : c) === true)
    )
      return had.packed;
    if (had) torch.dispose([had.packed.weight, had.packed.bias, ...had.stats]);
    const packed = torch.tidy((): Packed => {
      let weight = w.contiguous();
      // Unfolded, the graph's own bias is passed as it is (not held here: the model owns it).
      let b: Tensor | null = null;
      if (bn) {
        const scale = bn.gamma.div(bn.variance.add(bn.eps).sqrt());
        weight = weight.mul(scale.reshape(-1, 1, 1, 1));
        b = (bias ?? torch.zerosLike(bn.mean)).sub(bn.mean).mul(scale).add(bn.beta);
      }
      return {
        weight: torch.call(
          "mkldnn_reorder_conv2d_weight",
          torch.call("to_mkldnn", weight.contiguous(), null),
          padding,
          strides,
          dilations,
          groups,
        ) as Tensor,
        bias: b,
      };
    });
    torch.keep(packed.weight);
    if (packed.bias) torch.keep(packed.bias);
    const seen = bn ? [bn.mean, bn.variance].map((t) => torch.keep(torch.noGrad(() => t.clone()))) : [];
    this.packed.set(key, { sources, versions: sources.map((t) => t.version()), stats: seen, packed });
    return packed;
  }

  /** How many weights are packed now. */
  get size(): number {
    return this.packed.size;
  }

  dispose(): void {
    for (const p of this.packed.values()) torch.dispose([p.packed.weight, p.packed.bias, ...p.stats]);
    this.packed.clear();
  }
}

/** What a blocked node needs from the pass it is part of. */
export interface BlockedPass {
  isBlocked: (t: Tensor) => boolean;
  weights: PackedWeights;
  /** Blocked convolution outputs with their batch norm folded in: that node passes them on. */
  folded: Set<Tensor>;
}

/** Nodes run blocked in this process (tests check that the path is taken). */
export const blockedNodes = { count: 0 };

export const toBlocked = (t: Tensor): Tensor => torch.call("to_mkldnn", t, null) as Tensor;
export const toDense = (t: Tensor): Tensor => torch.call("to_dense", t, null) as Tensor;

/**
 * Node n run blocked, or null when this path does not serve it here (the caller runs it densely).
 * `call.inputs` are the node's inputs as at hand (blocked or dense; `pass.isBlocked` says which);
 * `bn`: the node's own batch norm module; `readersBlocked`: every node that reads n's output is one
 * this path serves (blockedReadersNow); `foldInto`: a convolution's one reader, a batch norm in eval
 * mode, to fold in.
 */
export function runBlocked(...args: Parameters<typeof blockedNode>): Tensor | null {
  const out = blockedNode(...args);
  if (out) blockedNodes.count++;
  return out;
}

function blockedNode(
  n: GraphNode,
  call: OpCall,
  pass: BlockedPass,
  bn: BatchNorm2d | undefined,
  readersBlocked: boolean,
  foldInto: BatchNorm2d | undefined,
): Tensor | null {
  const { isBlocked } = pass;
  if (!BLOCKED_OPS.has(n.opType)) return null;
  const x = call.inputs[0];
  if (x?.shape.length !== 4) return null;
  // Only where the run is already blocked, or starts at a convolution whose every reader is run
  // blocked too (where blocking pays for its reorders): a lone ReLU on a dense tensor stays dense,
  // and so does a convolution on a dense input read by a transpose (a ConvNeXt's stem). One whose
  // input is blocked already runs blocked whatever reads it (its output is made dense once).
  if (!isBlocked(x) && !(n.opType === "Conv" && readersBlocked)) return null;
  const blocked = (t: Tensor) => (isBlocked(t) ? t : toBlocked(t));
  switch (n.opType) {
    case "Conv": {
      const w = call.inputs[1];
      if (w?.shape.length !== 4 || w.dtype !== "float32") return null;
      const { kernel, strides, dilations, groups } = convGeometry(call, w);
      const { begin, end } = padsOf(call, x.shape.slice(2) as number[], kernel, strides, dilations);
      if (begin.some((b, i) => b !== end[i])) return null;
      // Grouped (depthwise) convolutions stay dense: oneDNN's blocked ones were slower there (a
      // small ConvNeXt's forward took 34.7 ms blocked against 10.4 dense, bench onnx).
      if (groups !== 1) return null;
      const packed = pass.weights.get(
        n.inputs[1] as string,
        w,
        call.inputs[2] ?? null,
        foldInto,
        begin,
        strides,
        dilations,
        groups,
      );
      const y = torch.call(
        "mkldnn_convolution",
        blocked(x),
        packed.weight,
        packed.bias ?? call.inputs[2] ?? null,
        begin,
        strides,
        dilations,
        groups,
      ) as Tensor;
      if (foldInto) pass.folded.add(y);
      return y;
    }
    case "BatchNormalization":
      // Eval mode only: batch statistics (standard stitching's adapt) take the dense path. Folded
      // into the convolution before it already: its output passes on as it is.
      if (!bn || bn.training) return null;
      return pass.folded.has(x) ? x : bn.forward(x);
    case "Relu":
      return torch.call("relu", x) as Tensor;
    case "Add": {
      const y = call.inputs[1];
      if (y?.shape.length !== 4 || y.shape.some((d, i) => d !== x.shape[i])) return null;
      return torch.call("add.Tensor", x, blocked(y), 1) as Tensor;
    }
    case "MaxPool": {
      const kernel = attrInts(call, "kernel_shape");
      if (kernel?.length !== 2 || n.outputs.filter(Boolean).length > 1) return null;
      const strides = attrInts(call, "strides") ?? [1, 1];
      const dilations = attrInts(call, "dilations") ?? [1, 1];
      const { begin, end } = padsOf(call, x.shape.slice(2) as number[], kernel, strides, dilations);
      // oneDNN's pooling takes no dilation (mkldnn_max_pool2d refuses it).
      if (begin.some((b, i) => b !== end[i]) || dilations.some((d) => d !== 1)) return null;
      const ceil = attrInt(call, "ceil_mode", 0) === 1;
      return torch.call("max_pool2d", x, kernel, strides, begin, dilations, ceil) as Tensor;
    }
    case "GlobalAveragePool":
      return torch.call("adaptive_avg_pool2d", x, [1, 1]) as Tensor;
  }
  return null;
}
