// How long a plan's tasks will take on this machine, from a short timed probe on the actual
// models (`stitchlab compare` prints it before it starts): a few IRI descent steps at the
// shallowest and deepest point, a few stitching steps in each mode, the least-squares start, the
// scoring, and the loading of models and data, each timed, then scaled by the plan's counts:
//   IRI task    = load front + load data + (images / batch) x (steps x step(point) + batch overhead)
//   stitch task = load models + load data + least squares + (standard: epochs x steps x step;
//                 invariance-aware: A and B over the IRIs once + epochs x steps x frozen step)
//                 + scoring (test images x (stitched + A alone) + CKA images)
// Steps are timed at the configured batch size: a step's time does not scale linearly with the
// batch (on 2 cores, an IRI step of a width-1/16 ResNet-18 on 128 images took 7 times one on 32),
// so a smaller probe batch under-estimated by about 2. Trained models (train tasks) are not
// probed: the estimate covers checkpoints.
import { type Dataset, datasetSize, disposeDataset, pixelScale, standardAugment, subset } from "../data/index.js";
import { loadCheckpoint, type ModelSource } from "../models/checkpoint.js";
import { requireNormalization } from "../models/record.js";
import { stitchModeOf } from "../stitch/config.js";
import { evaluateStitch, frontAndBack } from "../stitch/evaluate.js";
import { generateIriBatch } from "../stitch/iris.js";
import { loadSource } from "../stitch/jobs.js";
import { parseObjective } from "../stitch/objectives.js";
import { StitchedModel } from "../stitch/stitched.js";
import { recipeOf, trainStitch } from "../stitch/train.js";
import type { Device } from "../torch/index.js";
import { isDone } from "./cache.js";
import type { IrisTask, ModelRef, Plan, StitchTask } from "./plan.js";

/** What the probe measured, in seconds. */
export interface ProbeTimes {
  loadModel: number;
  loadTrain: number;
  loadTest: number;
  /** One IRI descent step on a batch of the configured size, at the probed points (by point name). */
  iriStep: Record<string, number>;
  /** Per IRI batch besides its steps (targets, start, quantising, writing). */
  iriBatch: Record<string, number>;
  /** One stitching step on a batch of the configured size, per mode. */
  stitchStep: { standard: number; iris: number };
  /** A and B over one training image, once per invariance-aware stitch (its frozen features). */
  frozenPerImage: number;
  leastSquares: number;
  /** Scoring one test image: A and B once (with CKA's features), then the stitched model. */
  scorePerImage: number;
  /** Training images the tasks can read (the split's size, or more than the largest limit). */
  trainCount: number;
  /** The probe's own time. */
  seconds: number;
}

export interface Estimate {
  /** Seconds for the tasks still to run. */
  seconds: number;
  iris: { tasks: number; seconds: number };
  stitch: { tasks: number; seconds: number };
  probe: ProbeTimes | null;
}

const now = () => performance.now() / 1000;

function timed<T>(fn: () => T): [T, number] {
  const t = now();
  const v = fn();
  return [v, now() - t];
}

const sourceOf = (ref: ModelRef): ModelSource => {
  if ("task" in ref) throw new Error("the estimate covers checkpoints only (this plan trains models)");
  const { sha256: _s, ...source } = ref;
  return source;
};

/** Images to run steps on: the first n of a dataset. */
const first = (ds: Dataset, n: number): Dataset =>
  subset(
    ds,
    Array.from({ length: Math.min(n, datasetSize(ds)) }, (_, i) => i),
  );

