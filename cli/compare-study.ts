// compare's flags as a study: its size flags from the experiment's schema (COMPARE_FLAGS), the
// experiment and its plan (compareStudy), problems told in flags (asFlags), the sizes a budget may
// not reduce (givenSizes), the intervals line under the plan (intervalsLine; the plan's lines are
// cli/plan-lines.ts), the parsers of --protocol and --budget. cli/compare.ts registers and runs it.
import { InvalidArgumentError } from "commander";
import { type CompareScale, parseDuration, type ScaleKey } from "../experiments/budget.js";
import {
  COMPARE_DEFAULTS,
  COMPARE_PROTOCOL_NAMES,
  type CompareProtocolName,
  compareExperiment,
  protocolSizes,
} from "../experiments/compare.js";
import { type Plan, planExperiment } from "../experiments/plan.js";
import { type Experiment, ExperimentError, experimentSchema } from "../experiments/spec.js";
import { isNullRelation } from "../findings/chance.js";
import type { ModelSourceLike } from "../models/checkpoint.js";
import { type FlagTable, flagNames, givenFromFlags } from "./schema-flags.js";

/** A comma-separated flag's values. */
export const words = (v: string): string[] => v.split(",").flatMap((x) => (x.trim() ? [x.trim()] : []));

/**
 * compare's size flags: the experiment file's keys they set (experiments/spec.ts experimentSchema),
 * so their bounds and parsers are the file's, and their defaults the fast protocol's
 * (COMPARE_DEFAULTS; --protocol paper's are named in each help). --limit and --batch-size are
 * shorthands, each declared once: --limit a fallback of --iris-limit and --stitch-limit (either
 * narrows it, as before), --batch-size the batch of T and of the IRI descent, which compare keeps
 * one. The help is the command's where the key means less than in a file (a replicate of fixed
 * checkpoints is other seeds only; T's epochs are one batch each at the fast sizes). The other
 * flags stay hand-written: --points and --objectives take "all" and comma lists the study reads,
 * --seed shifts the seeds rather than setting one key, and --image-size is both models' setting as
 * much as the dataset's (cli/source.ts).
 */
const paper = protocolSizes("paper");
export const COMPARE_FLAGS: FlagTable = {
  only: [
    "replicates",
    "dataset.testLimit",
    "iris.limit",
    "iris.steps",
    "iris.batchSize",
    "stitch.limit",
    "stitch.epochs",
    "stitch.batchSize",
    "stitch.augment",
  ],
  defaults: { ...COMPARE_DEFAULTS, dataset: { testLimit: COMPARE_DEFAULTS.testLimit } },
  keys: {
    replicates: {
      describe:
        "replicates of A -> B: other IRI and stitching seeds (2 or more: intervals over the seeds and the test images; 1: over the test images only)",
      note: `--protocol paper: ${paper.replicates}`,
    },
    "dataset.testLimit": { flag: "--test-limit", note: `--protocol paper: ${paper.test}` },
    "iris.limit": {
      describe: "IRIs per model and point: the first n training images",
      note: `--protocol paper: ${paper.iris}`,
    },
    "iris.steps": {
      describe: "IRI descent steps per start",
      note: `Adam from uniform noise, keep-best, an image stops at residual ${COMPARE_DEFAULTS.iris.target} and restarts up to ${COMPARE_DEFAULTS.iris.maxSteps} steps in all (${COMPARE_DEFAULTS.iris.maxSteps / COMPARE_DEFAULTS.iris.steps} times the steps given); docs/method.md "How tight an IRI must be"`,
    },
    "iris.batchSize": { skip: true },
    "stitch.limit": { describe: "real training images for T", note: `--protocol paper: ${paper.images}` },
    "stitch.epochs": {
      flag: "--epochs",
      describe: "epochs of T",
      note: `one batch per epoch at the default sizes; --protocol paper: ${paper.epochs}`,
    },
    "stitch.batchSize": { skip: true },
  },
  shorthands: [
    {
      flag: "--limit <n>",
      sets: ["iris.limit", "stitch.limit"],
      fallback: true,
      help: `training images for IRIs and for T (default ${COMPARE_DEFAULTS.iris.limit}; --protocol paper: ${paper.iris}); --iris-limit or --stitch-limit sets one of them over it`,
    },
    {
      flag: "--batch-size <n>",
      sets: ["iris.batchSize", "stitch.batchSize"],
      fallback: true,
      help: `batch of T and of the IRI descent (default ${COMPARE_DEFAULTS.stitch.batchSize}; --protocol paper: ${paper.batch})`,
    },
  ],
};

