// Option parsers shared by the commands: each names the bad value in its error.
export const num = (v: string): number => {
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n)) throw new Error(`expected a number, got '${v}'`);
  return n;
};

export const int = (v: string): number => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`expected a non-negative integer, got '${v}'`);
  return n;
};

/** Accepts "8/255" as well as 0.0314. */
export const fraction = (v: string): number => {
  const m = v.match(/^\s*([\d.]+)\s*\/\s*([\d.]+)\s*$/);
  return m ? Number(m[1]) / Number(m[2]) : num(v);
};

/** The value if it is one of `allowed`, else an error listing them. */
export function oneOf<T extends string>(what: string, allowed: readonly T[], v: string | undefined): T | undefined {
  if (v === undefined) return undefined;
  if (!(allowed as readonly string[]).includes(v))
    throw new Error(`${what} must be one of ${allowed.join(", ")}, not '${v}'`);
  return v as T;
}

/** `{ [key]: value }` when value is defined, else `{}`: spread into a config so an absent option stays absent. */
export function optional<K extends string, V>(key: K, value: V | undefined): { [P in K]?: V } {
  return (value === undefined ? {} : { [key]: value }) as { [P in K]?: V };
}
