// The planner: an experiment becomes a graph of tasks, train -> iris -> stitch, each under a key
// that hashes its settings and its inputs' keys (never names or paths), so two experiments that
// need the same model or the same IRI set share one cache entry. A stitch task trains T and
// scores it (stitch/jobs.ts runStitch): scoring needs the trained T in memory and costs seconds,
// so it is the last step of its stitch task rather than a task of its own. The report is drawn
// from every stitch task's scores after the graph has run.
import { existsSync } from "node:fs";
import { dirname, isAbsolute, resolve } from "node:path";
import { datasetClassCount } from "../data/registry.js";
import { isNoiseNull } from "../findings/chance.js";
import { sha256File } from "../io/files.js";
import type { ModelSource } from "../models/checkpoint.js";
import { isOnnxFile, isStitchlabCheckpoint, sidecarPath } from "../models/checkpoint.js";
import { builtModelFacts, loadedModelFacts, type ModelFacts } from "../models/facts.js";
import { isHubName, resolveModelSource } from "../models/hub.js";
import type { ModelOptions } from "../models/registry.js";
import { HEAD_POINT, type StitchPoint } from "../models/stitchable.js";
import {
  backClassesProblem,
  formatObjective,
  type IrisConfig,
  parseObjective,
  resolveIrisConfig,
  resolveStitchConfig,
  type StitchConfig,
} from "../stitch/config.js";
import { stitchMismatch } from "../stitch/layer.js";
import { resolveTrainConfig, type TrainConfig } from "../train/config.js";
import { checkBuildMemory } from "../train/memory.js";
import { type TaskKind, taskKey } from "./cache.js";
import { pairFrontName, withNulls } from "./nulls.js";
import { type Experiment, ExperimentError, isLoaded, type ModelSpec } from "./spec.js";

export type { TaskKind } from "./cache.js";

/**
 * A model as a task input: made by a train task, or a file identified by its bytes, with how to
 * read it when it is not a stitchlab checkpoint (architecture, options, input statistics: these
 * enter the key; the path does not).
 */
export type ModelRef = { task: string } | ({ sha256: string } & ModelSource);

export interface TrainTask {
  kind: "train";
  config: TrainConfig;
}
/** A task's spec holds its job's resolved config (less where it runs), so the key hashes every setting. */
export type IrisTask = { kind: "iris"; front: ModelRef } & Omit<IrisConfig, "front" | "device">;
export interface StitchTask {
  kind: "stitch";
  front: ModelRef;
  back: ModelRef;
  iris: string | null;
  config: Omit<StitchConfig, "front" | "back" | "iris" | "device">;
}
export type TaskSpec = TrainTask | IrisTask | StitchTask;

export interface Task {
  key: string;
  kind: TaskKind;
  deps: string[];
  label: string;
  spec: TaskSpec;
}

/** What a stitch task is in the experiment's terms (not part of its key). */
export interface StitchRole {
  key: string;
  front: string;
  back: string;
  relation: string;
  /** The back's stitch point (where the verdict and the report place the row). */
  point: string;
  /** The front's, where it is another (a front of another architecture: the pair's frontPoints). */
  frontPoint?: string;
  pointIndex: number;
  objective: string;
  mode: "standard" | "iris";
  /** The stitching seed as the file gives it (the task uses seed + REPLICATE_SEED_STRIDE replicate). */
  seed: number;
  /** 0-based replicate (front models, IRI and stitching seeds of their own). */
  replicate: number;
  irisKey: string | null;
}

/** Seeds of replicate r: the file's seed + REPLICATE_SEED_STRIDE r (models, IRI starts, stitching). */
export const REPLICATE_SEED_STRIDE = 1000;

const rep = (r: number) => (r > 0 ? ` rep ${r}` : "");

export interface Plan {
  experiment: Experiment;
  /** Every task, dependencies before dependants. */
  tasks: Task[];
  stitches: StitchRole[];
  /** Model name -> its reference (train task or checkpoint). */
  models: Record<string, ModelRef>;
  /** What a model's file means for the run, printed with the plan (an ONNX graph whose batch norm was folded). */
  notes: string[];
}

/**
 * Stitch point names of a model spec (a model is built to ask it, then freed). Checkpoints are
 * loaded here, stitchlab's own included, so a file that is broken, does not fit its architecture
 * or holds non-finite values is refused before any work (and by --dry-run).
 */
