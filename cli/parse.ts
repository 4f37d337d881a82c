// Option parsers shared by the commands: each names the bad value in its error. They throw
// commander's InvalidArgumentError, so that the message names the option too:
// "option '--epochs <n>' argument 'abc' is invalid. expected an integer".
import { InvalidArgumentError } from "commander";
import { z } from "zod";
import { datasetSchema } from "../experiments/spec.js";
import { attributeOf, type FlagTable, type KeyRule, settingsFromFlags } from "./schema-flags.js";

/**
 * A flag's text as a number, else commander's error: the one reading of a number flag, so that a
 * bad value gets one message from every flag, made from a schema (cli/schema-flags.ts) or not (int).
 */
export function numberArg(text: string, integer: boolean): number {
  const n = Number(text);
  if (text.trim() === "" || !Number.isFinite(n))
    throw new InvalidArgumentError(integer ? "expected an integer" : "expected a number");
  return n;
}

/** A flag's value checked by a schema, else commander's error with the schema's message ("Too small: expected number to be >=1"). */
export function checkedArg<T>(schema: z.ZodType<T>, value: unknown): T {
  const r = schema.safeParse(value);
  if (!r.success) throw new InvalidArgumentError(r.error.issues.map((i) => i.message).join("; "));
  return r.data;
}

const count = z.number().int().min(0);
/** A count of a flag no schema key owns (--workers, --seed, --image-size of a model): read and checked as a key's are. */
export const int = (v: string): number => checkedArg(count, numberArg(v, true));

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
 * `value` checked by the schema that owns it (the same one an experiment file's section uses),
 * with an error that names the flag: `--steps: Too small: expected number to be >=1`.
 */
export function checkedFlags<T>(
  schema: {
    safeParse(
      v: unknown,
    ): { success: true; data: T } | { success: false; error: { issues: { path: PropertyKey[]; message: string }[] } };
  },
  value: unknown,
  /** Flags whose names are not the key's in kebab case, by the key's path ("step": "--pgd-step"). */
  flags: Record<string, string> = {},
): T {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const lines = r.error.issues.map((i) => {
    const path = i.path.map(String).join(".");
    const key = String(i.path.at(-1) ?? "");
    return `${flags[path] ?? `--${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`}: ${i.message}`;
  });
  throw new Error(lines.join("; "));
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