/** The experiment's keys compare's size flags give (absent: not given). */
interface GivenSizes {
  replicates?: number;
  dataset?: { testLimit?: number };
  iris?: { limit?: number; steps?: number; batchSize?: number };
  stitch?: { limit?: number; epochs?: number; batchSize?: number; augment?: boolean };
}
export const sizesFromFlags = (o: Record<string, unknown>): GivenSizes =>
  givenFromFlags(o, experimentSchema, COMPARE_FLAGS) as GivenSizes;

/** An experiment problem's leading key, as compare's flag: the size flags' own, and the rest's. */
const FLAG_OF: Record<string, string> = {
  ...flagNames(experimentSchema, COMPARE_FLAGS),
  points: "--points",
  objectives: "--objectives",
  seeds: "--seed",
  "iris.maxSteps": "--iris-steps",
  "iris.seed": "--seed",
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
  const g = sizesFromFlags(o);
  const given: [ScaleKey, unknown][] = [
    ["replicates", g.replicates],
    ["points", o.points],
    ["iris", g.iris?.limit],
    ["images", g.stitch?.limit],
    ["batch", g.stitch?.batchSize],
    ["epochs", g.stitch?.epochs],
    ["test", g.dataset?.testLimit],
  ];
  return new Set(given.filter(([, v]) => v !== undefined).map(([k]) => k));
}

/**
 * compare's line under its plan (cli/plan-lines.ts) on what the intervals are over: its models are
 * fixed checkpoints, so replicates differ in IRI and stitching seeds only, and the test sample is
 * the other source (findings/summary.ts seedAndImageInterval).
 */
export function intervalsLine(plan: Plan): string {
  const e = plan.experiment;
  // A null front's replicates are its initialisations: their interval is the null's band, not the verdict's.
  const replicates = Math.max(
    ...e.pairs.filter((p) => !isNullRelation(p.relation)).map((p) => p.replicates ?? e.replicates),
  );
  return `  intervals  ${replicates > 1 ? `95%, over ${replicates} replicates' IRI and stitching seeds (Student t) and the test images together` : "one replicate: 95% over the test images only (mean ± 1.96 standard errors), not over seeds, so another --seed may land outside them; --replicates 3 for both"}`;
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
  const g = sizesFromFlags(o);
  const steps = g.iris?.steps;
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
          ...some("testLimit", scale ? (scale.test ?? undefined) : g.dataset?.testLimit),
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
        ...some("replicates", scale ? scale.replicates : g.replicates),
        bothWays: Boolean(o.bothWays),
        nulls: Boolean(o.nulls),
        iris: {
          ...some("limit", scale ? scale.iris : g.iris?.limit),
          ...some("steps", steps),
          // Other steps per start keep the default's three starts at most.
          ...some("maxSteps", steps === undefined ? undefined : steps * (d.iris.maxSteps / d.iris.steps)),
          ...some("batchSize", g.iris?.batchSize),
        },
        stitch: {
          ...some("limit", scale ? scale.images : g.stitch?.limit),
          ...some("epochs", scale ? scale.epochs : g.stitch?.epochs),
          ...some("batchSize", scale ? scale.batch : g.stitch?.batchSize),
          // Only where it departs from the protocol: compare.yaml then says so.
          ...(g.stitch?.augment === false ? { augment: false } : {}),
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