function pointNames(
  spec: ModelSpec,
  baseDir: string,
): {
  arch: string;
  points: string[];
  shapes: Record<string, StitchPoint>;
  headRefused: string | null;
  numClasses: number;
  note: string | null;
} {
  // Read once per file or recipe and kept (models/facts.ts): a plan is made once per --budget candidate.
  let facts: ModelFacts;
  if (isLoaded(spec)) {
    facts = loadedModelFacts({
      ...spec,
      checkpoint: isHubName(spec.checkpoint) ? spec.checkpoint : resolve(baseDir, spec.checkpoint),
    });
  } else {
    const options = {
      ...(spec.options as ModelOptions),
      ...(spec.width !== undefined ? { width: spec.width } : {}),
    };
    // Not built when its weights alone would not fit (train/memory.ts; training's own need is
    // checked where the run's device is known: experiments/run.ts).
    checkBuildMemory(spec.arch, options, "its width");
    facts = builtModelFacts(spec.arch, options);
  }
  const points = facts.points.map((p) => p.name);
  const shapes = Object.fromEntries(
    [...facts.points, ...(facts.head ? [facts.head] : [])].map((p) => [p.name, p] as const),
  );
  return {
    arch: facts.arch,
    points,
    shapes,
    headRefused: facts.headRefused,
    numClasses: facts.numClasses,
    note: facts.batchNormNote,
  };
}

/** The graph as it is built: its tasks by key, and the problems found so far (reported at once). */
export interface PlanContext {
  tasks: Map<string, Task>;
  problems: string[];
}

/** Adds a task under its key (a task two pairs share is added once) and returns the key. */
function addTask(ctx: PlanContext, t: Omit<Task, "key">): string {
  const key = taskKey(t.kind, t.spec);
  if (!ctx.tasks.has(key)) ctx.tasks.set(key, { ...t, key });
  return key;
}

/** The experiment's models as the graph holds them, with what the pairs are checked against. */
export interface PlannedModels {
  /** Model name -> its reference (train task or checkpoint). */
  refs: Record<string, ModelRef>;
  /** Each model's architecture and stitch points, with their shapes (absent: the model had a problem). */
  points: Record<
    string,
    {
      arch: string;
      points: string[];
      shapes: Record<string, StitchPoint>;
      /** Why the model has no head point (pointNames), or null; absent where not asked. */
      headRefused?: string | null;
    }
  >;
  /** Each model's class count: a checkpoint's head, or the classes of the dataset it is trained on (null: not known yet). */
  classes: Record<string, number | null>;
  /** The resolved training config of each model that is trained (replicates vary its seed). */
  trainConfigs: Record<string, TrainConfig>;
  /** Model name -> what its file means for the run (OnnxModel.batchNormNote). */
  notes: Record<string, string>;
}

/**
 * The models: a checkpoint (a hub name downloaded now, before any work) is identified by its
 * bytes, a trained model by its train task; each is built once to read its stitch points and
 * class count. A model's problem is recorded under models.<name>, and the others are planned.
 */