/** Times the pieces of the plan's tasks on its models (the first stitch task's front and back). */
export async function probePlan(plan: Plan, device: Device): Promise<ProbeTimes> {
  const started = now();
  const specs = plan.tasks.map((t) => t.spec);
  const stitch =
    specs.find((s): s is StitchTask => s.kind === "stitch" && s.front !== s.back) ??
    specs.find((s): s is StitchTask => s.kind === "stitch");
  if (!stitch) throw new Error("nothing to estimate: the plan has no stitch task");
  const irisTasks = specs.filter((s): s is IrisTask => s.kind === "iris");
  const c = stitch.config;
  const load = (ref: ModelRef) => {
    const l = loadCheckpoint(sourceOf(ref));
    l.model.to(device);
    return l;
  };
  const [front, loadModel] = timed(() => load(stitch.front));
  const back = load(stitch.back);
  const tail = load(stitch.back);
  const owned: Dataset[] = [];
  const models = [front.model, back.model, tail.model];
  try {
    const src = {
      dataset: c.dataset,
      root: c.root,
      imageSize: c.imageSize,
      shortcut: null,
      markerScale: c.markerScale,
      // As many as the largest task reads (all when one reads all), so that the split's size is known.
      limit: [c.limit, ...irisTasks.map((t) => t.limit)].some((l) => l === null)
        ? null
        : Math.max(c.limit ?? 0, ...irisTasks.map((t) => t.limit ?? 0)),
    };
    let t = now();
    const train = await loadSource(src, "train");
    const loadTrain = now() - t;
    owned.push(train);
    t = now();
    const test = await loadSource({ ...src, limit: c.testLimit }, "test");
    const loadTest = now() - t;
    owned.push(test);

    // IRI steps at the shallowest and deepest point the plan makes IRIs at.
    const iriStep: Record<string, number> = {};
    const iriBatch: Record<string, number> = {};
    const order = front.model.stitchPoints.map((p) => p.name);
    const irisPoints = [...new Set(irisTasks.map((i) => i.point))].sort((x, y) => order.indexOf(x) - order.indexOf(y));
    const probed = [...new Set([irisPoints[0], irisPoints.at(-1)])].filter((p): p is string => p !== undefined);
    for (const point of probed) {
      const spec = irisTasks.find((i) => i.point === point) as IrisTask;
      const batch = first(train, spec.options.batchSize);
      owned.push(batch);
      const scale = spec.options.batchSize / datasetSize(batch);
      const norm = requireNormalization(front.record, "the front");
      const run = (steps: number) =>
        timed(() => {
          const out = generateIriBatch(
            front.model,
            point,
            batch.images.to(device),
            norm,
            { ...spec.options, steps },
            0,
          );
          out.images.dispose();
        })[1];
      run(1); // warm-up
      const one = run(1);
      const k = 2;
      const more = run(1 + k);
      const step = Math.max(0, (more - one) / k);
      iriStep[point] = step * scale;
      iriBatch[point] = Math.max(0, one - step) * scale;
    }

    // Stitching steps, per mode, at the configured batch (two epochs of two batches).
    const stepsOf = (mode: "standard" | "iris") => {
      const bs = Math.min(c.batchSize, Math.floor(datasetSize(train) / 2) || 1);
      const sub = first(train, 2 * bs);
      owned.push(sub);
      const s = new StitchedModel(front.model, back.model, c.frontPoint, c.backPoint, {
        tail: mode === "standard" ? tail.model : back.model,
        normalization: {
          front: requireNormalization(front.record, "the front"),
          back: requireNormalization(back.record, "the back"),
        },
      });
      s.layer.to(device);
      const stamps: number[] = [];
      const t0 = now();
      try {
        trainStitch(
          s,
          sub,
          train,
          {
            objective: parseObjective(c.objective),
            normalization: pixelScale(sub.images.shape[1]),
            epochs: 2,
            batchSize: bs,
            ...recipeOf(c),
            seed: 0,
            bnMode: mode === "standard" ? "adapt" : "eval",
            init: c.init,
            initImages: c.initImages,
            augment: mode === "standard" ? standardAugment(sub.images.shape[2]) : null,
            markers: null,
            initMarkers: null,
            device,
            adversarial: null,
          },
          () => stamps.push(now()),
        );
        const step = stamps.length > 1 ? (stamps[stamps.length - 1] - stamps[0]) / (stamps.length - 1) : 0;
        const before = stamps[0] - t0 - step;
        // Score on a part of the test set (standard mode only: the same network either way).
        let score = 0;
        if (mode === "standard") {
          const part = first(test, 256);
          owned.push(part);
          const o = { normalization: pixelScale(part.images.shape[1]), device };
          // As runStitch scores: one pass of A and B (CKA's features on every image here, an upper
          // bound), then the stitched model against B's kept logits.
          const [before, a] = timed(() => frontAndBack(s, part, { ...o, ckaImages: datasetSize(part) }));
          try {
            const [, b] = timed(() => evaluateStitch(s, part, { ...o, backLogits: before.backLogits }));
            score = (a + b) / datasetSize(part);
          } finally {
            before.backLogits.dispose();
          }
        }
        return { step: (step * c.batchSize) / bs, before, images: datasetSize(sub), score };
      } finally {
        s.layer.dispose();
      }
    };
    const standard = stepsOf("standard");
    const iris = stepsOf("iris");
    return {
      loadModel,
      loadTrain,
      loadTest,
      iriStep,
      iriBatch,
      stitchStep: { standard: standard.step, iris: iris.step },
      leastSquares: Math.max(0, standard.before),
      frozenPerImage: Math.max(0, iris.before - standard.before) / iris.images,
      scorePerImage: standard.score,
      trainCount: datasetSize(train),
      seconds: now() - started,
    };
  } finally {
    for (const d of owned) disposeDataset(d);
    for (const m of models) m.dispose();
  }
}

