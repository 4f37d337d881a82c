// Flags made from the zod schemas that own the settings (issue 38): a command declares one option
// per schema key, and turns its parsed flags back into the settings object the same schema checks.
// The name is the key in kebab case (`batchSize` -> --batch-size; a key of a section,
// `robustEval.steps` -> --robust-eval-steps), the parser follows the key's type and bounds, and the
// help is the key's `.describe()` text with its default read from the schema (or the defaults
// object that the schema's owner gives). What a command does differently, a rename, a key it does
// not take, a shorthand for two keys, is written in its short table (FlagTable), so that a flag and
// an experiment file's key cannot drift apart: they are read from one definition.
import { type Command, InvalidArgumentError, Option } from "commander";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { checkedArg, checkedFlags, numberArg } from "./values.js";

type Schema = z.ZodType;
type ObjectSchema = z.ZodObject<z.ZodRawShape>;

/** What a command does with one key (by its path: "batchSize", "adversarial.step"). */
export interface KeyRule {
  /** The flag's name where it is not the key's in kebab case ("--pgd-step"). */
  flag?: string;
  /** No flag: the key is not a command-line setting of this command (it is set otherwise, or not at all). */
  skip?: boolean;
  /** The flag must be given (commander's requiredOption). */
  required?: boolean;
  /** Words after the schema's description, where the flag means more on the command line. */
  note?: string;
  /**
   * The help in place of the schema's description, where the key means less in this command than
   * in a file (compare's --replicates: its models are fixed checkpoints, so a replicate is other
   * IRI and stitching seeds only, where a file's also trains other fronts). The default is still read.
   */
  describe?: string;
  /** The setting's value from the flag's parsed value and all the flags (stitch's --bn-mode m: { [mode]: m }). */
  to?: (value: unknown, o: Record<string, unknown>) => unknown;
  /** The flag's values, where they are not the key's own (with `to`: the key is an object the flag fills one field of). */
  choices?: readonly string[];
}

/** An optional object key (a section: adversarial, robustEval, simclr) and how the command turns it on. */
export interface SectionRule {
  /** The switch that turns it on ("--adversarial"); absent: any of its flags does. */
  switch?: string;
  /** What it is, for the message when its flags come without its switch: "adversarial stitching". */
  what: string;
}

/**
 * One flag that sets several keys. By default (stitch's --eps: both radii) it sets them in the
 * sections that are on, and is refused beside a flag of one of its keys; a fallback (compare's
 * --limit: IRIs and T's images) sets each of its keys whose own flag is not given, section on or not.
 */
export interface Shorthand {
  /** "--eps <e>" */
  flag: string;
  /** The keys it sets, by path (a section's key); its parser is the first one's. */
  sets: string[];
  /** Its help: says it is a shorthand, and for which flags. */
  help: string;
  /** The message when none of its keys' sections is on (not for a fallback). */
  unused?: string;
  /** A default of its keys' own flags rather than a second way to set them (compare's --limit). */
  fallback?: boolean;
}

/** A command's exceptions to the rule "one flag per key, named as the key". */
export interface FlagTable {
  keys?: Record<string, KeyRule>;
  sections?: Record<string, SectionRule>;
  shorthands?: Shorthand[];
  /**
   * Only these keys get flags (a command taking part of a schema): top-level keys, whole sections,
   * or a section's keys by path ("iris.limit").
   */
  only?: string[];
  /**
   * Defaults where the schema's keys carry none (stitch/iri-options.ts IRI_DEFAULTS beside the
   * partial IRI schema), or where the command's differ from a file's (compare's COMPARE_DEFAULTS);
   * a section's under its name.
   */
  defaults?: Record<string, unknown>;
}

/** The kinds of value a key holds, as the command line writes them. */
export type FlagKind = "number" | "integer" | "fraction" | "boolean" | "enum" | "text" | "list" | "yaml";