export function planModels(exp: Experiment, baseDir: string, ctx: PlanContext): PlannedModels {
  const data = exp.dataset;
  const m: PlannedModels = { refs: {}, points: {}, classes: {}, trainConfigs: {}, notes: {} };
  for (const [name, spec] of Object.entries(exp.models)) {
    try {
      if (isLoaded(spec)) {
        // A model named by hub: its file in the cache, read with what the hub says of it; the
        // task's key holds those facts and the file's bytes.
        const given = isHubName(spec.checkpoint) ? resolveModelSource(spec) : spec;
        const path = isAbsolute(given.checkpoint) ? given.checkpoint : resolve(baseDir, given.checkpoint);
        if (!existsSync(path)) throw new Error(`checkpoint not found: ${path}`);
        if (!isStitchlabCheckpoint(path) && !isOnnxFile(path) && !given.arch)
          throw new Error(
            `${path} is not a stitchlab checkpoint (no ${sidecarPath(path)} beside it): give arch (and normalization) for weights made elsewhere, or convert it once with stitchlab import`,
          );
        if (!isStitchlabCheckpoint(path) && given.normalization === undefined)
          throw new Error(
            `${path}: give normalization, the statistics its inputs were normalised with in training (a dataset name such as cifar10 or imagenet, or {mean, std})`,
          );
        m.refs[name] = { ...given, checkpoint: path, sha256: sha256File(path) };
      } else {
        const { dataset: own, ...settings } = spec;
        const d = own ?? data;
        const config = resolveTrainConfig(settings, {
          dataset: d.name,
          root: d.root ?? null,
          imageSize: d.imageSize ?? null,
          limit: d.limit ?? null,
          testLimit: d.testLimit ?? null,
          markerScale: d.markerScale,
        });
        // (Its device is the runner's choice at run time: experiments/tasks.ts; never in a key.)
        m.refs[name] = {
          task: addTask(ctx, { kind: "train", deps: [], label: `train ${name}`, spec: { kind: "train", config } }),
        };
        m.trainConfigs[name] = config;
      }
      const named = pointNames(spec, baseDir);
      m.points[name] = named;
      if (named.note) m.notes[name] = named.note;
      const own = isLoaded(spec) ? null : (spec.dataset ?? data);
      m.classes[name] = own ? datasetClassCount(own.name, { root: own.root }) : named.numClasses;
    } catch (e) {
      ctx.problems.push(`models.${name}: ${(e as Error).message}`);
    }
  }
  return m;
}

/**
 * A model in replicate r: replicate 0 is the model as the file gives it; replicate r > 0 of a
 * trained model that varies is the same recipe with seed + REPLICATE_SEED_STRIDE r. A checkpoint
 * cannot be retrained: every replicate shares it (they differ in IRI and stitching seeds only).
 */
function replicaRef(m: PlannedModels, ctx: PlanContext, name: string, r: number, vary: boolean): ModelRef {
  const base = m.trainConfigs[name];
  if (r === 0 || !vary || !base) return m.refs[name];
  const config = { ...base, seed: base.seed + REPLICATE_SEED_STRIDE * r };
  return {
    task: addTask(ctx, { kind: "train", deps: [], label: `train ${name} rep ${r}`, spec: { kind: "train", config } }),
  };
}

/**
 * What the experiment's lists must satisfy across pairs: seeds below the replicate stride, no
 * pair, seed, objective or point twice, objectives that parse. Returns the objectives that parse
 * (the others are problems, planned nowhere).
 */
export function checkExperiment(exp: Experiment, ctx: PlanContext): string[] {
  const { problems } = ctx;
  // Replicate r adds REPLICATE_SEED_STRIDE r to every seed, so seeds at or above the stride could
  // make one replicate's run another's (and count it twice).
  if (Math.max(exp.replicates, ...exp.pairs.map((p) => p.replicates ?? 0)) > 1) {
    const high = (what: string, seed: number | undefined) => {
      if (seed !== undefined && seed >= REPLICATE_SEED_STRIDE)
        problems.push(
          `${what}: seed ${seed} must be below ${REPLICATE_SEED_STRIDE} with replicates (replicate r adds ${REPLICATE_SEED_STRIDE} r)`,
        );
    };
    for (const [name, spec] of Object.entries(exp.models)) if (!isLoaded(spec)) high(`models.${name}.seed`, spec.seed);
    for (const [i, seed] of exp.seeds.entries()) high(`seeds[${i}]`, seed);
    high("iris.seed", exp.iris.seed);
  }

  // The same pair, seed, objective or point twice would count its runs twice (doubled rows in
  // results.csv, a summary over copies): refused, naming both places.
  const twice = <T>(what: string, items: readonly T[], key: (x: T) => string) => {
    const seen = new Map<string, number>();
    for (const [i, x] of items.entries()) {
      const k = key(x);
      const j = seen.get(k);
      if (j !== undefined)
        problems.push(`${what}[${i}]: the same as ${what}[${j}] (each would be run and counted twice)`);
      else seen.set(k, i);
    }
  };
  // A pair's adversarial stitching is part of what it is: the same models at attack ratios 0 and 1
  // are two pairs; so is a noise null beside its front's own pair (its front sends noise).
  twice("pairs", exp.pairs, (p) =>
    JSON.stringify([
      p.front,
      p.back,
      p.shortcut ?? null,
      p.points ?? null,
      adversarialOf(p, exp),
      isNoiseNull(p.relation),
    ]),
  );
  twice("seeds", exp.seeds, String);
  twice("objectives", exp.objectives, (o) => {
    try {
      return formatObjective(parseObjective(o));
    } catch {
      return `unparsed ${o}`;
    }
  });
  if (Array.isArray(exp.points)) twice("points", exp.points, String);
  return exp.objectives.filter((o, i) => {
    try {
      parseObjective(o);
      return true;
    } catch (e) {
      problems.push(`objectives[${i}]: ${(e as Error).message}`);
      return false;
    }
  });
}

