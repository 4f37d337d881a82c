// A model's facts, read once per file and kept: its architecture, stitch points (with their shapes),
// head point (or why it has none), classes and image side, and what loading it noted. The planner
// (once per plan, so once per --budget candidate), compare's study and the commands that only ask
// about a model all read them here; a model is loaded in full only to be run (estimate, sanity,
// jobs). Kept per process, keyed by the source and the file's size and time, so a model exported
// again to the same path is read again.
import { existsSync, statSync } from "node:fs";
import { asModelSource, loadCheckpoint, type ModelSourceLike } from "./checkpoint.js";
import { createModel, type ModelOptions } from "./registry.js";
import { HEAD_POINT, type StitchableModel, type StitchPoint } from "./stitchable.js";

export interface ModelFacts {
  arch: string;
  /** The stitch points in network order, without the head's input. */
  points: StitchPoint[];
  /** The head's input as a point, or null where the head reads a map (headRefused says why). */
  head: StitchPoint | null;
  headRefused: string | null;
  numClasses: number;
  /** The side of the images it was trained on, where it says. */
  imageSize: number | undefined;
  /** What loading it noted of its batch norm (a loaded model only; null: nothing). */
  batchNormNote: string | null;
}

const known = new Map<string, ModelFacts>();

function factsOfModel(m: StitchableModel, batchNormNote: string | null): ModelFacts {
  let head: StitchPoint | null = null;
  let headRefused: string | null = null;
  // A graph whose head reads a map (a convolutional head: models/onnx/model.ts headRefusal) has
  // no head point: its other points stand, and a pair that names the head is told why.
  try {
    head = m.stitchPoint(HEAD_POINT);
  } catch (e) {
    headRefused = (e as Error).message;
  }
  const side = m.config.imageSize;
  return {
    arch: m.arch,
    points: m.stitchPoints.map((p) => ({ ...p })),
    head,
    headRefused,
    numClasses: (m.config as { numClasses: number }).numClasses,
    imageSize: typeof side === "number" ? side : undefined,
    batchNormNote,
  };
}

/** The facts of a model loaded from a source (a checkpoint, an ONNX graph, a hub name): loaded once per file. */
export function loadedModelFacts(source: ModelSourceLike): ModelFacts {
  const file = asModelSource(source).checkpoint;
  const stat = existsSync(file) ? statSync(file) : null;
  const key = JSON.stringify(["loaded", asModelSource(source), stat?.size, stat?.mtimeMs]);
  const had = known.get(key);
  if (had) return had;
  const loaded = loadCheckpoint(source);
  try {
    const facts = factsOfModel(loaded.model, loaded.notes.batchNorm ?? null);
    known.set(key, facts);
    return facts;
  } finally {
    loaded.model.dispose();
  }
}

/** The facts of a zoo architecture built with these options (no weights read): built once per recipe. */
export function builtModelFacts(arch: string, options: ModelOptions): ModelFacts {
  const key = JSON.stringify(["built", arch, options]);
  const had = known.get(key);
  if (had) return had;
  const m = createModel(arch, options);
  try {
    const facts = factsOfModel(m, null);
    known.set(key, facts);
    return facts;
  } finally {
    m.dispose();
  }
}