/** One flag of a key: everything the declaration, the reverse mapping and the tests need. */
export interface SchemaFlag {
  /** The key's path in the settings: ["adversarial", "step"]. */
  path: string[];
  /** "--pgd-step" */
  flag: string;
  /** commander's name for it in the parsed options: "pgdStep". */
  attribute: string;
  kind: FlagKind;
  /** The key's schema as the section declares it (wrappers included): it checks the flag's value. */
  schema: Schema;
  /** The number's bounds (JSON Schema's words), for numbers. */
  bounds: { minimum?: number; exclusiveMinimum?: number; maximum?: number; exclusiveMaximum?: number };
  /** The enum's values. */
  choices?: string[];
  /** The default as the schema (or the table's defaults) gives it; undefined: none. */
  default: unknown;
  help: string;
  required: boolean;
  /** A boolean that is not false by default also gets --no-NAME. */
  negatable: boolean;
  to?: KeyRule["to"];
}

const kebab = (key: string) => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
/** commander's attribute name for a long flag: --pgd-step -> pgdStep. */
export const attributeOf = (flag: string) =>
  flag.replace(/^--(no-)?/, "").replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase());

interface Def {
  type: string;
  innerType?: Schema;
  in?: Schema;
  out?: Schema;
  shape?: Record<string, Schema>;
  element?: Schema;
  items?: Schema[];
  entries?: Record<string, string>;
}
const defOf = (s: Schema): Def => (s as unknown as { _zod: { def: Def } })._zod.def;

/**
 * The schema under its wrappers (optional, nullable, default, readonly) and the description found
 * on the way down (the outermost wins). A pipe whose output is a number is the number (a value in
 * pixel units that may be written "8/255": eval/config.ts fractional), marked as a fraction.
 */
function unwrap(s: Schema): { base: Schema; description?: string; fraction: boolean } {
  let description = s.description;
  let cur = s;
  for (;;) {
    const d = defOf(cur);
    if (["optional", "nullable", "default", "prefault", "readonly", "nonoptional"].includes(d.type) && d.innerType)
      cur = d.innerType;
    else if (d.type === "pipe" && d.out && defOf(d.out).type === "number") {
      description ??= cur.description;
      return { base: d.out, description: description ?? d.out.description, fraction: true };
    } else return { base: cur, description, fraction: false };
    description ??= cur.description;
  }
}

function kindOf(base: Schema, fraction: boolean): FlagKind {
  const d = defOf(base);
  if (fraction) return "fraction";
  if (d.type === "number") return (base as z.ZodNumber).isInt ? "integer" : "number";
  if (d.type === "boolean") return "boolean";
  if (d.type === "enum") return "enum";
  if (d.type === "string") return "text";
  if (d.type === "array" || d.type === "tuple") return "list";
  if (d.type === "record") return "yaml";
  throw new Error(`no flag for a ${d.type} setting`);
}

/** A number's bounds from the schema's own checks (as its JSON Schema states them). */
function boundsOf(base: Schema): SchemaFlag["bounds"] {
  if (defOf(base).type !== "number") return {};
  const j = z.toJSONSchema(base) as Record<string, unknown>;
  const b: SchemaFlag["bounds"] = {};
  for (const k of ["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"] as const) {
    const v = j[k];
    // An integer's implicit safe-integer range is no bound a user set.
    if (typeof v === "number" && Math.abs(v) < Number.MAX_SAFE_INTEGER) b[k] = v;
  }
  return b;
}

/**
 * A default as --help shows it: in pixel units as a fraction ("8/255", the way a user writes it),
 * a milestone as one ("1/3"); a list comma-separated, as the flag takes it.
 */
export function formatDefault(v: unknown, fraction = false): string {
  if (Array.isArray(v)) return v.map((x) => formatDefault(x, fraction)).join(",");
  if (typeof v === "number" && fraction && !Number.isInteger(v))
    for (const d of [2, 3, 4, 5, 6, 8, 10, 12, 255]) {
      const n = v * d;
      if (Math.abs(n - Math.round(n)) < 1e-9) return `${Math.round(n)}/${d}`;
    }
  return String(v);
}