type Pair = Experiment["pairs"][number];

/**
 * Pair i's stitch points, checked: both models exist, the back's classes fit the data, every
 * point is in both. Null when the pair cannot be planned (its problems recorded); a class
 * mismatch is recorded and the pair still planned, so that every problem is told at once.
 */
export function checkPair(
  exp: Experiment,
  i: number,
  m: PlannedModels,
  dataClasses: number | null,
  ctx: PlanContext,
): string[] | null {
  const pair = exp.pairs[i] as Pair;
  const where = `pairs[${i}]`;
  for (const side of ["front", "back"] as const)
    if (!(pair[side] in exp.models))
      ctx.problems.push(
        `${where}.${side}: no model "${pair[side]}"; the models are ${Object.keys(exp.models).join(", ") || "(none)"}`,
      );
  const front = m.points[pair.front];
  const back = m.points[pair.back];
  if (!front || !back) return null;
  // Before any work, not after training as libtorch's "Target 6 is out of bounds" (issue 25).
  const mismatch = backClassesProblem(m.classes[pair.back] ?? null, exp.dataset.name, dataClasses);
  if (mismatch) ctx.problems.push(`${where}.back: model "${pair.back}" ${mismatch}`);
  const wanted = pair.points ?? exp.points;
  const list = wanted === "all" ? back.points : wanted;
  // HEAD_POINT, the head's input, is every model's last point when asked for by name.
  const has = (x: { points: string[] }, p: string) => p === HEAD_POINT || x.points.includes(p);
  const listed = pair.points ? `${where}.points` : "points";
  const missing = (x: { arch: string; points: string[] }, names: string[], at: string) =>
    `${at}: no stitch point ${names.map((p) => `"${p}"`).join(", ")} in ${x.arch}; it has ${x.points.join(", ")}`;
  const notInBack = list.filter((p) => !has(back, p));
  if (notInBack.length) ctx.problems.push(missing(back, notInBack, listed));
  const unknown = Object.keys(pair.frontPoints ?? {}).filter((p) => !list.includes(p));
  if (unknown.length)
    ctx.problems.push(
      `${where}.frontPoints: ${unknown.map((p) => `"${p}"`).join(", ")} ${unknown.length > 1 ? "are" : "is"} not among the pair's points (${list.join(", ")}); its keys are the back's points`,
    );
  const notInFront = list.map((p) => frontPointOf(pair, p)).filter((p) => !has(front, p));
  if (notInFront.length)
    ctx.problems.push(missing(front, notInFront, pair.frontPoints ? `${where}.frontPoints` : listed));
  // The head asked of a model that has none: its own reason, once per side.
  const headless = [
    list.includes(HEAD_POINT) && back.headRefused ? `${listed}: ${back.headRefused}` : null,
    list.some((p) => frontPointOf(pair, p) === HEAD_POINT) && front !== back && front.headRefused
      ? `${pair.frontPoints ? `${where}.frontPoints` : listed}: ${front.headRefused}`
      : null,
  ].filter((why): why is string => why !== null);
  ctx.problems.push(...headless);
  if (notInBack.length || notInFront.length || unknown.length || headless.length) return null;
  // Across architectures, whether T can lay each front point onto its back point (stitch/layer.ts), before any work.
  const unstitchable = list.flatMap((p) => {
    const [a, b] = [front.shapes[frontPointOf(pair, p)], back.shapes[p]];
    const why = a && b ? stitchMismatch(a, b) : null;
    return why ? [`${pair.frontPoints ? `${where}.frontPoints` : listed}: ${why}`] : [];
  });
  ctx.problems.push(...unstitchable);
  return unstitchable.length ? null : list;
}

