// The structure of an ONNX graph that stitching needs: which tensors cut it, and what to call them.
//
// A stitch point is a tensor that cuts the graph: the front is everything from the input to it,
// and the back depends on the input only through it. Over the nodes that depend on the input's
// values ("live" nodes), in the file's topological order, a tensor t is a cut exactly when, just
// after t is made, t is the only live tensor still needed later (by a live node or as the output):
// every live node is then an ancestor of t or a descendant of it. The input's shape is not its
// values: a Shape node's output is not live (a ViT's class token is expanded to the batch through
// Shape(input)), and the back computes such shapes from the batch size (models/onnx/model.ts).
//
// Names: exporters name nodes by module scope (torch.onnx.export from PyTorch 2.0:
// "/layer2/layer2.1/conv1/Conv"; tf2onnx: "model/block_3/conv/Conv2D"). A cut is named by the scope
// it is the output of, so that an exported torchvision ResNet has the zoo's points (layer2.1):
// the deepest scope whose last part is an index (a block of a Sequential: layer2.1, features.3,
// blocks.5), else the deepest scope of more than one node, else the deepest scope. Without scoped
// node names (PyTorch 1.13 names nodes Conv_12), the scope of a node is read from its weights'
// names (layer2.1.conv1.weight) where the exporter kept them, else the cut keeps its tensor's name.
import type { GraphProto, NodeProto } from "./proto.js";

export interface GraphNode {
  index: number;
  name: string;
  opType: string;
  domain: string;
  inputs: string[];
  outputs: string[];
  /** Module path ("layer2.1.conv1"), or null when neither the node's name nor its weights say. */
  scope: string | null;
  /** Whether the node depends on the input's values (not only on its shape). */
  live: boolean;
}

export interface Cut {
  /** The tensor's name in the graph. */
  tensor: string;
  /** The index of the node that makes it (-1: the graph input). */
  after: number;
  /** The stitch point's name: a module scope where the graph gives one, else the tensor's name. */
  name: string;
  /** Every scope this tensor is the output of, shallowest first (other names a user may give). */
  aliases: string[];
}

/**
 * Each tensor's readers in node order: the nodes that take it as an input (a node that takes it
 * twice is there twice, so "its one reader" means one use). The one place a graph is read this way
 * (the GELU and linear fusions, the blocked path's runs, which initializers a model holds).
 */
export function tensorReaders<N>(nodes: readonly N[], inputsOf: (n: N) => readonly string[]): Map<string, N[]> {
  const readers = new Map<string, N[]>();
  for (const n of nodes)
    for (const t of inputsOf(n)) {
      const r = readers.get(t);
      if (r) r.push(n);
      else readers.set(t, [n]);
    }
  return readers;
}

/** "/layer2/layer2.1/conv1/Conv" or "layer2.1/conv1/Conv" to "layer2.1.conv1"; null without a scope. */
export function scopeOfNodeName(name: string): string | null {
  const parts = name.split("/").filter((p) => p !== "");
  if (parts.length < 2) return null;
  let path = "";
  for (const part of parts.slice(0, -1)) path = path === "" || part.startsWith(`${path}.`) ? part : `${path}.${part}`;
  return path || null;
}

/** The module path common to a node's weights' names ("layer2.1.conv1.weight" -> "layer2.1.conv1"), or null. */
function scopeOfWeights(inputs: string[], initializers: Set<string>): string | null {
  const paths = inputs
    .filter((n) => initializers.has(n) && /^[A-Za-z_][\w.]*\.[A-Za-z_]\w*$/.test(n) && !n.startsWith("onnx::"))
    .map((n) => n.slice(0, n.lastIndexOf(".")));
  if (paths.length === 0) return null;
  return paths.every((p) => p === paths[0]) ? (paths[0] as string) : null;
}

export interface GraphFacts {
  nodes: GraphNode[];
  /** The one image input (not an initializer). */
  input: string;
  /** The first graph output (the logits). */
  output: string;
  /** Cuts in order, the input first (after -1) and the output last. */
  cuts: Cut[];
  /** Which node makes each tensor. */
  producer: Map<string, number>;
}

