// The readings of a flag's value that every flag shares, made from a schema (cli/schema-flags.ts) or
// not (cli/parse.ts): a leaf both import, so that neither imports the other for them.
import { InvalidArgumentError } from "commander";
import type { z } from "zod";

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