/** Per-step cost at a point by linear interpolation (in network order) between the probed points. */
function atPoint(probed: Record<string, number>, point: string, order: string[]): number {
  const known = Object.keys(probed).sort((x, y) => order.indexOf(x) - order.indexOf(y));
  if (known.includes(point) || known.length < 2) return probed[point] ?? probed[known[0]] ?? 0;
  const [lo, hi] = [known[0], known[known.length - 1]];
  const f = (order.indexOf(point) - order.indexOf(lo)) / Math.max(1, order.indexOf(hi) - order.indexOf(lo));
  return probed[lo] + Math.min(1, Math.max(0, f)) * (probed[hi] - probed[lo]);
}

/** The tasks of the plan not in the cache, each costed from the probe's times. */
export function estimateFrom(plan: Plan, cache: string, p: ProbeTimes, order: string[]): Estimate {
  const trainCount = p.trainCount;
  const todo = plan.tasks.filter((t) => !isDone(cache, t.key));
  const iris = { tasks: 0, seconds: 0 };
  const stitch = { tasks: 0, seconds: 0 };
  const irisSize = new Map<string, number>();
  for (const t of plan.tasks)
    if (t.spec.kind === "iris") irisSize.set(t.key, Math.min(t.spec.limit ?? trainCount, trainCount));
  for (const t of todo) {
    const s = t.spec;
    if (s.kind === "iris") {
      const n = irisSize.get(t.key) ?? trainCount;
      const batches = n / s.options.batchSize;
      iris.tasks++;
      iris.seconds +=
        p.loadModel +
        p.loadTrain +
        batches * (s.options.steps * atPoint(p.iriStep, s.point, order) + atPoint(p.iriBatch, s.point, order));
    } else if (s.kind === "stitch") {
      const c = s.config;
      const mode = stitchModeOf(c.mode);
      const n =
        mode === "iris" && s.iris ? (irisSize.get(s.iris) ?? trainCount) : Math.min(c.limit ?? trainCount, trainCount);
      const steps = Math.floor(n / c.batchSize) * c.epochs;
      const test = c.testLimit ?? 10000;
      stitch.tasks++;
      stitch.seconds +=
        p.loadModel * (mode === "standard" ? 3 : 2) +
        p.loadTrain +
        p.loadTest +
        p.leastSquares +
        (mode === "standard" ? steps * p.stitchStep.standard : n * p.frozenPerImage + steps * p.stitchStep.iris) +
        p.scorePerImage * test;
    } else throw new Error("the estimate covers checkpoints only (this plan trains models)");
  }
  return { seconds: iris.seconds + stitch.seconds, iris, stitch, probe: p };
}

/** Probes (when any task is left to run) and estimates the plan's time on this machine. */
export async function estimatePlan(plan: Plan, cache: string, device: Device): Promise<Estimate> {
  const todo = plan.tasks.filter((t) => !isDone(cache, t.key));
  if (!todo.length)
    return { seconds: 0, iris: { tasks: 0, seconds: 0 }, stitch: { tasks: 0, seconds: 0 }, probe: null };
  const p = await probePlan(plan, device);
  const stitch = plan.tasks.map((t) => t.spec).find((s): s is StitchTask => s.kind === "stitch");
  const back = stitch ? loadCheckpoint(sourceOf(stitch.back)) : null;
  const order = back ? back.model.stitchPoints.map((x) => x.name) : [];
  back?.model.dispose();
  return estimateFrom(plan, cache, p, order);
}

/** A duration as people read it: 45 s, 3 min 20 s, 1 h 5 min. */
export function formatDuration(s: number): string {
  if (s < 90) return `${Math.max(1, Math.round(s))} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}