/** Reads a graph's nodes, liveness, cuts and their names. Throws on graphs stitching cannot use (named). */
export function analyseGraph(graph: GraphProto, what: string): GraphFacts {
  const initializers = new Set((graph.initializer ?? []).map((t) => t.name ?? ""));
  const inputs = (graph.input ?? []).map((i) => i.name ?? "").filter((n) => !initializers.has(n));
  if (inputs.length !== 1)
    throw new Error(
      `${what}: a model to stitch takes one image input; this graph takes ${inputs.length} (${inputs.join(", ") || "none"})`,
    );
  const input = inputs[0] as string;
  const output = graph.output?.[0]?.name;
  if (!output) throw new Error(`${what}: the graph has no output`);
  const liveTensors = new Set([input]);
  const producer = new Map<string, number>();
  const nodes: GraphNode[] = (graph.node ?? []).map((n: NodeProto, index) => {
    const node: GraphNode = {
      index,
      name: n.name || `${n.opType}_${index}`,
      opType: n.opType ?? "",
      domain: n.domain ?? "",
      inputs: n.input ?? [],
      outputs: n.output ?? [],
      scope: null,
      live: false,
    };
    node.scope = scopeOfNodeName(node.name) ?? scopeOfWeights(node.inputs, initializers);
    node.live = node.opType !== "Shape" && node.opType !== "Size" && node.inputs.some((t) => liveTensors.has(t));
    // Inputs first: a node that reads its own output (a cycle) reads it before it is made.
    for (const t of node.inputs)
      if (t !== "" && !producer.has(t) && !initializers.has(t) && t !== input)
        throw new Error(
          `${what}: node '${node.name}' (${node.opType}) reads '${t}' before any node makes it (the graph is not in topological order, or the tensor is missing)`,
        );
    for (const o of node.outputs) {
      if (o === "") continue;
      if (producer.has(o)) throw new Error(`${what}: tensor '${o}' is made by two nodes`);
      producer.set(o, index);
      if (node.live) liveTensors.add(o);
    }
    return node;
  });
  if (!liveTensors.has(output)) throw new Error(`${what}: the output '${output}' does not depend on the input`);
  return { nodes, input, output, cuts: findCuts(nodes, input, output), producer };
}

/** The cut tensors in order (see the file's comment), the input first and the output last. */
function findCuts(nodes: GraphNode[], input: string, output: string): Cut[] {
  const live = nodes.filter((n) => n.live);
  // The last live node that reads each tensor (the output is read "after the end").
  const lastUse = new Map<string, number>();
  for (const n of live) for (const t of n.inputs) lastUse.set(t, n.index);
  lastUse.set(output, Number.POSITIVE_INFINITY);
  const open = new Set<string>([input]);
  const cuts: Cut[] = [{ tensor: input, after: -1, name: input, aliases: [] }];
  for (const n of live) {
    for (const t of n.inputs) if (lastUse.get(t) === n.index) open.delete(t);
    for (const o of n.outputs) if (o !== "" && lastUse.has(o)) open.add(o);
    if (open.size === 1) {
      const t = [...open][0] as string;
      if (n.outputs.includes(t)) cuts.push({ tensor: t, after: n.index, name: t, aliases: [] });
    }
  }
  nameCuts(cuts, live);
  return cuts;
}

/** Names each cut by the scope it is the output of (the file's comment gives the rule). */
function nameCuts(cuts: Cut[], live: GraphNode[]): void {
  // Per scope (and every prefix of it): its last live node, and how many it has.
  const span = new Map<string, { last: number; count: number }>();
  for (const n of live) {
    if (!n.scope) continue;
    const parts = n.scope.split(".");
    for (let k = 1; k <= parts.length; k++) {
      const s = parts.slice(0, k).join(".");
      const e = span.get(s);
      if (e) {
        e.last = n.index;
        e.count++;
      } else span.set(s, { last: n.index, count: 1 });
    }
  }
  const taken = new Set<string>();
  for (const cut of cuts) {
    if (cut.after < 0) continue;
    // A scope ends at this cut when its last live node makes it (layer2 and layer2.1 end at one cut).
    const ends = [...span.entries()]
      .filter(([, e]) => e.last === cut.after)
      .map(([s]) => s)
      .sort((a, b) => a.split(".").length - b.split(".").length || a.length - b.length);
    cut.aliases = ends;
    const deepest = (xs: string[]) => xs[xs.length - 1];
    const name =
      deepest(ends.filter((s) => /^\d+$/.test(s.split(".").pop() as string))) ??
      deepest(ends.filter((s) => (span.get(s)?.count ?? 0) > 1)) ??
      deepest(ends);
    if (name && !taken.has(name)) {
      cut.name = name;
      taken.add(name);
    }
  }
}
