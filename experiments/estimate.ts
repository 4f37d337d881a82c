// How long a plan's tasks will take on this machine, from a short timed probe on the actual
// models (`stitchlab compare` prints it before it starts): a few IRI descent steps at the
// shallowest and deepest point, a few stitching steps in each mode, the least-squares start, the
// scoring, and the loading of models and data, each timed, then scaled by the plan's counts:
//   IRI task    = load front + load data + images x (steps x step(point) + batch overhead) / batch
//   stitch task = load models + load data + least squares + (standard: epochs x steps x step;
//                 invariance-aware: A and B over the IRIs once + epochs x steps x frozen step)
//                 + scoring (test images x (stitched + A alone) + CKA images)
// Steps are timed at the configured batch where a step is cheap (a small model's step is far from
// linear in the batch: on 2 cores an IRI step of a width-1/16 ResNet-18 on 128 images took 7 times
// one on 32, so a smaller probe batch under-estimated by about 2), and at 16 images, scaled, where
// it is not (at full width a step is linear in the batch and takes seconds). A tight IRI descent
// (the IRI setting target) is costed halfway between `steps` and its cap per image (iriSteps). Trained models (train tasks) are not probed: the estimate covers
// checkpoints. The probe's times are kept in the cache (probes/), so a run after its dry run, or
// another run on the same models and settings, does not probe again; `compare --budget` costs its
// candidate settings from the one probe (estimateFrom on each re-planned experiment).
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { type Dataset, datasetSize, disposeDataset, type Normalization, pixelScale, subset } from "../data/index.js";
import { readJsonFile, writeFileAtomic } from "../io/files.js";
import { asModelSource, loadCheckpoint, type ModelSource, type ModelSourceLike } from "../models/checkpoint.js";
import { requireNormalization } from "../models/record.js";
import type { StitchableModel } from "../models/stitchable.js";
import { type StitchConfig, stitchModeOf } from "../stitch/config.js";
import { evaluateStitch, frontAndBack } from "../stitch/evaluate.js";
import { type IriOptions, iriStepCap } from "../stitch/iri-options.js";
import { generateIriBatch } from "../stitch/iris.js";
import { loadSource, stitchedModelOf, stitchTrainOptionsOf } from "../stitch/jobs.js";
import { trainStitch } from "../stitch/train.js";
import type * as torch from "../torch/index.js";
import { type Device, getNumThreads, onednnIsa } from "../torch/index.js";
import { isDone } from "./cache.js";
import type { IrisTask, ModelRef, Plan, StitchTask, TaskSpec } from "./plan.js";

/** What the probe measured, in seconds. */
export interface ProbeTimes {
  loadModel: number;
  loadTrain: number;
  loadTest: number;
  /** One IRI descent step on a batch of iriImages images, at the probed points (by point name). */
  iriStep: Record<string, number>;
  /** Per IRI batch of iriImages images besides its steps (targets, start, quantising, writing). */
  iriBatch: Record<string, number>;
  /** The images of the batch iriStep and iriBatch are for (the configured batch, or fewer where the training images are fewer). */
  iriImages: number;
  /**
   * Descent steps per image of a tight descent (the IRI setting target), by front (frontKey) and
   * point, from a short run of the descent itself on a few images (probeDescent); absent where the
   * settings give no target, or in a probe kept from before it was measured.
   */
  iriDescent?: Record<string, Record<string, number>>;
  /** One stitching step on a batch of stitchImages images, per mode. */
  stitchStep: { standard: number; iris: number };
  /** The batch stitchStep is for (the probed plan's). */
  stitchImages: number;
  /** A and B over one training image, once per invariance-aware stitch (its frozen features). */
  frozenPerImage: number;
  leastSquares: number;
  /** The real images leastSquares is for. */
  leastSquaresImages: number;
  /** Scoring one test image: A and B once (with CKA's features), then the stitched model. */
  scorePerImage: number;
  /** Training images the tasks can read (the split's size, or more than the largest limit). */
  trainCount: number;
  /** The probe's own time. */
  seconds: number;
  /** Read from the cache, not measured now (a probe of the same models and settings on this machine). */
  reused?: boolean;
}

