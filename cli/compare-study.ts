// compare's flags as a study: the experiment it runs and its plan (compareStudy), its problems
// told in flags (asFlags), the sizes a budget may not reduce (givenSizes), the plan as the user
// reads it before the run (planLines), and the parsers of --protocol and --budget. cli/compare.ts
// registers the command and runs it.
import { InvalidArgumentError } from "commander";
import { type CompareScale, parseDuration, type ScaleKey } from "../experiments/budget.js";
import { isDone } from "../experiments/cache.js";
import {
  COMPARE_DEFAULTS,
  COMPARE_PROTOCOL_NAMES,
  type CompareProtocolName,
  compareExperiment,
} from "../experiments/compare.js";
import { type IrisTask, type Plan, planExperiment, type StitchTask } from "../experiments/plan.js";
import { type Experiment, ExperimentError } from "../experiments/spec.js";
import type { ModelSourceLike } from "../models/checkpoint.js";
import { iriStepCap } from "../stitch/iri-options.js";

export const words = (v: string) =>
  v
    .split(",")
    .map((x) => x.trim())
    .filter(Boolean);

/** The model flags for both models (--arch, ...) under each role's own name, where that one is not given. */
export function bothModels(o: Record<string, unknown>): Record<string, unknown> {
  const out = { ...o };
  for (const k of ["Arch", "Options", "Normalization", "ImageSize"]) {
    const both = o[`${k[0].toLowerCase()}${k.slice(1)}`];
    for (const role of ["front", "back"])
      if (out[`${role}${k}`] === undefined && both !== undefined) out[`${role}${k}`] = both;
  }
  return out;
}

/** An experiment problem's leading key, as compare's flag. */
const FLAG_OF: Record<string, string> = {
  points: "--points",
  objectives: "--objectives",
  replicates: "--replicates",
  seeds: "--seed",
  "iris.limit": "--iris-limit",
  "iris.steps": "--iris-steps",
  "iris.maxSteps": "--iris-steps",
  "iris.batchSize": "--batch-size",
  "iris.seed": "--seed",
  "stitch.limit": "--stitch-limit",
  "stitch.epochs": "--epochs",
  "stitch.batchSize": "--batch-size",
  "dataset.testLimit": "--test-limit",
  "dataset.name": "--dataset",
  "dataset.root": "--root",
};

/**
 * Builds the study, with its problems told in compare's flags: compare.yaml is written only when
 * the run starts, so a problem must not send the user to a file that does not exist.
 */
export function asFlags<T>(build: () => T): T {
  try {
    return build();
  } catch (e) {
    if (!(e instanceof ExperimentError)) throw e;
    const told = e.problems.map((p) => {
      const key = /^([\w.]+):/.exec(p)?.[1];
      const flag = key ? FLAG_OF[key] : undefined;
      return flag ? `${flag}: ${p.slice((key as string).length + 1).trim()}` : p;
    });
    // One flag may set two keys (--iris-steps: steps and the cap): say each problem once.
    const problems = [...new Set(told)];
    throw new Error(
      `compare: ${problems.length} problem${problems.length > 1 ? "s" : ""}:\n  ${problems.join("\n  ")}`,
    );
  }
}

/** The settings a budget may reduce that the user gave as flags (never reduced). */
export function givenSizes(o: Record<string, unknown>): Set<ScaleKey> {
  const given: [ScaleKey, unknown][] = [
    ["replicates", o.replicates],
    ["points", o.points],
    ["iris", o.irisLimit ?? o.limit],
    ["images", o.stitchLimit ?? o.limit],
    ["batch", o.batchSize],
    ["epochs", o.epochs],
    ["test", o.testLimit],
  ];
  return new Set(given.filter(([, v]) => v !== undefined).map(([k]) => k));
}

