// Rewrites of an ONNX graph into fewer, larger operators before it runs, where an exporter wrote
// one PyTorch operator as several ONNX ones. Only exact rewrites: the fused operator computes the
// same function (to float rounding), so the cuts, names and gradients are unchanged.
//
// GELU: opsets before 20 have no Gelu, and torch.onnx.export writes F.gelu as
// x * 0.5 * (1 + erf(x / sqrt(2))): Div, Erf, Add, Mul, Mul. Run one by one, those are five passes
// over the MLP's widest tensor forward and as many backward (a small ConvNeXt's step took 2.2x
// PyTorch's with them, bench onnx); ATen's gelu is one. The pattern is matched in either operand
// order of the Add and the Muls, with 0.5 applied first or last, and every intermediate read by
// the next node only.
import { tensorReaders } from "./graph.js";
import { type NodeProto, onnx, type TensorProto } from "./proto.js";

/** A scalar constant's value by tensor name (a Constant node's or an initializer's), or undefined. */
export type ScalarOf = (name: string) => number | undefined;

const near = (v: number | undefined, want: number) => v !== undefined && Math.abs(v - want) <= 1e-5 * Math.abs(want);

/** The nodes with each exporter-written GELU replaced by one Gelu node (approximate "none"). */
export function fuseGelu(nodes: NodeProto[], scalar: ScalarOf): NodeProto[] {
  const readers = tensorReaders([...nodes.keys()], (i) => nodes[i]?.input ?? []);
  const producer = new Map<string, number>();
  for (const [i, n] of nodes.entries()) for (const o of n.output ?? []) producer.set(o, i);
  /** The one node that reads t, or undefined when none or several do. */
  const onlyReader = (t: string): [number, NodeProto] | undefined => {
    const r = readers.get(t);
    return r?.length === 1 ? [r[0] as number, nodes[r[0] as number] as NodeProto] : undefined;
  };
  /** For a binary node, the operand that is not `t`. */
  const other = (n: NodeProto, t: string) => ((n.input ?? [])[0] === t ? (n.input ?? [])[1] : (n.input ?? [])[0]) ?? "";
  const out = (n: NodeProto) => (n.output ?? [])[0] as string;
  const drop = new Set<number>();
  const replace = new Map<number, NodeProto>();
  for (const [i, div] of nodes.entries()) {
    if (div.opType !== "Div" || !near(scalar((div.input ?? [])[1] ?? ""), Math.SQRT2)) continue;
    const x = (div.input ?? [])[0] as string;
    const erf = onlyReader(out(div));
    if (erf?.[1].opType !== "Erf") continue;
    const add = onlyReader(out(erf[1]));
    if (add?.[1].opType !== "Add" || !near(scalar(other(add[1], out(erf[1]))), 1)) continue;
    const mul = onlyReader(out(add[1]));
    if (mul?.[1].opType !== "Mul") continue;
    // x * (1 + erf) then * 0.5, or (1 + erf) * 0.5 then * x.
    const second = onlyReader(out(mul[1]));
    if (second?.[1].opType !== "Mul") continue;
    const byX = other(mul[1], out(add[1])) === x && near(scalar(other(second[1], out(mul[1]))), 0.5);
    const byHalf = near(scalar(other(mul[1], out(add[1]))), 0.5) && other(second[1], out(mul[1])) === x;
    if (!byX && !byHalf) continue;
    for (const [k] of [erf, add, mul]) drop.add(k);
    replace.set(
      second[0],
      onnx.NodeProto.create({
        name: div.name,
        opType: "Gelu",
        domain: "",
        input: [x],
        output: [out(second[1])],
        attribute: [
          onnx.AttributeProto.create({
            name: "approximate",
            type: onnx.AttributeProto.AttributeType.STRING,
            s: new TextEncoder().encode("none"),
          }),
        ],
      }),
    );
    drop.add(i);
  }
  // The fused node stands where the last of its five stood, so every input it reads is made before it.
  return rewritten(nodes, replace, drop);
}