export interface Estimate {
  /** Seconds for the tasks still to run. */
  seconds: number;
  /** Each task's seconds, by key: where the run's progress starts its time left from (cli/run-progress.ts). */
  tasks: Record<string, number>;
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

/**
 * The stitches a probe may time: those between checkpoints. A null front made by the plan (compare
 * --nulls: A's architecture at epoch 0) is A's architecture, so its stitches cost as A's do.
 */
const betweenCheckpoints = (specs: TaskSpec[]): StitchTask[] =>
  specs.filter((s): s is StitchTask => s.kind === "stitch" && !("task" in s.front) && !("task" in s.back));

const sourceOf = (ref: ModelRef): ModelSource => {
  if ("task" in ref) throw new Error("the estimate covers checkpoints only (this plan trains models)");
  const { sha256: _s, ...source } = ref;
  return source;
};

/** A front's identity in ProbeTimes.iriDescent. */
export const frontKey = (ref: ModelRef): string => JSON.stringify(sourceOf(ref));

/** Stops a descent the probe has seen enough of. */
class DescentProbeStop extends Error {}

/** Images a descent probe runs on, and the seconds it may take at each (front, point). */
export const DESCENT_PROBE_IMAGES = 6;
export const DESCENT_PROBE_S = 2.5;

/**
 * Mean descent steps per image of the plan's own tight descent on a few images (x: uint8), run
 * until every image is tight or capped, or for `budget` seconds. Where it ran to its end, the
 * images' own counts; where it was stopped after K steps, those that were tight by then count the
 * steps they had, and each still descending is costed halfway between K and the cap (all that is
 * known of it: it needs more than K). The descent's length is the model's: at layer4.1 two
 * full-width ResNet-18s trained by stitchlab needed 369 and 522 steps per image, two trained in
 * plain PyTorch 241 and 298, and a pair trained elsewhere so few that a fixed guess of 400 put the
 * estimate at 1.84x the real time.
 */
export function descentSteps(active: number[], finished: Int32Array | null, cap: number): number {
  if (finished) return finished.reduce((a, b) => a + b, 0) / Math.max(1, finished.length);
  const m = active[0] ?? 0;
  if (!m) return cap;
  const k = active.length;
  let sum = 0;
  // a_s - a_{s+1} images left the descent tight after s steps.
  for (let s = 0; s + 1 < k; s++) sum += s * ((active[s] as number) - (active[s + 1] as number));
  sum += (active[k - 1] as number) * ((k + cap) / 2);
  return sum / m;
}

function probeDescent(
  model: StitchableModel,
  point: string,
  x: torch.Tensor,
  norm: Normalization,
  options: IriOptions,
  budget: number,
): number {
  const active: number[] = [];
  const t0 = now();
  try {
    const out = generateIriBatch(model, point, x, norm, options, 0, (_step, _residual, n) => {
      active.push(n);
      if (now() - t0 > budget) throw new DescentProbeStop();
    });
    out.images.dispose();
    return descentSteps(active, out.steps, iriStepCap(options));
  } catch (e) {
    if (!(e instanceof DescentProbeStop)) throw e;
    return descentSteps(active, null, iriStepCap(options));
  }
}

/** Images to run steps on: the first n of a dataset. */
const first = (ds: Dataset, n: number): Dataset =>
  subset(
    ds,
    Array.from({ length: Math.min(n, datasetSize(ds)) }, (_, i) => i),
  );

/** A step's time at `batch` images, from steps timed at `probe` images (linear in the images: see probeBatch). */
const scaled = (seconds: number, probe: number, batch: number) => (seconds * batch) / probe;

/**
 * The batch to time steps at: the configured one where a step is cheap (small models, where a
 * step's time is far from linear in the batch: on 2 cores an IRI step of a width-1/16 ResNet-18
 * on 128 images took 7 times one on 32), else PROBE_BATCH images, scaled (a full-width step is
 * linear in the batch, and one at the configured batch would take seconds).
 */
function probeBatch(warmStep: number, warmBatch: number, batch: number): number {
  return scaled(warmStep, warmBatch, batch) <= CHEAP_STEP_S ? batch : Math.min(batch, PROBE_BATCH);
}
const PROBE_BATCH = 16;
const CHEAP_STEP_S = 0.25;

/**
 * Times the pieces of the plan's tasks on its models (the first stitch task's front and back),
 * through the code the tasks run (stitch/jobs.ts's stitchedModelOf and stitchTrainOptionsOf, so
 * the batch-norm mode, augmentation and data follow the task's config): a few IRI steps at the
 * shallowest and deepest point, a few stitching steps per mode, the least-squares start on a few
 * images, and the scoring of a few test images. About 10 s at full width on 2 cores.
 */
export async function probePlan(plan: Plan, device: Device): Promise<ProbeTimes> {
  const started = now();
  const specs = plan.tasks.map((t) => t.spec);
  const stitch = betweenCheckpoints(specs).find((s) => s.front !== s.back) ?? betweenCheckpoints(specs)[0];
  if (!stitch) throw new Error("nothing to estimate: the plan has no stitch task");
  // The IRI sets of that stitch's front: its points are in its own list (across architectures the
  // control's front, B, has other names).
  const allIris = specs.filter((s): s is IrisTask => s.kind === "iris");
  const sameFront = allIris.filter((i) => JSON.stringify(i.front) === JSON.stringify(stitch.front));
  const irisTasks = sameFront.length ? sameFront : allIris;
  const c = stitch.config;
  const owned: Dataset[] = [];
  const loaded: ReturnType<typeof loadCheckpoint>[] = [];
  let loadModel = 0;
  const load = (source: ModelSourceLike) => {
    const [l, t] = timed(() => loadCheckpoint(source));
    loadModel = Math.max(loadModel, t);
    l.model.to(device);
    loaded.push(l);
    return l;
  };
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
    const test = await loadSource({ ...src, limit: Math.min(c.testLimit ?? 64, 64) }, "test");
    const loadTest = now() - t;
    owned.push(test);

    // IRI steps at the shallowest and deepest point the plan makes IRIs at, timed by the descent's
    // own step callback (the first step, which sets up the kernels, is not counted). A tight
    // descent's steps cost as a plain one's (estimateFrom costs it at iriSteps per image).
    const front = load(sourceOf(stitch.front));
    const iriStep: Record<string, number> = {};
    const iriBatch: Record<string, number> = {};
    const order = front.model.stitchPoints.map((p) => p.name);
    const irisPoints = [...new Set(irisTasks.map((i) => i.point))].sort((x, y) => order.indexOf(x) - order.indexOf(y));
    const probed = [...new Set([irisPoints[0], irisPoints.at(-1)])].filter((p): p is string => p !== undefined);
    const norm = requireNormalization(front.record, "the front");
    const iriImages = Math.min(irisTasks[0]?.options.batchSize ?? 1, datasetSize(train));
    for (const point of probed) {
      const spec = irisTasks.find((i) => i.point === point) as IrisTask;
      const { target: _t, maxSteps: _m, ...plain } = spec.options;
      const bs = iriImages;
      const run = (n: number, steps: number) => {
        const batch = first(train, n);
        owned.push(batch);
        const stamps: number[] = [];
        const t0 = now();
        const out = generateIriBatch(front.model, point, batch.images.to(device), norm, { ...plain, steps }, 0, () =>
          stamps.push(now()),
        );
        out.images.dispose();
        const total = now() - t0;
        const step = stamps.length > 2 ? (stamps[stamps.length - 1] - stamps[1]) / (stamps.length - 2) : total;
        return { step, total, n: datasetSize(batch) };
      };
      const warm = run(Math.min(bs, 4), 2);
      const n = probeBatch(warm.step, warm.n, bs);
      const timedRun = run(n, 3);
      iriStep[point] = scaled(timedRun.step, timedRun.n, bs);
      iriBatch[point] = scaled(Math.max(0, timedRun.total - 3 * timedRun.step), timedRun.n, bs);
    }

    // The descent's own length, per front and point (probeDescent): a step's time says nothing
    // of how many steps a tight descent takes, and that differs by model more than by anything else.
    const iriDescent: Record<string, Record<string, number>> = {};
    const byFront = new Map<string, IrisTask[]>();
    for (const i of allIris)
      if (i.options.target !== undefined && !("task" in i.front))
        byFront.set(frontKey(i.front), [...(byFront.get(frontKey(i.front)) ?? []), i]);
    for (const [key, tasks] of byFront) {
      const m = key === frontKey(stitch.front) ? front : load(sourceOf((tasks[0] as IrisTask).front));
      const own = m.model.stitchPoints.map((q) => q.name);
      const points = [...new Set(tasks.map((i) => i.point))].sort((x, y) => own.indexOf(x) - own.indexOf(y));
      const few = first(train, DESCENT_PROBE_IMAGES);
      owned.push(few);
      const x = few.images.to(device);
      try {
        iriDescent[key] = {};
        for (const point of new Set([points[0], points.at(-1)].filter((q): q is string => q !== undefined))) {
          const spec = tasks.find((i) => i.point === point) as IrisTask;
          iriDescent[key][point] = probeDescent(
            m.model,
            point,
            x,
            requireNormalization(m.record, "the front"),
            spec.options,
            DESCENT_PROBE_S,
          );
        }
      } finally {
        if (x !== few.images) x.dispose();
      }
    }

    // Stitching steps, per mode, as the task trains: three steps of one epoch (the first not
    // counted); the least-squares start on as many images, scaled to the config's.
    const stepsOf = (mode: "standard" | "iris") => {
      // A noise-cluster null's steps skip the front: the probe times a real front's.
      const all = betweenCheckpoints(specs).filter((x) => stitchModeOf(x.config.mode) === mode);
      const ofMode = all.some((x) => !x.config.noiseClusters) ? all.filter((x) => !x.config.noiseClusters) : all;
      const task = ofMode.find((x) => x.front !== x.back) ?? ofMode[0];
      if (!task) return { step: 0, before: 0, lstsqImages: 1, images: 1, score: 0 };
      // The task's own config; its IRIs stand in as real images of the same shape (the probe
      // times steps, not what they learn).
      const cfg: StitchConfig = {
        ...task.config,
        front: sourceOf(task.front),
        back: sourceOf(task.back),
        iris: null,
        device,
      };
      const { s } = stitchedModelOf(cfg, load);
      try {
        const bs = Math.min(c.batchSize, Math.floor(datasetSize(train) / 3) || 1);
        const cheap = probeBatch(iriStep[probed.at(-1) as string] ?? 0, c.batchSize, bs);
        const sub = first(train, 3 * cheap);
        owned.push(sub);
        const px = pixelScale(sub.images.shape[1]);
        const opts = {
          ...stitchTrainOptionsOf(cfg, sub, sub, px, null, null),
          epochs: 1,
          batchSize: cheap,
          initImages: Math.min(c.initImages, datasetSize(sub)),
        };
        const stamps: number[] = [];
        const t0 = now();
        trainStitch(s, sub, sub, opts, () => stamps.push(now()));
        const step = stamps.length > 1 ? (stamps[stamps.length - 1] - stamps[0]) / (stamps.length - 1) : 0;
        const before = Math.max(0, stamps[0] - t0 - step);
        // Score on the test images (standard mode only: the same network either way), as
        // runStitch scores: one pass of A and B (CKA's features on every image here, an upper
        // bound), then the stitched model against B's kept logits.
        let score = 0;
        if (mode === "standard") {
          const o = { normalization: px, device };
          const [kept, a] = timed(() => frontAndBack(s, test, { ...o, ckaImages: datasetSize(test) }));
          try {
            const [, b] = timed(() => evaluateStitch(s, test, { ...o, backLogits: kept.backLogits }));
            score = (a + b) / datasetSize(test);
          } finally {
            kept.backLogits.dispose();
          }
        }
        return {
          step: scaled(step, cheap, c.batchSize),
          before,
          lstsqImages: opts.initImages,
          images: datasetSize(sub),
          score,
        };
      } finally {
        s.layer.dispose();
        s.noise?.dispose();
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
      iriImages,
      iriDescent,
      stitchStep: { standard: standard.step, iris: iris.step },
      stitchImages: c.batchSize,
      leastSquares: (standard.before * leastSquaresImages(c, datasetSize(train))) / Math.max(1, standard.lstsqImages),
      leastSquaresImages: leastSquaresImages(c, datasetSize(train)),
      frozenPerImage: Math.max(0, iris.before - standard.before) / iris.images,
      scorePerImage: standard.score,
      trainCount: datasetSize(train),
      seconds: now() - started,
    };
  } finally {
    for (const d of owned) disposeDataset(d);
    for (const m of loaded) m.model.dispose();
  }
}

/** The real images a stitch's least-squares start reads: min(initImages, the images the task loads), as trainStitch does. */
const leastSquaresImages = (c: Pick<StitchConfig, "initImages" | "limit">, trainCount: number): number =>
  Math.min(c.initImages, c.limit ?? trainCount, trainCount);

/** Per-step cost at a point by linear interpolation (in network order) between the probed points. */
function atPoint(probed: Record<string, number>, point: string, order: string[]): number {
  const known = Object.keys(probed).sort((x, y) => order.indexOf(x) - order.indexOf(y));
  if (known.includes(point) || known.length < 2) return probed[point] ?? probed[known[0]] ?? 0;
  // A point of another architecture's list (the control's, across architectures): the probed mean.
  if (!order.includes(point) || known.some((k) => !order.includes(k)))
    return known.reduce((sum, k) => sum + (probed[k] as number), 0) / known.length;
  const [lo, hi] = [known[0], known[known.length - 1]];
  const f = (order.indexOf(point) - order.indexOf(lo)) / Math.max(1, order.indexOf(hi) - order.indexOf(lo));
  return probed[lo] + Math.min(1, Math.max(0, f)) * (probed[hi] - probed[lo]);
}

/** An IRI task's steps per image: the probe's run of its front's descent where it has one, else iriSteps. */
function descentFor(p: ProbeTimes, s: IrisTask, order: string[]): number {
  const byPoint = "task" in s.front ? undefined : p.iriDescent?.[frontKey(s.front)];
  if (s.options.target === undefined || !byPoint || !Object.keys(byPoint).length) return iriSteps(s.options);
  return atPoint(byPoint, s.point, order);
}

/**
 * The steps an IRI descent is costed at per image where no probe ran it: `steps`; a tight one (the setting target)
 * halfway between `steps` and its cap, since its early stops and restarts are not known before it
 * runs. Measured on two full-width ResNet-18s (bench compare-full): 18-21 steps per image at
 * layer2.1, 463 at layer4.1 (cap 600), against 400 costed for each.
 */
export function iriSteps(o: Pick<IriOptions, "steps" | "target" | "maxSteps">): number {
  return (o.steps + iriStepCap(o)) / 2;
}

/**
 * The test images an estimate counts where a plan scores on all of them: the test splits of the
 * datasets stitchlab reads hold 10,000 (CIFAR-10, Fashion-MNIST, MNIST; ImageNet-100's 5,000
 * validation images make it an upper bound there).
 */
export const ALL_TEST_IMAGES = 10_000;

/**
 * The tasks of the plan not in the cache, each costed from the probe's times. The plan need not be
 * the probed one (compare --budget costs re-planned experiments from one probe): a step's time is
 * taken as linear in its batch's images (true at full width, where time matters; an over-estimate
 * for a small model's smaller batch), so steps are costed per image of the batch the probe timed,
 * and an IRI set of fewer images than its batch is one batch of those images.
 */
export function estimateFrom(plan: Plan, cache: string, p: ProbeTimes, order: string[]): Estimate {
  const trainCount = p.trainCount;
  const todo = plan.tasks.filter((t) => !isDone(cache, t.key));
  const iris = { tasks: 0, seconds: 0 };
  const stitch = { tasks: 0, seconds: 0 };
  const tasks: Record<string, number> = {};
  // Null fronts' builds (compare --nulls): in the total, under neither kind.
  let builds = 0;
  const irisSize = new Map<string, number>();
  for (const t of plan.tasks)
    if (t.spec.kind === "iris") irisSize.set(t.key, Math.min(t.spec.limit ?? trainCount, trainCount));
  for (const t of todo) {
    const s = t.spec;
    if (s.kind === "iris" && s.noiseClusters) {
      // The labels-only sender's IRIs are their starts: no descent, the loads alone.
      iris.tasks++;
      tasks[t.key] = p.loadModel + p.loadTrain;
      iris.seconds += tasks[t.key] as number;
    } else if (s.kind === "iris") {
      const n = irisSize.get(t.key) ?? trainCount;
      const perImage =
        (descentFor(p, s, order) * atPoint(p.iriStep, s.point, order) + atPoint(p.iriBatch, s.point, order)) /
        p.iriImages;
      iris.tasks++;
      tasks[t.key] = p.loadModel + p.loadTrain + n * perImage;
      iris.seconds += tasks[t.key] as number;
    } else if (s.kind === "stitch") {
      const c = s.config;
      const mode = stitchModeOf(c.mode);
      const n =
        mode === "iris" && s.iris ? (irisSize.get(s.iris) ?? trainCount) : Math.min(c.limit ?? trainCount, trainCount);
      const steps = Math.floor(n / c.batchSize) * c.epochs;
      const test = c.testLimit ?? ALL_TEST_IMAGES;
      const perStep = c.batchSize / p.stitchImages;
      stitch.tasks++;
      tasks[t.key] =
        p.loadModel * (mode === "standard" ? 3 : 2) +
        p.loadTrain +
        p.loadTest +
        (p.leastSquares * leastSquaresImages(c, trainCount)) / Math.max(1, p.leastSquaresImages) +
        (mode === "standard"
          ? steps * perStep * p.stitchStep.standard
          : n * p.frozenPerImage + steps * perStep * p.stitchStep.iris) +
        p.scorePerImage * test;
      stitch.seconds += tasks[t.key] as number;
    } else if (s.kind === "train" && s.config.epochs === 0) {
      // A null front at its initialisation: built, and scored once on the test set.
      tasks[t.key] = p.loadModel + p.loadTrain + p.loadTest + p.scorePerImage * (s.config.testLimit ?? ALL_TEST_IMAGES);
      builds += tasks[t.key] as number;
    } else throw new Error("the estimate covers checkpoints only (this plan trains models)");
  }
  return { seconds: iris.seconds + stitch.seconds + builds, tasks, iris, stitch, probe: p };
}

/** The probe's times kept for these models, settings and machine, or null (experiments/estimate.ts's header). */
function probeKey(plan: Plan, device: Device): string {
  const specs = plan.tasks.map((t) => t.spec);
  const models = (ref: ModelRef) => {
    const src = sourceOf(ref);
    const file = asModelSource(src).checkpoint;
    const st = existsSync(file) ? statSync(file) : null;
    return { src, size: st?.size ?? null, mtime: st?.mtimeMs ?? null };
  };
  const stitches = betweenCheckpoints(specs);
  const what = {
    probe: 6,
    models: [...new Set(stitches.flatMap((s) => [JSON.stringify(models(s.front)), JSON.stringify(models(s.back))]))],
    // The descent's settings too: the probe measures how many steps it takes (iriDescent).
    iris: specs
      .filter((s): s is IrisTask => s.kind === "iris")
      .map((s) => {
        const { seed: _s, ...options } = s.options as IrisTask["options"] & { seed?: number };
        return [s.point, s.limit, options];
      }),
    stitch: stitches.map((s) => {
      const { seed: _s, ...config } = s.config;
      return config;
    }),
    device,
    threads: getNumThreads(),
    isa: onednnIsa(),
  };
  return createHash("sha256").update(JSON.stringify(what)).digest("hex").slice(0, 20);
}

/** A probe's times and B's stitch points in network order (estimateFrom interpolates between the probed ones). */
export interface KeptProbe {
  probe: ProbeTimes;
  order: string[];
}

/**
 * The probe of the plan's models and settings on this machine: the one kept in the cache, or a new
 * one, then kept (null when every task is in the cache: nothing to time). `onProbe` is told before
 * a probe starts (it takes seconds), so that the wait is announced.
 */
export async function probeFor(
  plan: Plan,
  cache: string,
  device: Device,
  onProbe: () => void = () => {},
): Promise<KeptProbe | null> {
  if (plan.tasks.every((t) => isDone(cache, t.key))) return null;
  const kept = join(cache, "probes", `${probeKey(plan, device)}.json`);
  let probe: ProbeTimes;
  if (existsSync(kept)) probe = { ...readJsonFile<ProbeTimes>(kept, "a kept probe"), reused: true };
  else {
    onProbe();
    probe = await probePlan(plan, device);
    mkdirSync(dirname(kept), { recursive: true });
    writeFileAtomic(kept, [`${JSON.stringify(probe, null, 2)}\n`]);
  }
  const stitch = betweenCheckpoints(plan.tasks.map((t) => t.spec))[0];
  const back = stitch ? loadCheckpoint(sourceOf(stitch.back)) : null;
  const order = back ? back.model.stitchPoints.map((x) => x.name) : [];
  back?.model.dispose();
  return { probe, order };
}

/** The plan's time on this machine, from its probe (probeFor). */
export async function estimatePlan(
  plan: Plan,
  cache: string,
  device: Device,
  onProbe: () => void = () => {},
): Promise<Estimate> {
  const kept = await probeFor(plan, cache, device, onProbe);
  if (!kept)
    return { seconds: 0, tasks: {}, iris: { tasks: 0, seconds: 0 }, stitch: { tasks: 0, seconds: 0 }, probe: null };
  return estimateFrom(plan, cache, kept.probe, kept.order);
}

/** A duration as people read it: 45 s, 3 min 20 s, 1 h 5 min. */
export function formatDuration(s: number): string {
  if (s < 90) return `${Math.max(1, Math.round(s))} s`;
  // Rounded to the unit shown first, so that 3599.7 s reads 1 h 0 min, not 59 min 60 s.
  const seconds = Math.round(s);
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
  const minutes = Math.round(s / 60);
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}
