// An ONNX graph as a stitchable model: its cuts (models/onnx/graph.ts) are the stages' ends, the
// last cut before the output is the head's input (HEAD_POINT), and each stage runs the graph's
// nodes between two cuts on libtorch ops (models/onnx/ops.ts), with autograd. Weights are the
// module's parameters (so freezing, moving to CUDA and fingerprints work as for the zoo), and every
// BatchNormalization is a BatchNorm2d child (so stitching's batch-norm modes reach it).
//
// A back runs from a cut alone: the nodes before the cut are not run again. What the back needs
// from the front's side is only shapes (a ViT expands its class token to Shape(input)[0]); those
// are computed from the batch size, each entry of a Shape node's output being a*N + b, with a and
// b measured at load from two probe passes (N = 1 and 2) on the graph's own input size.
import { basename } from "node:path";
import { BatchNorm2d } from "../../nn/layers.js";
import { inEvalMode, Module } from "../../nn/module.js";
import * as torch from "../../torch/index.js";
import { HEAD_POINT, type Stage, StitchableModel, type StitchPoint } from "../stitchable.js";
import { blockedReaders, blockedReadersNow, blockedUsable, PackedWeights, runBlocked, toDense } from "./blocked.js";
import { fuseGelu, fuseLinear, graphScalars, storedDims } from "./fuse.js";
import { analyseGraph, type Cut, type GraphFacts, type GraphNode, tensorReaders } from "./graph.js";
import { isSupported, OPS, type OpCall, type OpFn } from "./ops.js";
import { type AttrValue, attributeValue, num, onnx, readModelProto, type TensorProto, tensorOf } from "./proto.js";

type Tensor = torch.Tensor;

/** The default domain's opsets the interpreter reads (models/onnx/ops.ts). */
export const OPSETS = { min: 13, max: 18 } as const;
/** The registry-style name ONNX models carry (records, checkpoints' arch field). */
export const ONNX_ARCH = "onnx";

/** Holds named tensors of the graph (weights as parameters, constants as buffers), read by name at run time. */
class GraphTensors extends Module {
  add(name: string, t: Tensor, trainable: boolean): void {
    if (trainable) this.param(name, t);
    else this.buffer(name, t);
  }
  get(name: string): Tensor | null {
    return this.tensor(name, true);
  }
  addChild<M extends Module>(name: string, m: M): M {
    return this.child(name, m);
  }
  forward(x: Tensor): Tensor {
    return x;
  }
}

/** The head: the graph from the head's input to the logits, with its own weights (what a linear probe trains). */
class OnnxHead extends GraphTensors {
  constructor(private readonly run: (v: Tensor) => Tensor) {
    super();
  }
  override forward(v: Tensor): Tensor {
    return this.run(v);
  }
}

/** A forward pass's blocked tensors (models/onnx/blocked.ts), the dense copies made of them, and those with a batch norm folded in. */
interface Blocked {
  tensors: Set<Tensor>;
  dense: Map<Tensor, Tensor>;
  folded: Set<Tensor>;
}

/** What the probe records: every tensor made, and every Shape node's values. */
interface Hooks {
  onTensor?: (name: string, t: Tensor) => void;
  onShape?: (index: number, values: number[]) => void;
}

/** a*N + b per entry: a shape measured at two batch sizes. */
interface LinearShape {
  a: number[];
  b: number[];
}

export interface OnnxModelOptions {
  /** The input side when the graph leaves it open (a dynamic spatial axis). */
  imageSize?: number;
}

export class OnnxModel extends StitchableModel {
  readonly arch = ONNX_ARCH;
  readonly config: Record<string, unknown>;
  readonly head: OnnxHead;
  protected readonly stageList: Stage[];
  protected readonly embedDim: number;
  readonly facts: GraphFacts;
  /** The cuts that are stages' ends, the head's input and the output, with their shapes at N = 1 and 2. */
  readonly cutShapes: Map<string, LinearShape>;
  private readonly body: GraphTensors;
  /** Tensor name -> which holder keeps it (weights and constants). */
  private readonly holder = new Map<string, GraphTensors>();
  /** BatchNormalization node index -> its module. */
  private readonly batchNorms = new Map<number, BatchNorm2d>();
  /** Convolution weights packed for the blocked inference path (models/onnx/blocked.ts). */
  readonly packed = new PackedWeights();
  /** Nodes whose every reader runs blocked (blocked.ts blockedReaders): where a blocked run may start. */
  private get readersBlocked(): Map<number, GraphNode[]> {
    this.#readersBlocked ??= blockedReaders(this.facts.nodes);
    return this.#readersBlocked;
  }
  #readersBlocked: Map<number, GraphNode[]> | undefined;
  /** The tensors that are cuts, asked once per convolution per pass (foldable). */
  #cutTensors: Set<string> | undefined;
  private readonly attrs: Record<string, AttrValue>[];
  /** Shape nodes' outputs as functions of the batch size (those the back may need without the front). */
  private readonly shapeOf = new Map<number, LinearShape>();
  private readonly headCut: Cut;
  /**
   * Why the head's input is not a point, where the graph's last cut before the output is not one
   * vector per image (a convolutional head's [N, K, 1, 1]); null where it is.
   */
  readonly headRefusal: string | null;
  /** Cuts that are the head's input in another shape (a pooled [N, C, 1, 1] map before Flatten): not points of their own. */
  private readonly headForms = new Set<Cut>();
  /** Where each stage starts: the input, then each stage's end in turn (the last one: where embedFrom starts). */
  private stageStarts: Cut[] = [];
  /** Whether some weights are read from external data files beside the graph. */
  readonly externalData: boolean;
  /** Cuts whose maps the graph holds channels last, [N, H, W, C] (a Swin's stages). */
  private readonly channelsLast = new Set<string>();
  /**
   * Nodes that do not read the input's values and whose values depend on the batch size only
   * (shapes, and arithmetic on shapes and constants, not on weights): cached per batch size.
   */
  private readonly batchOnly = new Set<number>();
  private readonly byBatch = new Map<string, Map<string, Tensor>>();
  /** Tensor name -> the Shape nodes that read it. */
  private readonly shapeReaders = new Map<string, number[]>();
  /**
   * Why stitching's batch-norm modes 'adapt' and 'batch' would leave this graph as it is, where it
   * has convolutions and neither a BatchNormalization node nor a layer norm; else null. torch.onnx.export in eval mode (its
   * default) folds each batch norm that follows a convolution into the convolution's weights, so
   * the graph runs as exported in every mode, where the zoo's network (and the reference's) adapts.
   */
  readonly batchNormNote: string | null;