/** Whether a list's elements are fractions (the lr's milestones, "1/3,2/3"). */
function listOfFractions(base: Schema): boolean {
  const d = defOf(base);
  const element = d.element ?? d.items?.[0];
  return element !== undefined && unwrap(element).fraction;
}

/** The flags of a schema under a command's table, in the schema's order (sections' keys after their switch). */
export function schemaFlags(schema: ObjectSchema, table: FlagTable = {}): SchemaFlag[] {
  const out: SchemaFlag[] = [];
  // A key is wanted when `only` names it, a section above it, or (a section) a key in it.
  const wanted = (id: string) =>
    !table.only || table.only.some((p) => p === id || id.startsWith(`${p}.`) || p.startsWith(`${id}.`));
  const visit = (shape: Record<string, Schema>, prefix: string[], defaults: Record<string, unknown> | undefined) => {
    for (const [key, field] of Object.entries(shape)) {
      const path = [...prefix, key];
      const id = path.join(".");
      if (!wanted(id)) continue;
      const rule = table.keys?.[id] ?? {};
      if (rule.skip) continue;
      const { base, description, fraction } = unwrap(field);
      if (defOf(base).type === "object" && !rule.choices) {
        visit(defOf(base).shape ?? {}, path, defaults?.[key] as Record<string, unknown> | undefined);
        continue;
      }
      const kind = rule.choices ? "enum" : kindOf(base, fraction);
      const given = defaults?.[key];
      const parsed = field.safeParse(undefined);
      const dflt = given !== undefined ? given : parsed.success ? parsed.data : undefined;
      const flag = rule.flag ?? `--${path.map(kebab).join("-")}`;
      const shown =
        dflt === undefined || dflt === null || kind === "boolean"
          ? ""
          : formatDefault(dflt, fraction || listOfFractions(base));
      const help = [rule.describe ?? description ?? "", rule.note ?? ""].filter(Boolean).join("; ");
      out.push({
        path,
        flag,
        attribute: attributeOf(flag),
        kind,
        schema: field,
        bounds: boundsOf(base),
        ...(kind === "enum" ? { choices: [...(rule.choices ?? Object.values(defOf(base).entries ?? {}))] } : {}),
        default: dflt,
        help: shown ? `${help} (default ${shown})` : help,
        required: Boolean(rule.required),
        negatable: kind === "boolean" && dflt !== false,
        to: rule.to,
      });
    }
  };
  visit(schema.shape as Record<string, Schema>, [], table.defaults);
  return out;
}

/** The text of one value of this kind as the schema wants it (before the schema's own check). */
function rawValue(kind: FlagKind, base: Schema, text: string): unknown {
  if (kind === "number" || kind === "integer") return numberArg(text, kind === "integer");
  if (kind === "yaml")
    try {
      return parseYaml(text);
    } catch (e) {
      throw new InvalidArgumentError(`not YAML or JSON: ${(e as Error).message.split("\n")[0]}`);
    }
  if (kind === "list") {
    const d = defOf(base);
    return text.split(",").map((part, i) => {
      const element = d.items?.[i] ?? d.element;
      if (!element) return part.trim();
      const u = unwrap(element);
      return rawValue(kindOf(u.base, u.fraction), u.base, part.trim());
    });
  }
  // A fraction stays text: the key's own schema reads "8/255" (eval/config.ts fractional).
  return text;
}

/** The flag's parser: the text as its kind writes it, checked by the key's schema (its bounds, its message). */
function parserOf(f: Pick<SchemaFlag, "kind" | "schema">): (text: string) => unknown {
  const { base } = unwrap(f.schema);
  return (text) => checkedArg(f.schema, rawValue(f.kind, base, text));
}