/** The front's stitch point for the back's point p: the pair's frontPoints, else the same name. */
export const frontPointOf = (pair: Pair, p: string): string => pair.frontPoints?.[p] ?? p;

/** The data settings every IRI and stitch task of the experiment resolves with. */
const dataOf = (exp: Experiment) => ({
  dataset: exp.dataset.name,
  root: exp.dataset.root ?? null,
  imageSize: exp.dataset.imageSize ?? null,
  testLimit: exp.dataset.testLimit ?? null,
  markerScale: exp.dataset.markerScale,
});

/**
 * Replicate r of a pair: the replicate's front and back, then per point its IRI set (in iris
 * mode) and a stitch per objective, mode and seed; returns each stitch's role.
 */
export function planReplicate(
  exp: Experiment,
  pair: Pair,
  r: number,
  points: string[],
  objectives: string[],
  m: PlannedModels,
  ctx: PlanContext,
): StitchRole[] {
  // Which data carry markers: the pair's own choice, else the experiment's (docs/method.md, "Which data carry markers").
  const shortcut = pair.shortcut !== undefined ? pair.shortcut : exp.stitch.shortcut;
  const excess = exp.excess === true ? shortcut : exp.excess || null;
  const adversarial = adversarialOf(pair, exp);
  const backPoints = (m.points[pair.back] as { points: string[] }).points;
  const modes = pair.modes ?? exp.modes;
  // The back is shared unless replicateBack; the front is the replicate's own, except in the
  // identical pair, whose front is its back (replicates then differ in IRI and stitching seeds).
  const backRef = replicaRef(m, ctx, pair.back, r, exp.replicateBack);
  // A noise-cluster null reads its front for the point shapes only: replicate 0's serves every
  // replicate (each its own clusters, by the stitch's seed), and its rows name it apart.
  const noise = isNoiseNull(pair.relation);
  const frontName = pairFrontName(pair);
  const frontRef = pair.front === pair.back ? backRef : replicaRef(m, ctx, pair.front, noise ? 0 : r, true);
  const modelDeps = [
    ...new Set([frontRef, backRef].filter((x): x is { task: string } => "task" in x).map((x) => x.task)),
  ];
  const roles: StitchRole[] = [];
  for (const point of points) {
    // point is the back's; the front's may be another (a front of another architecture).
    const frontPoint = frontPointOf(pair, point);
    const at = frontPoint === point ? point : `${frontPoint} -> ${point}`;
    let irisKey: string | null = null;
    let iriCount: number | null = null;
    if (modes.includes("iris")) {
      // Resolved as the iris command resolves its flags (stitch/config.ts); replicate r's seed is
      // the resolved one (the schema's default where the file gives none) + REPLICATE_SEED_STRIDE r.
      const {
        front: _f,
        device: _d,
        ...cfg
      } = resolveIrisConfig({ front: "", point: frontPoint, noiseClusters: noise }, exp.iris, {
        ...dataOf(exp),
        shortcut,
      });
      const options = r > 0 ? { ...cfg.options, seed: cfg.options.seed + REPLICATE_SEED_STRIDE * r } : cfg.options;
      const spec: IrisTask = { kind: "iris", front: frontRef, ...cfg, options };
      const deps = "task" in frontRef ? [frontRef.task] : [];
      irisKey = addTask(ctx, { kind: "iris", deps, label: `iris ${frontName} @ ${frontPoint}${rep(r)}`, spec });
      iriCount = cfg.limit;
    }
    for (const objective of objectives)
      for (const mode of modes)
        for (const seed of exp.seeds) {
          // Resolved as the stitch command resolves its flags (stitch/config.ts). Adversarial
          // stitching trains on real images: standard runs only.
          // A noise null has no gradient to the image: no attacks on it (stitch/noise.ts).
          const { shortcut: _s, adversarial: _a, robustEval, ...st } = exp.stitch;
          const {
            front: _f,
            back: _b,
            iris: _i,
            device: _d,
            ...config
          } = resolveStitchConfig(
            {
              front: "",
              back: "",
              frontPoint,
              ...(frontPoint !== point ? { backPoint: point } : {}),
              objective,
              mode,
              iris: mode === "iris" ? irisKey : null,
              noiseClusters: noise,
            },
            {
              ...st,
              ...(robustEval && !noise ? { robustEval } : {}),
              ...(adversarial && mode === "standard" ? { adversarial } : {}),
              seed: seed + REPLICATE_SEED_STRIDE * r,
            },
            { ...dataOf(exp), shortcut, excess },
          );
          const iris = mode === "iris" ? irisKey : null;
          // T trains on full batches only (stitch/train.ts): a batch larger than what it trains on
          // is refused here, before any model or IRI set is made for it.
          const trainsOn = mode === "iris" ? iriCount : config.limit;
          if (trainsOn !== null && trainsOn < config.batchSize)
            ctx.problems.push(
              mode === "iris"
                ? `stitch.batchSize ${config.batchSize} is more than the ${trainsOn} IRIs per front and point (iris.limit): T would have no full batch to train on`
                : `stitch.batchSize ${config.batchSize} is more than the ${trainsOn} real images standard stitching trains on (stitch.limit): T would have no full batch to train on`,
            );
          const spec: StitchTask = { kind: "stitch", front: frontRef, back: backRef, iris, config };
          const key = addTask(ctx, {
            kind: "stitch",
            deps: iris ? [...modelDeps, iris] : modelDeps,
            label: `stitch ${frontName} -> ${pair.back} @ ${at} ${objective} ${mode}${exp.seeds.length > 1 ? ` seed ${seed}` : ""}${rep(r)}`,
            spec,
          });
          roles.push({
            key,
            front: frontName,
            back: pair.back,
            relation: pair.relation,
            point,
            ...(frontPoint !== point ? { frontPoint } : {}),
            pointIndex: [...backPoints, HEAD_POINT].indexOf(point),
            objective,
            mode,
            seed,
            replicate: r,
            irisKey: iris,
          });
        }
  }
  return roles;
}