  constructor(
    readonly file: string,
    options: OnnxModelOptions = {},
  ) {
    super();
    const proto = readModelProto(file);
    const what = file;
    const graph = proto.graph;
    if (!graph) throw new Error(`${what}: the model holds no graph`);
    // The default domain is written "" or "ai.onnx" (ops.ts reads both).
    const opset = Math.max(
      0,
      ...(proto.opsetImport ?? []).filter((o) => !o.domain || o.domain === "ai.onnx").map((o) => num(o.version)),
    );
    // Before 13, Softmax and its kin flattened their input to 2-d around the axis, and Squeeze,
    // Unsqueeze, ReduceSum and Split took axes as attributes only: read as the later opsets, such a
    // graph could compute something else without an error. 18 moved the other reductions' axes to
    // an input, which ops.ts reads; later opsets are refused until an operator's changes are read.
    if (opset < OPSETS.min || opset > OPSETS.max)
      throw new Error(
        `${what}: ONNX opset ${opset}: stitchlab reads opsets ${OPSETS.min}-${OPSETS.max} (13-17 tested against onnxruntime); export with opset_version=17`,
      );
    refuseUnsupported(graph.node ?? [], what);
    const scalar = (t: TensorProto) => {
      const v = tensorOf(t, what);
      try {
        return Number((v.toTypedArray() as ArrayLike<number | bigint>)[0]);
      } finally {
        v.dispose();
      }
    };
    graph.node = fuseGelu(graph.node ?? [], graphScalars(graph.node ?? [], graph.initializer ?? [], scalar));
    graph.node = fuseLinear(
      graph.node,
      storedDims(graph.node, graph.initializer ?? []),
      new Set((graph.output ?? []).map((o) => o.name ?? "")),
    );
    this.facts = analyseGraph(graph, what);
    this.findBatchOnly(graph);
    for (const n of this.facts.nodes)
      if (n.opType === "Shape" && n.inputs[0])
        this.shapeReaders.set(n.inputs[0], [...(this.shapeReaders.get(n.inputs[0]) ?? []), n.index]);
    this.body = this.child("graph", new GraphTensors());
    this.attrs = (graph.node ?? []).map((n) => {
      const out: Record<string, AttrValue> = {};
      for (const a of n.attribute ?? []) out[a.name ?? ""] = attributeValue(a);
      return out;
    });
    const initializers = new Map((graph.initializer ?? []).map((t) => [t.name ?? "", t]));
    const external = (t: TensorProto | null | undefined) => t?.dataLocation === onnx.TensorProto.DataLocation.EXTERNAL;
    this.externalData =
      (graph.initializer ?? []).some(external) ||
      (graph.node ?? []).some((n) => (n.attribute ?? []).some((a) => external(a.t)));
    const cuts = this.facts.cuts;
    if (cuts.length < 3)
      throw new Error(
        `${what}: the graph has no tensor between its input and its output that every path passes through, so there is nothing to stitch at`,
      );
    this.headCut = cuts[cuts.length - 2] as Cut;
    const headNodes = new Set(
      this.facts.nodes.filter((n) => n.live && n.index > this.headCut.after).flatMap((n) => n.inputs),
    );
    this.head = this.child("head", new OnnxHead((v) => this.runBetween(v, this.headCut, cuts[cuts.length - 1] as Cut)));
    try {
      // The input's side is checked before any weight is read (an absurd one is refused at once).
      const side = inputSide(graph, options.imageSize, what);
      this.loadWeights(initializers, headNodes, what);
      // A graph that normalises by layer norm (LayerNormalization, or the ReduceMean chain opsets
      // before 17 write for it: a ConvNeXt, a ViT) has no batch norm to lose: nothing to say.
      const has = (...ops: string[]) => this.facts.nodes.some((n) => n.live && ops.includes(n.opType));
      this.batchNormNote =
        this.batchNorms.size === 0 && has("Conv") && !has("LayerNormalization", "ReduceMean")
          ? `${basename(file)} has convolutions and no BatchNormalization node, so batch-norm modes 'adapt' (standard stitching's) and 'batch' leave it as exported; if the network has batch norm, the exporter folded it into the convolutions: export with training=torch.onnx.TrainingMode.PRESERVE to keep it`
          : null;
      this.cutShapes = new Map();
      this.probe(side);
      const headDims = (this.cutShapes.get(this.headCut.tensor) as LinearShape).b.slice(1);
      // A convolutional head (SqueezeNet's 1x1 convolution to the classes, then pooling) leaves
      // [N, K, 1, 1] class scores as the last cut: the points before it are maps like any other,
      // but there is no vector per image to stitch into B's classifier at, or to embed. Refused
      // where asked for (pointIndex, embed), not at load, so that the rest of the graph stitches.
      this.headRefusal =
        headDims.length === 1
          ? null
          : `${what}: the head's input, '${this.headCut.name}', is [N, ${headDims.join(", ")}]${headDims.length === 3 ? " (a convolutional head)" : ""}, not one vector per image: there is no '${HEAD_POINT}' point (from the front's penultimate features into the back's classifier) and no embedding; stitch at its other points (stitchlab layers lists them)`;
      this.embedDim = headDims.reduce((a, b) => a * b, 1);
      const outShape = this.cutShapes.get(this.facts.output) as LinearShape;
      this.config = {
        file: basename(file),
        imageSize: side,
        numClasses: outShape.b[1],
        opset,
        producer: [proto.producerName, proto.producerVersion].filter(Boolean).join(" ") || null,
      };
      for (const c of cuts) if (isChannelsLast(this.shapeAt(c, 1))) this.channelsLast.add(c.tensor);
      // A stage starts at a cut whose first axis grows with the batch (a back reads the batch size
      // from it); a cut held another way ([L, N, E]) is run through, not stopped at.
      const grows = (c: Cut) => ((this.cutShapes.get(c.tensor) as LinearShape).a[0] ?? 0) > 0;
      // torchvision's avgpool output ([N, 512, 1, 1]) reaches the head's input through Flatten
      // alone: the same numbers, so the zoo's last points (layer4.1, then head) stay the last.
      const reshapeOnly = new Set(["Flatten", "Reshape", "Squeeze", "Identity", "Shape", "Constant"]);
      // (None where the head's input is no vector: nothing is the head's input in another shape.)
      for (let k = cuts.length - 3; k > 0 && !this.headRefusal; k--) {
        const c = cuts[k] as Cut;
        const between = this.facts.nodes.filter((n) => n.live && n.index > c.after && n.index <= this.headCut.after);
        if (!between.every((n) => reshapeOnly.has(n.opType))) break;
        // Only a pooled map ([N, C, 1, 1]): there a 1x1 convolution T is the head's linear T. A
        // [N, C, H, W] map flattened into the head is a point of its own (T per position).
        if (
          this.shapeAt(c, 1)
            .slice(2)
            .some((d) => d !== 1)
        )
          break;
        this.headForms.add(c);
      }
      const ends = cuts.slice(1, -2).filter(grows);
      this.stageStarts = [cuts[0] as Cut, ...ends];
      this.stageList = ends.map((cut, k) => ({
        name: cut.name,
        point: this.headForms.has(cut) ? null : this.pointOf(cut),
        run: (h: Tensor) => this.runBetween(h, this.stageStarts[k] as Cut, cut),
      }));
    } catch (e) {
      this.dispose();
      throw e;
    }
  }