/** The schema of a key by its path (a section's key: ["iris", "limit"]), whether or not it has a flag. */
function keySchema(schema: ObjectSchema, path: string[]): Schema {
  let cur: Schema = schema;
  for (const k of path) {
    const field = defOf(unwrap(cur).base).shape?.[k];
    if (!field) throw new Error(`no key ${path.join(".")}`);
    cur = field;
  }
  return cur;
}

/** A shorthand's parser: its first key's (the keys it sets share a type), from the schema itself. */
function shorthandParser(schema: ObjectSchema, s: Shorthand): (text: string) => unknown {
  const field = keySchema(schema, (s.sets[0] ?? "").split("."));
  const { base, fraction } = unwrap(field);
  return parserOf({ kind: kindOf(base, fraction), schema: field });
}

/** The argument's name in --help: <n> for counts, <x> for numbers, <name> for choices. */
function argName(f: SchemaFlag): string {
  if (f.kind === "integer") return "<n>";
  if (f.kind === "number" || f.kind === "fraction") return "<x>";
  if (f.kind === "enum") return "<name>";
  if (f.kind === "list") return "<list>";
  if (f.kind === "yaml") return "<yaml>";
  return "<text>";
}

/** Declares a schema's flags on a command, with the table's section switches and shorthands. */
export function addSchemaFlags(cmd: Command, schema: ObjectSchema, table: FlagTable = {}): Command {
  const flags = schemaFlags(schema, table);
  const shape = schema.shape as Record<string, Schema>;
  const declared = new Set<string>();
  for (const f of flags) {
    const section = f.path.length > 1 ? f.path[0] : undefined;
    const sw = section ? table.sections?.[section]?.switch : undefined;
    if (section && sw && !declared.has(sw)) {
      declared.add(sw);
      const s = shape[section];
      cmd.option(sw, (s && unwrap(s).description) ?? table.sections?.[section]?.what ?? "");
    }
    if (f.kind === "boolean") {
      cmd.addOption(new Option(f.flag, f.help));
      if (f.negatable) cmd.addOption(new Option(`--no-${f.flag.slice(2)}`, `not ${f.flag}`));
      continue;
    }
    const o = new Option(`${f.flag} ${argName(f)}`, f.help);
    if (f.choices) o.choices(f.choices);
    else o.argParser(parserOf(f));
    if (f.required) o.makeOptionMandatory();
    cmd.addOption(o);
  }
  for (const s of table.shorthands ?? []) cmd.option(s.flag, s.help, shorthandParser(schema, s));
  return cmd;
}

function flagOf(flags: SchemaFlag[], path: string): SchemaFlag {
  const f = flags.find((x) => x.path.join(".") === path);
  if (!f) throw new Error(`no flag for ${path}`);
  return f;
}

/** A shorthand's attribute in commander's parsed options. */
const shorthandAttribute = (s: Shorthand) => attributeOf(s.flag.split(" ")[0] ?? "");

/**
 * The settings the flags give, unchecked: each key whose flag was given (absent stays absent, so
 * the schema's default applies as in a file); a section when its switch is on (or, without one,
 * when any of its flags is given); a shorthand's value in each of its keys whose section is on.
 * Throws on a section's flags without its switch, a shorthand with none of its sections on, and a
 * shorthand given with a flag of its own key.
 */