/** What the plan will run, from its tasks' resolved settings (the defaults are the schemas'). */
export function planLines(plan: Plan, cache: string): string {
  const e = plan.experiment;
  const count = (kind: string) => {
    const all = plan.tasks.filter((t) => t.kind === kind);
    return `${all.length} (${all.filter((t) => isDone(cache, t.key)).length} cached)`;
  };
  const pairs = e.pairs.map(
    (p) =>
      `${p.front} -> ${p.back}${p.relation === "identical" ? " (the control)" : ""}, ${p.replicates ?? e.replicates} replicate${(p.replicates ?? e.replicates) === 1 ? "" : "s"}`,
  );
  const irisTask = plan.tasks.map((t) => t.spec).find((s): s is IrisTask => s.kind === "iris");
  const stitchTask = plan.tasks.map((t) => t.spec).find((s): s is StitchTask => s.kind === "stitch");
  const io = irisTask?.options;
  const sc = stitchTask?.config;
  const replicates = Math.max(...e.pairs.map((p) => p.replicates ?? e.replicates));
  return [
    `compare: ${pairs.join("; ")}`,
    `  points     ${(e.points as string[]).join(", ")} (${(e.points as string[]).length})`,
    `  modes      standard, invariance-aware; objectives ${e.objectives.join(", ")}`,
    `  data       ${e.dataset.name}${e.dataset.root ? ` (${e.dataset.root})` : ""}, ${e.dataset.testLimit ?? "all"} test images`,
    ...(io
      ? [
          `  IRIs       ${irisTask?.limit ?? "all"} per model and point, ${io.optimizer} ${io.steps} steps${io.start === "image" ? " from another image" : ` from ${io.start} noise`}${io.keepBest ? ", keep-best" : ""}${io.target !== undefined ? `; an image stops at residual ${io.target}, restarts up to ${iriStepCap(io)} steps` : ""}`,
        ]
      : []),
    ...(sc
      ? [
          `  stitching  ${sc.epochs} epochs on ${sc.limit ?? "all"} real images (or the IRIs), batch ${sc.batchSize}, Adam lr ${sc.lr}`,
        ]
      : []),
    `  intervals  ${replicates > 1 ? `Student t over ${replicates} replicates (IRI and stitching seeds)` : "one replicate: 95% intervals over the test images (mean ± 1.96 standard errors), none over seeds; --replicates N for those"}`,
    `  tasks      ${count("iris")} IRI sets, ${count("stitch")} stitches; cache ${cache}`,
  ].join("\n");
}

/** What compareStudy needs besides the flags: the protocol, both models, the dataset, compare.yaml's path. */
export interface StudyInputs {
  protocol: CompareProtocolName;
  front: ModelSourceLike;
  back: ModelSourceLike;
  dataset: string;
  file: string;
}

/**
 * The study from the protocol and compare's flags (experiments/compare.ts compareExperiment), and
 * its plan, with problems told in flags; with `scale`, at the sizes a budget picked instead of the
 * flags'.
 */
export function compareStudy(
  o: Record<string, unknown>,
  { protocol, front, back, dataset, file }: StudyInputs,
  scale?: CompareScale,
): { text: string; experiment: Experiment; plan: Plan } {
  const d = COMPARE_DEFAULTS;
  const limit = (k: string) => (o[k] ?? o.limit) as number | undefined;
  const some = <T>(k: string, v: T | undefined) => (v === undefined ? {} : { [k]: v });
  return asFlags(() => {
    const built = compareExperiment(
      {
        protocol,
        a: front,
        b: back,
        dataset: {
          name: dataset,
          ...some("root", o.root as string | undefined),
          ...some("testLimit", scale ? (scale.test ?? undefined) : (o.testLimit as number | undefined)),
          ...(dataset === "imagefolder" ? some("imageSize", o.imageSize as number | undefined) : {}),
        },
        ...some(
          "points",
          scale
            ? scale.points
            : o.points === "all"
              ? ("all" as const)
              : o.points
                ? words(o.points as string)
                : undefined,
        ),
        ...some("seed", o.seed as number | undefined),
        ...some("objectives", o.objectives ? words(o.objectives as string) : undefined),
        ...some("replicates", scale ? scale.replicates : (o.replicates as number | undefined)),
        bothWays: Boolean(o.bothWays),
        iris: {
          ...some("limit", scale ? scale.iris : limit("irisLimit")),
          ...some("steps", o.irisSteps as number | undefined),
          // Other steps per start keep the default's three starts at most.
          ...some(
            "maxSteps",
            o.irisSteps === undefined ? undefined : (o.irisSteps as number) * (d.iris.maxSteps / d.iris.steps),
          ),
          ...some("batchSize", o.batchSize as number | undefined),
        },
        stitch: {
          ...some("limit", scale ? scale.images : limit("stitchLimit")),
          ...some("epochs", scale ? scale.epochs : (o.epochs as number | undefined)),
          ...some("batchSize", scale ? scale.batch : (o.batchSize as number | undefined)),
        },
      },
      file,
    );
    return { ...built, plan: planExperiment(built.experiment, file) };
  });
}

/** --protocol: one of COMPARE_PROTOCOLS's names. */
export function protocolName(v: string): CompareProtocolName {
  if (!(COMPARE_PROTOCOL_NAMES as string[]).includes(v))
    throw new InvalidArgumentError(`expected ${COMPARE_PROTOCOL_NAMES.join(" or ")}`);
  return v as CompareProtocolName;
}

/** --budget: a duration (experiments/budget.ts parseDuration), kept as written for the budget line. */
export function budget(v: string): { text: string; seconds: number } {
  try {
    return { text: v.trim(), seconds: parseDuration(v) };
  } catch (e) {
    throw new InvalidArgumentError((e as Error).message);
  }
}
