// Option parsers shared by the commands: each names the bad value in its error. They throw
// commander's InvalidArgumentError, so that the message names the option too:
// "option '--epochs <n>' argument 'abc' is invalid. expected an integer".
import { z } from "zod";
import { datasetSchema } from "../experiments/spec.js";
import { attributeOf, type FlagTable, type KeyRule, settingsFromFlags } from "./schema-flags.js";
import { checkedArg, numberArg } from "./values.js";

const count = z.number().int().min(0);
/** A count of a flag no schema key owns (--workers, --seed): read and checked as a key's are. */
export const int = (v: string): number => checkedArg(count, numberArg(v, true));

/**
 * An image side in pixels, every --image-size's parser (a model's, both models', the data's): a
 * whole number from 1, checked by the experiment's dataset key imageSize, as the file's is.
 */
export const imageSide = (v: string): number => checkedArg(datasetSchema.shape.imageSize.unwrap(), numberArg(v, true));

/** The value if it is one of `allowed`, else an error listing them. */
export function oneOf<T extends string>(what: string, allowed: readonly T[], v: string | undefined): T | undefined {
  if (v === undefined) return undefined;
  if (!(allowed as readonly string[]).includes(v))
    throw new Error(`${what} must be one of ${allowed.join(", ")}, not '${v}'`);
  return v as T;
}

/**
 * The data flags of a job, made from an experiment file's dataset section (experiments/spec.ts
 * datasetSchema), so that --marker-scale has the file's bounds: its keys `only` (root, imageSize,
 * markerScale, and where the job takes them limit, testLimit), and --dataset for `name`.
 */
export function dataTable(only: string[], name: KeyRule = {}): FlagTable {
  return { only: ["name", ...only], keys: { name: { flag: "--dataset", ...name } } };
}

/**
 * The data the flags give, checked by the dataset section's schema (absent: null; markerScale: the
 * schema's default). The name is the caller's: --dataset (checked by its choices) or a checkpoint's.
 */
export function dataFromFlags(
  o: Record<string, unknown>,
  table: FlagTable,
): {
  root: string | null;
  imageSize: number | null;
  markerScale: number;
  limit: number | null;
  testLimit: number | null;
} {
  const only = (table.only ?? []).filter((k) => k !== "name");
  const d = settingsFromFlags(o, datasetSchema.omit({ name: true }), { ...table, only });
  return {
    root: d.root ?? null,
    imageSize: d.imageSize ?? null,
    markerScale: d.markerScale,
    limit: d.limit ?? null,
    testLimit: d.testLimit ?? null,
  };
}

/** `{ [key]: value }` when value is defined, else `{}`: spread into a config so an absent option stays absent. */
export function optional<K extends string, V>(key: K, value: V | undefined): { [P in K]?: V } {
  return (value === undefined ? {} : { [key]: value }) as { [P in K]?: V };
}

/**
 * A flag's value under its name, or under its deprecated old name (said once on stderr: "--data
 * is deprecated: use --dataset"); both given with different values is an error (issue 38: old
 * names stay as aliases that say the new one).
 */
export function renamedFlag(o: Record<string, unknown>, old: string, now: string): unknown {
  const [was, is] = [o[attributeOf(old)], o[attributeOf(now)]];
  if (was === undefined) return is;
  if (is !== undefined && is !== was) throw new Error(`${old} is ${now}'s old name: give ${now} only`);
  console.error(`${old} is deprecated: use ${now}`);
  return was;
}