export function givenFromFlags(
  o: Record<string, unknown>,
  schema: ObjectSchema,
  table: FlagTable = {},
): Record<string, unknown> {
  const flags = schemaFlags(schema, table);
  const out: Record<string, unknown> = {};
  const bySection = new Map<string, SchemaFlag[]>();
  for (const f of flags) {
    const v = o[f.attribute];
    if (v === undefined) continue;
    const value = f.to ? f.to(v, o) : v;
    if (f.path.length === 1) out[f.path[0] as string] = value;
    else bySection.set(f.path[0] as string, [...(bySection.get(f.path[0] as string) ?? []), f]);
  }
  for (const [section, rule] of Object.entries(table.sections ?? {})) {
    const given = bySection.get(section) ?? [];
    const on = rule.switch ? Boolean(o[attributeOf(rule.switch)]) : given.length > 0;
    if (!on && given.length)
      throw new Error(`${given.map((f) => f.flag).join(", ")}: these are for ${rule.what}: add ${rule.switch}`);
    if (on) out[section] = Object.fromEntries(given.map((f) => [f.path[1], o[f.attribute]]));
  }
  // A section without a rule (none of the commands has one) takes its flags as they come.
  for (const [section, given] of bySection)
    if (!table.sections?.[section]) out[section] = Object.fromEntries(given.map((f) => [f.path[1], o[f.attribute]]));
  for (const s of table.shorthands ?? []) {
    const v = o[shorthandAttribute(s)];
    if (v === undefined) continue;
    if (s.fallback) {
      for (const p of s.sets) {
        const [section, key] = p.split(".") as [string, string];
        const into = { ...(out[section] as Record<string, unknown> | undefined) };
        into[key] ??= v;
        out[section] = into;
      }
      continue;
    }
    const targets = s.sets.filter((p) => out[p.split(".")[0] ?? ""] !== undefined);
    if (!targets.length) throw new Error(s.unused ?? `${s.flag.split(" ")[0]} sets nothing here`);
    for (const p of targets) {
      const [section, key] = p.split(".") as [string, string];
      const into = out[section] as Record<string, unknown>;
      if (into[key] !== undefined)
        throw new Error(`${s.flag.split(" ")[0]} and ${flagOf(flags, p).flag} both set ${p}: give one`);
      into[key] = v;
    }
  }
  return out;
}

/** The flag of each key path, for errors that name the flag (checkedFlags); a key only a shorthand sets, the shorthand's. */
export function flagNames(schema: ObjectSchema, table: FlagTable = {}): Record<string, string> {
  const own = Object.fromEntries(schemaFlags(schema, table).map((f) => [f.path.join("."), f.flag]));
  const byShorthand = (table.shorthands ?? []).flatMap((s) => s.sets.map((p) => [p, s.flag.split(" ")[0] ?? ""]));
  return { ...Object.fromEntries(byShorthand), ...own };
}

/** The settings the flags give, checked by the schema that owns them (errors name the flag). */
export function settingsFromFlags<T extends ObjectSchema>(
  o: Record<string, unknown>,
  schema: T,
  table: FlagTable = {},
  extra: Record<string, unknown> = {},
): z.infer<T> {
  return checkedFlags(
    schema,
    { ...givenFromFlags(o, schema, table), ...extra },
    flagNames(schema, table),
  ) as z.infer<T>;
}

/**
 * The flags that give these settings (the reverse of settingsFromFlags, for a recipe --help names:
 * `--optimizer adam --keep-best --target 0.2`). Top-level keys only; a key without a flag is left out.
 */
export function flagsFor(settings: Record<string, unknown>, schema: ObjectSchema, table: FlagTable = {}): string {
  const flags = schemaFlags(schema, table);
  return Object.entries(settings)
    .flatMap(([k, v]) => {
      const f = flags.find((x) => x.path.length === 1 && x.path[0] === k);
      if (!f || v === undefined) return [];
      if (f.kind === "boolean") return v ? [f.flag] : f.negatable ? [`--no-${f.flag.slice(2)}`] : [];
      return [`${f.flag} ${formatDefault(v, f.kind === "fraction")}`];
    })
    .join(" ");
}

/**
 * The PGD recipe's flags, as train and stitch both name them (the keys under `adversarial`):
 * --pgd-eps, --pgd-step, --pgd-steps, --adv-fraction, --random-start.
 */
export const PGD_FLAG_NAMES: FlagTable["keys"] = {
  "adversarial.eps": { flag: "--pgd-eps" },
  "adversarial.step": { flag: "--pgd-step" },
  "adversarial.steps": { flag: "--pgd-steps" },
  "adversarial.fraction": { flag: "--adv-fraction" },
  "adversarial.randomStart": { flag: "--random-start" },
};