  /** A convolution's batch norm to fold in (blocked.ts): its one reader, a batch norm in eval mode. */
  private foldable(n: GraphNode): BatchNorm2d | undefined {
    // Not where the convolution's output is a cut: a stage may end there (the batch norm would
    // run in the next pass, not knowing it was folded) and a point there is the convolution's own.
    this.#cutTensors ??= new Set(this.facts.cuts.map((c) => c.tensor));
    if (this.#cutTensors.has(n.outputs[0] as string)) return undefined;
    const readers = this.readersBlocked.get(n.index);
    const only = readers?.length === 1 ? readers[0] : undefined;
    const bn = only?.opType === "BatchNormalization" ? this.batchNorms.get(only.index) : undefined;
    return bn && !bn.training ? bn : undefined;
  }

  /** A blocked stage output (models/onnx/blocked.ts) leaves the model dense; anything else as it is. */
  protected override leaving(t: Tensor): Tensor {
    return t.isMkldnn() ? toDense(t) : t;
  }

  /** A point by name; a module scope that ends at a point (layers lists it "also named") says which. */
  protected override pointIndex(point: string): number {
    if (this.headRefusal && [HEAD_POINT, this.headCut.name, ...this.headCut.aliases].includes(point))
      throw new Error(this.headRefusal);
    for (const c of this.headForms)
      if (c.name === point || c.aliases.includes(point))
        throw new Error(`${this.file}: '${point}' is the head's input in another shape: give '${HEAD_POINT}'`);
    const cut = this.facts.cuts.find((c) => c.name !== point && c.aliases.includes(point));
    const owner = cut === this.headCut ? HEAD_POINT : cut?.name;
    if (owner && !this.stitchPoints.some((p) => p.name === point) && point !== HEAD_POINT)
      throw new Error(
        `${this.file}: '${point}' ends at the stitch point '${owner}': give that name (stitchlab layers lists both)`,
      );
    return super.pointIndex(point);
  }

  /** The head's input, one vector per image; refused where the graph has none (headRefusal). */
  override embed(x: Tensor): Tensor {
    if (this.headRefusal) throw new Error(this.headRefusal);
    return super.embed(x);
  }

  protected embedFrom(h: Tensor): Tensor {
    return this.runBetween(h, this.stageStarts[this.stageStarts.length - 1] as Cut, this.headCut);
  }

  /** Every cut with its names and shape (for N images), input and output excluded: what `layers` lists. */
  cutList(n = 1): {
    name: string;
    tensor: string;
    aliases: string[];
    /** As a point sees it: a channels-last map as [N, C, H, W]. */
    shape: number[];
    channelsLast: boolean;
    point: boolean;
    /** The head's input in another shape (headForms). */
    headForm: boolean;
    /** Why a cut that could be taken for a point is not one: the head's input that is no vector (headRefusal). */
    note: string | null;
  }[] {
    const cuts = this.facts.cuts;
    // A head's input that is no vector keeps its own name: 'head' is not offered (headRefusal).
    const head = this.headRefusal ? null : this.headCut;
    return cuts.slice(1, -1).map((c) => ({
      name: c === head ? HEAD_POINT : c.name,
      tensor: c.tensor,
      aliases: c === head ? [...new Set([c.name, ...c.aliases])] : c.aliases,
      shape: this.channelsLast.has(c.tensor)
        ? ((s) => [s[0], s[3], s[1], s[2]] as number[])(this.shapeAt(c, n))
        : this.shapeAt(c, n),
      channelsLast: this.channelsLast.has(c.tensor),
      point: c === head || this.stitchPoints.some((p) => p.name === c.name),
      headForm: this.headForms.has(c),
      note:
        c === this.headCut && this.headRefusal
          ? `the head's input is [N, ${this.shapeAt(c, 1).slice(1).join(", ")}], not one vector per image: no '${HEAD_POINT}' point`
          : null,
    }));
  }

  /** A cut's shape in the graph for n images (a channels-last cut as the graph holds it). */
  private shapeAt(c: Cut, n: number): number[] {
    const s = this.cutShapes.get(c.tensor) as LinearShape;
    return s.a.map((a, i) => a * n + (s.b[i] as number));
  }

  /** A cut's stitch point by the rank of its features: maps, tokens or vectors; other ranks are not points. */
  private pointOf(c: Cut): StitchPoint | null {
    // Where the graph names its modules, a cut inside one (a block's sum before its last ReLU) is
    // listed by `layers` but is not a point: the points are the modules' outputs, as the zoo's.
    if (this.facts.cuts.some((k) => k.aliases.length > 0) && c.aliases.length === 0) return null;
    const s = this.shapeAt(c, 1);
    if (s[0] !== 1) return null; // a cut whose first axis is not the batch (windows of a Swin) is not a point
    if (s.length === 4 && this.channelsLast.has(c.tensor))
      return { kind: "cnn", name: c.name, channels: s[3], height: s[1], width: s[2] } as StitchPoint;
    if (s.length === 4) return { kind: "cnn", name: c.name, channels: s[1], height: s[2], width: s[3] } as StitchPoint;
    if (s.length === 3) return { kind: "vit", name: c.name, channels: s[2], tokens: s[1] } as StitchPoint;
    if (s.length === 2) return { kind: "vector", name: c.name, channels: s[1] as number };
    return null;
  }

  /** Initializers as parameters (floating point) or buffers, the head's in the head; BatchNormalization's in its module. */
  private loadWeights(initializers: Map<string, TensorProto>, headInputs: Set<string>, what: string): void {
    const bnInputs = new Set<string>();
    for (const n of this.facts.nodes) {
      if (n.opType !== "BatchNormalization") continue;
      // An exporter may share equal weights through Identity nodes (a zero running mean read from a zero bias).
      const stored = (t: string | undefined): TensorProto | undefined => {
        for (let hops = 0; t !== undefined && hops < 16; hops++) {
          const found = initializers.get(t);
          if (found) return found;
          const p = this.facts.producer.get(t);
          const node = p === undefined ? undefined : this.facts.nodes[p];
          t = node?.opType === "Identity" ? node.inputs[0] : undefined;
        }
        return undefined;
      };
      const [, scale, bias, mean, variance] = n.inputs;
      const parts = [scale, bias, mean, variance].map(stored);
      if (parts.some((p) => !p))
        throw new Error(
          `${what}: BatchNormalization node '${n.name}' takes a scale, bias, mean or variance that is not a stored weight`,
        );
      const [w, b, m, v] = parts.map((p) => tensorOf(p as TensorProto, what)) as Tensor[];
      const attrs = this.attrs[n.index] as Record<string, AttrValue>;
      // training_mode (opset 14) is not read: as for the zoo's networks, the module's mode is the
      // stitching protocol's (eval, or its batch-norm mode), not the exporter's.
      const bn = new BatchNorm2d(w?.shape[0] as number, {
        eps: typeof attrs.epsilon === "number" ? attrs.epsilon : 1e-5,
        // ONNX's momentum weighs the old running value; PyTorch's the new batch's.
        momentum: 1 - (typeof attrs.momentum === "number" ? attrs.momentum : 0.9),
      });
      bn.loadStateDict(
        {
          weight: w,
          bias: b,
          running_mean: m,
          running_var: v,
          num_batches_tracked: torch.zeros([], { dtype: "int64" }),
        },
        { strict: true },
      );
      torch.dispose([w, b, m, v]);
      this.body.addChild(`bn${n.index}`, bn);
      this.batchNorms.set(n.index, bn);
      for (const t of n.inputs.slice(1)) bnInputs.add(t);
    }
    const readers = tensorReaders(this.facts.nodes, (n) => n.inputs);
    for (const [name, t] of initializers) {
      const used = readers.get(name) ?? [];
      if (used.length === 0 || used.every((n) => n.opType === "BatchNormalization" && bnInputs.has(name))) continue;
      const tensor = tensorOf(t, what);
      const holder = headInputs.has(name) && used.every((n) => n.index > this.headCut.after) ? this.head : this.body;
      holder.add(name, tensor, torch.isFloating(tensor.dtype) && used.some((n) => n.live));
      this.holder.set(name, holder);
    }
    for (const n of this.facts.nodes) {
      if (n.opType !== "Constant") continue;
      const value = constantValue(
        this.attrs[n.index] as Record<string, AttrValue>,
        this.file,
        `${what}: node '${n.name}'`,
      );
      this.body.add(n.outputs[0] as string, value, false);
      this.holder.set(n.outputs[0] as string, this.body);
    }
  }

  /**
   * Two passes on zeros (N = 1 and 2), recording every cut's shape and every Shape node's output,
   * each as a*N + b. A graph exported for one batch size fails the second pass: say so.
   */
  private probe(side: number): void {
    const seen: Map<string, number[]>[] = [];
    const shapes: Map<number, number[]>[] = [];
    torch.noGrad(() =>
      inEvalMode([this], () => {
        for (const n of [1, 2]) {
          const cutShapes = new Map<string, number[]>();
          const shapeOuts = new Map<number, number[]>();
          torch.tidy(() => {
            const x = torch.zeros([n, 3, side, side]);
            try {
              this.runNodes(x, this.facts.cuts[0] as Cut, this.facts.cuts[this.facts.cuts.length - 1] as Cut, {
                onTensor: (name, t) => {
                  if (this.facts.cuts.some((c) => c.tensor === name)) cutShapes.set(name, t.shape as number[]);
                },
                onShape: (index, values) => shapeOuts.set(index, values),
              });
            } catch (e) {
              if (n === 1)
                throw new Error(`${this.file}: the graph does not run on a ${side} px image: ${(e as Error).message}`);
              throw new Error(
                `${this.file}: the graph runs on one image but not on two (${(e as Error).message}); it was exported for one batch size: export it with a dynamic batch axis (torch.onnx.export(..., dynamic_axes={'<input>': {0: 'batch'}, '<output>': {0: 'batch'}}))`,
              );
            }
          });
          seen.push(cutShapes);
          shapes.push(shapeOuts);
        }
      }),
    );
    const linear = (one: number[], two: number[]): LinearShape => {
      const a = one.map((v, i) => (two[i] as number) - v);
      return { a, b: one.map((v, i) => v - (a[i] as number)) };
    };
    for (const [name, one] of seen[0] as Map<string, number[]>)
      this.cutShapes.set(name, linear(one, (seen[1] as Map<string, number[]>).get(name) as number[]));
    this.cutShapes.set(this.facts.input, { a: [1, 0, 0, 0], b: [0, 3, side, side] });
    for (const [index, one] of shapes[0] as Map<number, number[]>)
      this.shapeOf.set(index, linear(one, (shapes[1] as Map<number, number[]>).get(index) as number[]));
  }

  /**
   * The graph from cut `from` (its value h) to cut `to`. A channels-last cut is seen from outside
   * as [N, C, H, W], as every map point is: permuted on the way out and back on the way in.
   */
  private runBetween(h: Tensor, from: Cut, to: Cut): Tensor {
    const input = this.channelsLast.has(from.tensor) ? h.permute(0, 2, 3, 1) : h;
    const out = this.runNodes(input, from, to, {});
    return this.channelsLast.has(to.tensor) ? out.permute(0, 3, 1, 2) : out;
  }

  /**
   * Runs the live nodes after `from` up to the one that makes `to`, on h (the value of `from`),
   * freeing each intermediate after its last reader; tensors that are not live (shapes, constant
   * arithmetic) are computed when first read.
   */
  private runNodes(h: Tensor, from: Cut, to: Cut, hooks: Hooks): Tensor {
    const fromShape = this.cutShapes.get(from.tensor);
    const batch = fromShape
      ? ((h.shape[0] as number) - (fromShape.b[0] as number)) / (fromShape.a[0] as number)
      : (h.shape[0] as number);
    const env = new Map<string, Tensor>([[from.tensor, h]]);
    // What depends on the batch size only is computed once per size (not while the probe records shapes).
    const useCache = !hooks.onShape && !hooks.onTensor;
    const shapes = useCache ? this.batchCache(`${h.device}:${batch}`) : undefined;
    this.takeShapes(from.tensor, h, env, hooks, shapes);
    // Tensors made here, with how many names hold each (Identity and Dropout pass their input on as is).
    const made = new Map<Tensor, number>();
    // A forward pass with no gradient on the CPU keeps runs of convolutions blocked (blocked.ts):
    // the blocked tensors, and the dense copies made of them for other nodes (freed at the end).
    const blocked: Blocked | null =
      useCache && blockedUsable(h) ? { tensors: new Set(), dense: new Map(), folded: new Set() } : null;
    // A stage before this one may hand on a blocked tensor (StitchableModel.leaving turns it back
    // for callers): read as blocked, or, where this run cannot be, as a dense copy.
    if (h.isMkldnn()) {
      if (blocked) blocked.tensors.add(h);
      else {
        h = toDense(h);
        env.set(from.tensor, h);
        made.set(h, 1);
      }
    }
    const nodes = this.facts.nodes.filter((n) => n.live && n.index > from.after && n.index <= to.after);
    const lastRead = new Map<string, number>();
    for (const n of nodes) for (const t of n.inputs) lastRead.set(t, n.index);
    const value = (name: string): Tensor | null => {
      if (name === "") return null;
      const known = env.get(name) ?? this.holder.get(name)?.get(name);
      if (known) return known;
      const cached = useCache ? shapes?.get(name) : undefined;
      if (cached) return cached;
      const p = this.facts.producer.get(name);
      const node = p === undefined ? undefined : this.facts.nodes[p];
      if (!node || node.live)
        throw new Error(
          `${this.file}: tensor '${name}' is needed between '${from.name}' and '${to.name}' and is not there`,
        );
      // Not live: shapes and arithmetic on them, computed here (Shape of a tensor not at hand from the batch size).
      const source = node.inputs[0] as string;
      if (node.opType === "Shape" && this.isLive(source) && !env.has(source)) {
        const s = this.shapeOf.get(node.index);
        if (!s) throw new Error(`${this.file}: the shape '${name}' was not measured`);
        const t = torch.tensor(
          s.a.map((a, i) => a * batch + (s.b[i] as number)),
          { dtype: "int64", device: h.device },
        );
        env.set(name, t);
        return this.remember(shapes, node, name, t, env, made);
      }
      this.runNode(node, value, env, made, hooks, shapes, blocked);
      const t = env.get(name) ?? null;
      return t && this.remember(shapes, node, name, t, env, made);
    };
    for (const n of nodes) {
      this.runNode(n, value, env, made, hooks, shapes, blocked);
      for (const t of n.inputs) {
        const v = env.get(t);
        if (lastRead.get(t) !== n.index || !v || !made.has(v) || t === to.tensor) continue;
        env.delete(t);
        const holders = (made.get(v) as number) - 1;
        made.set(v, holders);
        if (holders === 0) {
          made.delete(v);
          v.dispose();
        }
      }
    }
    const out = env.get(to.tensor);
    if (!out) throw new Error(`${this.file}: no node between '${from.name}' and '${to.name}' made '${to.tensor}'`);
    // The output stays blocked for the next stage, except at a cut the graph holds channels last
    // (runBetween permutes it); the dense copies made on the way are freed.
    if (blocked) for (const d of blocked.dense.values()) if (d !== out) d.dispose();
    if (blocked?.tensors.has(out) && this.channelsLast.has(to.tensor)) {
      const dense = toDense(out);
      if (made.has(out)) out.dispose();
      return dense;
    }
    return out === h ? h.clone() : out;
  }

  private runNode(
    n: GraphNode,
    value: (name: string) => Tensor | null,
    env: Map<string, Tensor>,
    made: Map<Tensor, number>,
    hooks: Hooks,
    cache: Map<string, Tensor> | undefined,
    blocked: Blocked | null = null,
  ): void {
    const where = `node '${n.name}' (${n.opType})`;
    const bn = this.batchNorms.get(n.index);
    // A batch norm's weights and statistics are its module's; only its first input is read here.
    let inputs = (bn ? n.inputs.slice(0, 1) : n.inputs).map(value);
    let outs: (Tensor | null)[];
    try {
      const call: OpCall = { inputs, attrs: { ...this.attrs[n.index], __outputs: n.outputs.length }, where };
      const fast = blocked
        ? torch.tidy(() =>
            runBlocked(
              n,
              call,
              { isBlocked: (t) => blocked.tensors.has(t), weights: this.packed, folded: blocked.folded },
              bn,
              n.opType === "Conv" && blockedReadersNow(this.readersBlocked, n, (i) => this.batchNorms.get(i)),
              n.opType === "Conv" ? this.foldable(n) : undefined,
            ),
          )
        : null;
      if (fast && blocked) {
        blocked.tensors.add(fast);
        outs = [fast];
      } else {
        // Any other node reads dense tensors: a blocked input's dense copy, made once.
        if (blocked)
          inputs = inputs.map((t) => {
            if (!t || !blocked.tensors.has(t)) return t;
            const d = blocked.dense.get(t) ?? toDense(t);
            blocked.dense.set(t, d);
            return d;
          });
        if (bn) outs = [bn.forward(inputs[0] as Tensor)];
        else {
          const r = (OPS[n.opType] as (c: OpCall) => Tensor | (Tensor | null)[])({ ...call, inputs });
          outs = Array.isArray(r) ? r : [r];
        }
      }
    } catch (e) {
      const m = (e as Error).message;
      throw new Error(m.startsWith(where) ? m : `${where}: ${m}`);
    }
    for (const [i, name] of n.outputs.entries()) {
      const t = outs[i];
      if (!name || !t) continue;
      env.set(name, t);
      if (made.has(t) || !inputs.includes(t)) made.set(t, (made.get(t) ?? 0) + 1);
      hooks.onTensor?.(name, t);
      this.takeShapes(name, t, env, hooks, cache);
    }
  }

  /**
   * The values that depend on the batch size only, for one device and size: the 8 most recently
   * used are kept (a hit moves to the back, so a loop that alternates sizes keeps them all).
   */
  private batchCache(key: string): Map<string, Tensor> {
    let c = this.byBatch.get(key);
    if (c) {
      this.byBatch.delete(key);
      this.byBatch.set(key, c);
    } else {
      if (this.byBatch.size >= 8) {
        const [oldest, values] = this.byBatch.entries().next().value as [string, Map<string, Tensor>];
        torch.dispose([...values.values()]);
        this.byBatch.delete(oldest);
      }
      c = new Map();
      this.byBatch.set(key, c);
    }
    return c;
  }

  /**
   * Keeps a node's output in the batch-size cache when it depends on the batch size only (and
   * hands it over from the run's tensors to the cache); returns it.
   */
  private remember(
    cache: Map<string, Tensor> | undefined,
    node: GraphNode,
    name: string,
    t: Tensor,
    env: Map<string, Tensor>,
    made: Map<Tensor, number>,
  ): Tensor {
    if (!cache || !this.batchOnly.has(node.index) || made.get(t) !== 1) return t;
    made.delete(t);
    env.delete(name);
    cache.set(name, torch.keep(t));
    return t;
  }

  /** Whether a tensor depends on the input's values (a live node's output, or the input). */
  private isLive(name: string): boolean {
    const p = this.facts.producer.get(name);
    return name === this.facts.input || (p !== undefined && (this.facts.nodes[p] as GraphNode).live);
  }

  /** Marks the nodes whose values depend on the batch size only (batchOnly). */
  private findBatchOnly(graph: NonNullable<ReturnType<typeof readModelProto>["graph"]>): void {
    // Weights (floating initializers) can be trained or replaced; integer initializers are shapes and indices.
    const constants = new Set(
      (graph.initializer ?? []).filter((t) => !FLOAT_TYPES.has(t.dataType ?? 0)).map((t) => t.name ?? ""),
    );
    const batchOnly = new Set<string>();
    for (const n of this.facts.nodes) {
      if (n.live) continue;
      const ok =
        n.opType === "Shape" ||
        n.opType === "Constant" ||
        n.inputs.every((i) => i === "" || constants.has(i) || batchOnly.has(i));
      if (!ok) continue;
      this.batchOnly.add(n.index);
      for (const o of n.outputs) batchOnly.add(o);
    }
  }

  override dispose(): void {
    for (const c of this.byBatch.values()) torch.dispose([...c.values()]);
    this.byBatch.clear();
    this.packed.dispose();
    super.dispose();
  }

  /**
   * A move frees the weights packed for the CPU's blocked path: on another device they would be
   * copies of tensors left behind (a move to the CPU again packs them anew on the next pass).
   */
  override to(device: torch.Device): this {
    this.packed.dispose();
    // The values kept per batch size are per device too (their key): those left on the old
    // device would hold its memory until the model is disposed.
    for (const c of this.byBatch.values()) torch.dispose([...c.values()]);
    this.byBatch.clear();
    return super.to(device);
  }

  /** The Shape nodes that read tensor `name`, run now: it may be freed before a later node reads them. */
  private takeShapes(
    name: string,
    t: Tensor,
    env: Map<string, Tensor>,
    hooks: Hooks,
    cache: Map<string, Tensor> | undefined,
  ): void {
    for (const k of this.shapeReaders.get(name) ?? []) {
      const node = this.facts.nodes[k] as GraphNode;
      const out = node.outputs[0] as string;
      if (cache?.has(out)) continue;
      const where = `node '${node.name}' (Shape)`;
      const shape = (OPS.Shape as OpFn)({
        inputs: [t],
        attrs: this.attrs[k] as Record<string, AttrValue>,
        where,
      }) as Tensor;
      if (cache) cache.set(out, torch.keep(shape));
      else env.set(out, shape);
      hooks.onShape?.(k, Array.from(shape.toTypedArray() as BigInt64Array, Number));
    }
  }
}

/**
 * Whether a map [N, A, B, C] is held channels last: the spatial axes are square, so a map whose
 * last two axes differ and whose middle two agree is [N, H, W, C] (a Swin's stages); a cube is
 * taken as [N, C, H, W].
 */
const isChannelsLast = (s: number[]): boolean => s.length === 4 && s[2] !== s[3] && s[1] === s[2];

/** The largest input side a graph may declare (ImageNet's models take 224 to 518). */
const MAX_SIDE = 4096;

/** ONNX's floating element types (float, float16, double, bfloat16). */
const FLOAT_TYPES = new Set([1, 10, 11, 16]);

/** Every operator the interpreter lacks, named with its nodes, in one error before any weight is read. */
function refuseUnsupported(
  nodes: { opType?: string | null; domain?: string | null; name?: string | null }[],
  what: string,
): void {
  const missing = new Map<string, string[]>();
  for (const [i, n] of nodes.entries()) {
    const op = n.opType ?? "";
    const domain = n.domain ?? "";
    if (isSupported(op, domain)) continue;
    const key = domain ? `${domain}.${op}` : op;
    missing.set(key, [...(missing.get(key) ?? []), n.name || `#${i}`]);
  }
  if (missing.size === 0) return;
  const list = [...missing].map(
    ([op, names]) =>
      `${op} (${names.length} node${names.length > 1 ? "s" : ""}: ${names.slice(0, 3).join(", ")}${names.length > 3 ? ", ..." : ""})`,
  );
  throw new Error(`${what}: stitchlab cannot run these ONNX operators: ${list.join("; ")}`);
}

/** The side of the graph's square input, from its declared shape or the option. */
function inputSide(
  graph: NonNullable<ReturnType<typeof readModelProto>["graph"]>,
  given: number | undefined,
  what: string,
): number {
  const initializers = new Set((graph.initializer ?? []).map((t) => t.name));
  const input = (graph.input ?? []).find((i) => !initializers.has(i.name));
  const dims = input?.type?.tensorType?.shape?.dim ?? [];
  // stitchlab feeds float32 images (and trains T in float32); a graph exported in half precision
  // would fail at its first node, so it is refused here, saying what to export instead.
  const elemType = input?.type?.tensorType?.elemType;
  // protobufjs reads an absent elem_type as 0 (UNDEFINED): no type given, nothing refused.
  if (elemType && elemType !== onnx.TensorProto.DataType.FLOAT) {
    const name = onnx.TensorProto.DataType[elemType] ?? `type ${elemType}`;
    throw new Error(
      `${what}: the input '${input?.name}' is ${String(name).toLowerCase()}; stitchlab feeds float32 images: export the model in float32 (model.float() before torch.onnx.export)`,
    );
  }
  if (dims.length !== 4)
    throw new Error(`${what}: the input '${input?.name}' is not [N, C, H, W] (rank ${dims.length})`);
  const fixed = dims.map((d) => (d.dimValue !== undefined && d.dimValue !== null ? num(d.dimValue) : null));
  if (fixed[1] !== null && fixed[1] !== 3)
    throw new Error(`${what}: the input has ${fixed[1]} channels; stitchlab feeds 3-channel images`);
  const [hgt, wid] = [fixed[2], fixed[3]];
  if (hgt !== null && wid !== null && hgt !== wid)
    throw new Error(`${what}: the input is ${hgt} x ${wid}; stitchlab's images are square`);
  const side = hgt ?? wid ?? given;
  if (side === undefined || side === null)
    throw new Error(`${what}: the input's side is not fixed in the graph: give it (imageSize / --image-size)`);
  // Before the probe allocates an image of that side.
  if (!(side >= 1 && side <= MAX_SIDE))
    throw new Error(`${what}: an input side of ${side} px; stitchlab takes 1 to ${MAX_SIDE} px`);
  if (given !== undefined && side !== given)
    throw new Error(`${what}: the graph takes ${side} px images, and imageSize ${given} was given`);
  return side;
}

/** A Constant node's value, from whichever of its attributes is set. */
function constantValue(attrs: Record<string, AttrValue>, file: string, where: string): Tensor {
  const v = attrs.value;
  // The model's path, so that a value kept as external data is read from the model's folder only.
  if (v && typeof v === "object" && !Array.isArray(v)) return tensorOf(v as TensorProto, file, where);
  if (typeof attrs.value_float === "number") return torch.tensor(attrs.value_float, { dtype: "float32" });
  if (Array.isArray(attrs.value_floats)) return torch.tensor(attrs.value_floats as number[], { dtype: "float32" });
  if (typeof attrs.value_int === "number") return torch.tensor(attrs.value_int, { dtype: "int64" });
  if (Array.isArray(attrs.value_ints)) return torch.tensor(attrs.value_ints as number[], { dtype: "int64" });
  throw new Error(`${where}: a Constant with no value stitchlab reads`);
}