/**
 * The nodes with each MatMul by a 2-D initializer W followed by the Add of a 1-D initializer b
 * (x W + b: nn.Linear on 3-D or 4-D input, which torch.onnx.export cannot write as Gemm) replaced
 * by one MatMul given b as a third input, which the interpreter runs as ATen's `linear` (ops.ts):
 * on a contiguous 3-D input (a ViT's tokens) one addmm adds the bias in the GEMM's own pass, where
 * MatMul then Add read and write the product twice. The product must be read by the Add alone and
 * not be a graph output. `dims` gives a stored weight's dims (storedDims), undefined for any other tensor.
 */
export function fuseLinear(
  nodes: NodeProto[],
  dims: (name: string) => number[] | undefined,
  outputs: ReadonlySet<string>,
): NodeProto[] {
  const readers = tensorReaders([...nodes.keys()], (i) => nodes[i]?.input ?? []);
  const drop = new Set<number>();
  const replace = new Map<number, NodeProto>();
  for (const [i, mm] of nodes.entries()) {
    const [x, w] = mm.input ?? [];
    const product = (mm.output ?? [])[0];
    if (mm.opType !== "MatMul" || (mm.domain ?? "") !== "" || !x || !w || !product || outputs.has(product)) continue;
    const wDims = dims(w);
    if (wDims?.length !== 2) continue;
    const r = readers.get(product);
    const j = r?.length === 1 ? (r[0] as number) : undefined;
    const add = j === undefined ? undefined : nodes[j];
    if (j === undefined || add?.opType !== "Add" || (add.domain ?? "") !== "") continue;
    const [p, q] = add.input ?? [];
    const b = p === product ? q : p;
    const bDims = b === undefined ? undefined : dims(b);
    if (!b || bDims?.length !== 1 || bDims[0] !== wDims[1]) continue;
    drop.add(i);
    replace.set(
      j,
      onnx.NodeProto.create({ name: mm.name, opType: "MatMul", domain: "", input: [x, w, b], output: add.output }),
    );
  }
  // The fused node stands where the Add stood, after everything it reads.
  return rewritten(nodes, replace, drop);
}

/**
 * A stored weight's dims by tensor name, read through Identity nodes: torch.onnx.export stores
 * equal weights once and reads the others through Identity (at initialisation every zero bias of
 * one size is one tensor). Undefined for any tensor that is not a stored weight.
 */
export function storedDims(nodes: NodeProto[], initializers: TensorProto[]): (name: string) => number[] | undefined {
  const dims = new Map(initializers.map((t) => [t.name ?? "", (t.dims ?? []).map(Number)]));
  const identityOf = new Map<string, string>();
  for (const n of nodes)
    if (n.opType === "Identity" && n.input?.[0] && n.output?.[0]) identityOf.set(n.output[0], n.input[0]);
  return (name) => {
    let t: string | undefined = name;
    // Bounded: a malformed graph's Identity cycle ends here (analyseGraph refuses it later).
    for (let hops = 0; t !== undefined && hops < 16; hops++) {
      const d = dims.get(t);
      if (d) return d;
      t = identityOf.get(t);
    }
    return undefined;
  };
}

/** Scalars of a graph: its Constant nodes' values and its one-element initializers. */
export function graphScalars(
  nodes: NodeProto[],
  initializers: TensorProto[],
  read: (t: TensorProto) => number,
): ScalarOf {
  const byName = new Map<string, TensorProto>();
  for (const t of initializers) byName.set(t.name ?? "", t);
  for (const n of nodes) {
    if (n.opType !== "Constant") continue;
    const value = (n.attribute ?? []).find((a) => a.name === "value")?.t;
    if (value) byName.set((n.output ?? [])[0] ?? "", value);
  }
  return (name) => {
    const t = byName.get(name);
    const count = (t?.dims ?? []).reduce<number>((a, d) => a * Number(d), 1);
    return t && count === 1 ? read(t) : undefined;
  };
}

/** The node list with each node at an index in `replace` swapped for its fused node and each in `drop` left out. */
function rewritten(nodes: NodeProto[], replace: Map<number, NodeProto>, drop: Set<number>): NodeProto[] {
  return nodes.flatMap((n, i) => (replace.has(i) ? [replace.get(i) as NodeProto] : drop.has(i) ? [] : [n]));
}