/**
 * Builds the task graph, checking everything that can be checked without running: model names,
 * checkpoint files, stitch points, objectives. All problems are reported at once, each with its
 * path in the file. `file` is the experiment file (relative checkpoint paths are relative to it).
 * Its parts: the models (planModels), the lists (checkExperiment), each pair (checkPair), and
 * each pair's replicates (planReplicate).
 */
export function planExperiment(given: Experiment, file: string): Plan {
  // Null fronts are models and pairs of their own from here on (experiments/nulls.ts).
  const { experiment: exp, notes: nullNotes } = withNulls(given);
  const ctx: PlanContext = { tasks: new Map(), problems: [] };
  const models = planModels(exp, dirname(resolve(file)), ctx);
  const objectives = checkExperiment(exp, ctx);
  // The experiment dataset's class count, read once (an image folder's is its class folders).
  const dataClasses = datasetClassCount(exp.dataset.name, exp.dataset);
  const stitches: StitchRole[] = [];
  for (const [i, pair] of exp.pairs.entries()) {
    const points = checkPair(exp, i, models, dataClasses, ctx);
    if (!points) continue;
    if (exp.excess === true && !(pair.shortcut !== undefined ? pair.shortcut : exp.stitch.shortcut))
      ctx.problems.push(`pairs[${i}]: excess: true scores each pair on its own markers, and this pair has no shortcut`);
    for (let r = 0; r < (pair.replicates ?? exp.replicates); r++)
      stitches.push(...planReplicate(exp, pair, r, points, objectives, models, ctx));
  }
  // Each problem once: the experiment's own points: are checked per pair, and every pair of the
  // same architectures would repeat the same line (compare's A -> B and its control B -> B).
  if (ctx.problems.length) throw new ExperimentError(file, [...new Set(ctx.problems)]);
  const order = { train: 0, iris: 1, stitch: 2 };
  return {
    experiment: exp,
    tasks: [...ctx.tasks.values()].sort((a, b) => order[a.kind] - order[b.kind]),
    stitches,
    models: models.refs,
    notes: [...Object.entries(models.notes).map(([name, note]) => `${name}: ${note}`), ...nullNotes],
  };
}

/** A pair's adversarial stitching: its own (null: none), else the experiment's stitch.adversarial. */
function adversarialOf(pair: Experiment["pairs"][number], exp: Experiment): Experiment["stitch"]["adversarial"] | null {
  return (pair.adversarial !== undefined ? pair.adversarial : exp.stitch.adversarial) ?? null;
}
