// Flags made from the schemas (issue 38, cli/schema-flags.ts): every key of every schema a command
// takes has its flag, with the schema's bounds and choices, and the flag and an experiment file's
// key give the same resolved config. The keys are walked here independently of the module (from
// the schemas' own shapes), so a key the module dropped would be found missing.
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { Command, type Option } from "commander";
import type { z } from "zod";
import { registerCompareCommand } from "../cli/compare.js";
import { COMPARE_FLAGS, sizesFromFlags } from "../cli/compare-study.js";
import { compareRecipeFlags, IRIS_FLAGS, irisConfigFromFlags, registerIrisCommand } from "../cli/iris.js";
import { dataTable, imageSide, int } from "../cli/parse.js";
import { type FlagTable, formatDefault, givenFromFlags, type SchemaFlag, schemaFlags } from "../cli/schema-flags.js";
import { registerStitchCommand, STITCH_FLAGS, stitchConfigFromFlags } from "../cli/stitch.js";
import { registerTrainCommand, TRAIN_FLAGS, trainConfigFromFlags } from "../cli/train.js";
import { taskKey } from "../experiments/cache.js";
import { COMPARE_DEFAULTS } from "../experiments/compare.js";
import { type IrisTask, type Plan, planExperiment, type StitchTask } from "../experiments/plan.js";
import { datasetSchema, experimentSchema, parseExperiment } from "../experiments/spec.js";
import { irisSettingsSchema, stitchSettingsSchema } from "../stitch/config.js";
import { trainSettingsSchema } from "../train/config.js";

const root = join(import.meta.dirname, "..");
const tmp = mkdtempSync(join(tmpdir(), "stitchlab-schema-flags-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

type Obj = z.ZodObject<z.ZodRawShape>;
interface Def {
  type: string;
  innerType?: z.ZodType;
  shape?: Record<string, z.ZodType>;
}
const def = (s: z.ZodType) => (s as unknown as { _zod: { def: Def } })._zod.def;

/**
 * Every key path of a schema, a section's keys in place of the section (the walk the flags must
 * cover); but an object the command's table fills from one flag (stitch's --bn-mode: the batch
 * norm of its one --mode) is one key.
 */
function keyPaths(schema: Obj, table: FlagTable, prefix: string[] = []): string[] {
  return Object.entries(schema.shape as Record<string, z.ZodType>).flatMap(([k, v]) => {
    if (table.keys?.[[...prefix, k].join(".")]?.to) return [[...prefix, k].join(".")];
    let s = v;
    while (["optional", "nullable", "default"].includes(def(s).type) && def(s).innerType)
      s = def(s).innerType as z.ZodType;
    return def(s).type === "object" ? keyPaths(s as Obj, table, [...prefix, k]) : [[...prefix, k].join(".")];
  });
}

/** A command as registered, and its options by long flag. */
function command(register: (p: Command) => void, name: string): { cmd: Command; options: Map<string, Option> } {
  const program = new Command();
  register(program);
  const cmd = program.commands.find((c) => c.name() === name);
  if (!cmd) throw new Error(`no command ${name}`);
  cmd.exitOverride().configureOutput({ writeErr: () => {} });
  return { cmd, options: new Map(cmd.options.map((o) => [o.long ?? "", o])) };
}

/** The options as commander parses them from argv, on a fresh command. */
function parsed(register: (p: Command) => void, name: string, argv: string[]): Record<string, unknown> {
  const { cmd } = command(register, name);
  cmd.parseOptions(argv);
  return cmd.opts();
}

const STITCH_DATA = dataTable(["root", "imageSize", "markerScale", "testLimit"]);
const IRIS_DATA = dataTable(["root", "imageSize", "markerScale"]);
const TRAIN_DATA = dataTable(["root", "imageSize", "markerScale", "limit", "testLimit"]);

interface Schemas {
  name: string;
  register: (p: Command) => void;
  schemas: { schema: Obj; table: FlagTable; keys: string[] }[];
}
const COMMANDS: Schemas[] = [
  {
    name: "stitch",
    register: registerStitchCommand,
    schemas: [
      { schema: stitchSettingsSchema, table: STITCH_FLAGS, keys: keyPaths(stitchSettingsSchema, STITCH_FLAGS) },
      { schema: datasetSchema, table: STITCH_DATA, keys: ["name", ...(STITCH_DATA.only ?? [])] },
    ],
  },
  {
    name: "iris",
    register: registerIrisCommand,
    schemas: [
      { schema: irisSettingsSchema, table: IRIS_FLAGS, keys: keyPaths(irisSettingsSchema, IRIS_FLAGS) },
      { schema: datasetSchema, table: IRIS_DATA, keys: ["name", ...(IRIS_DATA.only ?? [])] },
    ],
  },
  {
    name: "train",
    register: registerTrainCommand,
    schemas: [
      { schema: trainSettingsSchema, table: TRAIN_FLAGS, keys: keyPaths(trainSettingsSchema, TRAIN_FLAGS) },
      { schema: datasetSchema, table: TRAIN_DATA, keys: ["name", ...(TRAIN_DATA.only ?? [])] },
    ],
  },
];

/** The flags of a command's schemas, each key's once. */
const flagsOf = (c: Schemas): SchemaFlag[] => c.schemas.flatMap((s) => schemaFlags(s.schema, s.table));

test("every key of every schema a command takes has its flag, declared on the command, with the schema's choices", () => {
  for (const c of COMMANDS) {
    const { options } = command(c.register, c.name);
    for (const { schema, table, keys } of c.schemas) {
      const flags = schemaFlags(schema, table);
      const paths = flags.map((f) => f.path.join("."));
      assert.deepEqual([...paths].sort(), [...new Set(keys)].sort(), `${c.name}: a flag per key, none other`);
      for (const f of flags) {
        const o = options.get(f.flag);
        assert.ok(o, `${c.name} ${f.flag} (${f.path.join(".")}) is declared`);
        assert.ok(f.help.trim().length > 0, `${c.name} ${f.flag} has help`);
        if (f.choices) assert.deepEqual(o.argChoices, f.choices, `${c.name} ${f.flag}'s choices`);
        // A default is shown as the schema holds it, never as a number written in cli/.
        if (f.default !== undefined && f.default !== null && f.kind !== "boolean")
          assert.ok(
            f.help.endsWith(`(default ${formatDefault(f.default, f.kind === "fraction")})`) || f.kind === "list",
          );
        if (f.negatable) assert.ok(options.get(`--no-${f.flag.slice(2)}`), `${c.name} --no-${f.flag.slice(2)}`);
      }
    }
  }
});

test("each number's flag takes the schema's bounds: its limits pass, a step beyond them is refused, naming the flag", () => {
  let checked = 0;
  for (const c of COMMANDS) {
    const { options } = command(c.register, c.name);
    for (const f of flagsOf(c)) {
      if (!["number", "integer", "fraction"].includes(f.kind)) continue;
      const parse = options.get(f.flag)?.parseArg as ((v: string, prev: unknown) => unknown) | undefined;
      assert.ok(parse, `${c.name} ${f.flag} has a parser`);
      const step = f.kind === "integer" ? 1 : 1e-6;
      const b = f.bounds;
      const refuses = (v: number) => assert.throws(() => parse(String(v), undefined), /./, `${f.flag} ${v}`);
      if (b.maximum !== undefined) {
        assert.equal(parse(String(b.maximum), undefined), b.maximum, `${c.name} ${f.flag} takes its maximum`);
        refuses(b.maximum + step);
        checked++;
      }
      if (b.minimum !== undefined) {
        assert.equal(parse(String(b.minimum), undefined), b.minimum, `${c.name} ${f.flag} takes its minimum`);
        refuses(b.minimum - step);
        checked++;
      }
      if (b.exclusiveMinimum !== undefined) refuses(b.exclusiveMinimum);
      if (b.exclusiveMaximum !== undefined) refuses(b.exclusiveMaximum);
      if (f.kind === "integer") refuses((b.minimum ?? 0) + 1.5);
    }
  }
  assert.ok(checked > 30, `only ${checked} bounds checked`);
  // The bounds the issue found missing: --marker-scale stops at 8 as a file does, in every command.
  for (const c of COMMANDS) {
    const f = flagsOf(c).find((x) => x.flag === "--marker-scale");
    assert.equal(f?.bounds.maximum, 8, c.name);
  }
  // Pixel units are read as a file reads them.
  const { options } = command(registerStitchCommand, "stitch");
  assert.equal(options.get("--pgd-eps")?.parseArg?.("8/255", undefined), 8 / 255);
  assert.equal(options.get("--milestones")?.parseArg?.("1/3,2/3", undefined)?.[0], 1 / 3);
});

// ---- flag and file: one resolved config per key ----

interface Parts {
  dataset?: Record<string, unknown>;
  model?: Record<string, unknown>;
  pair?: Record<string, unknown>;
  iris?: Record<string, unknown>;
  stitch?: Record<string, unknown>;
}
const plan = (p: Parts): Plan =>
  planExperiment(
    parseExperiment(
      JSON.stringify({
        name: "keys",
        dataset: { name: "fashion-mnist", limit: 1024, testLimit: 256, ...p.dataset },
        models: { a: { arch: "resnet18", width: 0.125, seed: 0, epochs: 4, ...p.model } },
        pairs: [{ front: "a", back: "a", relation: "identical", ...p.pair }],
        points: ["layer1.0"],
        objectives: ["slm"],
        ...(p.iris ? { iris: p.iris } : {}),
        ...(p.stitch ? { stitch: p.stitch } : {}),
      }),
      "keys.json",
    ),
    join(tmp, "keys.json"),
  );

/** A valid value other than the default, as a flag writes it (null: a switch) and as a file does. */
function another(f: SchemaFlag): { argv: string[]; value: unknown } {
  const d = f.default;
  switch (f.kind) {
    case "boolean":
      return f.negatable ? { argv: [`--no-${f.flag.slice(2)}`], value: false } : { argv: [f.flag], value: true };
    case "enum": {
      const v = f.choices?.find((x) => x !== d) ?? f.choices?.[0];
      return { argv: [f.flag, String(v)], value: v };
    }
    case "fraction": {
      const text = formatDefault(typeof d === "number" ? d / 2 : 4 / 255, true);
      return { argv: [f.flag, text], value: text };
    }
    case "integer": {
      const v = typeof d === "number" ? (f.bounds.maximum === d ? d - 1 : d + 1) : Math.max(3, f.bounds.minimum ?? 0);
      return { argv: [f.flag, String(v)], value: v };
    }
    case "number": {
      const v = typeof d === "number" ? d / 2 : 0.5;
      return { argv: [f.flag, String(v)], value: v };
    }
    case "list": {
      const [first, ...rest] = d as number[];
      const v = [(first as number) / 2, ...rest];
      const fraction = f.path.at(-1) === "milestones";
      return { argv: [f.flag, formatDefault(v, fraction)], value: fraction ? v.map((x) => formatDefault(x, true)) : v };
    }
    case "text":
      return { argv: [f.flag, "elsewhere"], value: "elsewhere" };
    case "yaml":
      return { argv: [f.flag, "{stem: imagenet}"], value: { stem: "imagenet" } };
  }
}

/** A key set at `path` in a file part, its section made where it has one. */
function put(part: Record<string, unknown> | undefined, path: string[], value: unknown): Record<string, unknown> {
  const out = { ...part };
  if (path.length === 1) out[path[0] as string] = value;
  else out[path[0] as string] = { ...(out[path[0] as string] as object), [path[1] as string]: value };
  return out;
}

/**
 * What a key needs beside it to mean something (as flags and as file parts), and the values the
 * generic choice cannot take; `file: false` where a file does not take the key (stitch's seed:
 * a file's seeds are the experiment's).
 */
interface Extra {
  argv?: string[];
  parts?: Parts;
  value?: { argv: string[]; value: unknown };
  file?: false;
}
const MARKED = { argv: ["--shortcut", "pixel"] };
const EVALUATED = { argv: ["--robust-eval-steps", "20"], parts: { model: { robustEval: { steps: 20 } } } };
/** The base's dataset is fashion-mnist, the first choice: another one. */
const MNIST = { value: { argv: ["--dataset", "mnist"], value: "mnist" } };
const EXTRAS: Record<string, Record<string, Extra>> = {
  stitch: {
    name: MNIST,
    seed: { file: false },
    bnMode: { value: { argv: ["--bn-mode", "batch"], value: { standard: "batch" } } },
    imageSize: { value: { argv: ["--image-size", "28"], value: 28 } },
    markerScale: { ...MARKED, parts: { pair: { shortcut: "pixel" } } },
    // At least one full batch of the default size (the planner refuses fewer images than a batch).
    limit: { value: { argv: ["--limit", "256"], value: 256 } },
  },
  iris: {
    name: MNIST,
    target: { argv: ["--keep-best"], parts: { iris: { keepBest: true } } },
    maxSteps: {
      argv: ["--keep-best", "--target", "0.2"],
      parts: { iris: { keepBest: true, target: 0.2 } },
      value: { argv: ["--max-steps", "400"], value: 400 },
    },
    imageSize: { value: { argv: ["--image-size", "28"], value: 28 } },
    markerScale: { ...MARKED, parts: { pair: { shortcut: "pixel" } } },
    // At least one full stitching batch of IRIs (the planner refuses fewer than a batch).
    limit: { value: { argv: ["--limit", "256"], value: 256 } },
  },
  train: {
    name: MNIST,
    arch: { value: { argv: ["--model", "resnet50"], value: "resnet50" } },
    // A clean model is evaluated only when steps or settings ask (train/config.ts resolveTrainRobustEval).
    "robustEval.attack": { ...EVALUATED, value: { argv: ["--robust-eval-attack", "pgd"], value: "pgd" } },
    "robustEval.stepSize": EVALUATED,
    imageSize: { value: { argv: ["--image-size", "28"], value: 28 } },
    markerScale: { ...MARKED, parts: { model: { shortcut: "pixel" } } },
    markerAgreement: { ...MARKED, parts: { model: { shortcut: "pixel" } } },
    "simclr.epochs": { argv: ["--method", "simclr"], parts: { model: { method: "simclr" } } },
    "simclr.temperature": { argv: ["--method", "simclr"], parts: { model: { method: "simclr" } } },
  },
};

/** Each command's base: its flags, where its config comes from in a plan, and what of it the plan does not hold. */
const BASE = {
  stitch: {
    argv: [
      ...["--front", "f.safetensors", "--back", "b.safetensors", "--point", "layer1.0", "--objective", "slm"],
      ...["--mode", "standard", "--dataset", "fashion-mnist", "--out", "x", "--test-limit", "256"],
    ],
    fromFlags: (o: Record<string, unknown>) => {
      const { front: _f, back: _b, iris: _i, device: _d, ...c } = stitchConfigFromFlags(o);
      return c;
    },
    fromPlan: (p: Plan) =>
      p.tasks.map((t) => t.spec).find((s): s is StitchTask => s.kind === "stitch" && s.config.mode === "standard")
        ?.config,
  },
  iris: {
    argv: ["--front", "f.safetensors", "--point", "layer1.0", "--dataset", "fashion-mnist", "--out", "x"],
    fromFlags: (o: Record<string, unknown>) => {
      const { front: _f, device: _d, ...c } = irisConfigFromFlags(o);
      return c;
    },
    fromPlan: (p: Plan) => {
      const s = p.tasks.map((t) => t.spec).find((x): x is IrisTask => x.kind === "iris");
      if (!s) return undefined;
      const { kind: _k, front: _f, ...c } = s;
      return c;
    },
  },
  train: {
    argv: [
      ...["--model", "resnet18", "--dataset", "fashion-mnist", "--out", "x", "--width", "0.125", "--seed", "0"],
      ...["--epochs", "4", "--limit", "1024", "--test-limit", "256"],
    ],
    fromFlags: (o: Record<string, unknown>) => trainConfigFromFlags(o),
    fromPlan: (p: Plan) => {
      const t = p.tasks.find((x) => x.kind === "train");
      return t?.spec.kind === "train" ? t.spec.config : undefined;
    },
  },
} as const;

/** argv with `extra`'s flags replacing the base's of the same name. */
function merged(base: readonly string[], ...extra: string[][]): string[] {
  const out = [...base];
  for (const e of extra)
    for (let i = 0; i < e.length; i++) {
      const flag = e[i] as string;
      const hasValue = i + 1 < e.length && !(e[i + 1] as string).startsWith("--");
      const at = out.indexOf(flag);
      if (at >= 0) out.splice(at, hasValue ? 2 : 1);
      out.push(...(hasValue ? [flag, e[i + 1] as string] : [flag]));
      if (hasValue) i++;
    }
  return out;
}

test("every key: its flag and an experiment file's key give the same resolved config, and the value reaches it", () => {
  let compared = 0;
  for (const c of COMMANDS) {
    const base = BASE[c.name as keyof typeof BASE];
    const where = c.name === "train" ? "model" : (c.name as "stitch" | "iris");
    const plain = base.fromFlags(parsed(c.register, c.name, [...base.argv]));
    assert.deepEqual(plain, base.fromPlan(plan({})), `${c.name}: the base itself`);
    for (const { schema, table } of c.schemas)
      for (const f of schemaFlags(schema, table)) {
        const id = f.path.join(".");
        const extra = EXTRAS[c.name]?.[id] ?? {};
        const { argv, value } = extra.value ?? another(f);
        // A section's switch, where it has one (--adversarial, --robust-eval).
        const section = f.path.length > 1 ? table.sections?.[f.path[0] as string] : undefined;
        const sw = section?.switch ? [section.switch] : [];
        const o = parsed(c.register, c.name, merged(base.argv, extra.argv ?? [], sw, argv));
        const fromFlags = base.fromFlags(o);
        const label = `${c.name} ${argv.join(" ")}`;
        // The value reached the config (but where the key has one value only: stitch's optimizer).
        if (!(f.choices?.length === 1)) assert.notDeepEqual(fromFlags, plain, `${label}: changes the config`);
        if (extra.file === false) continue;
        // Into the file: the dataset section's keys into dataset:, the rest into the command's section.
        const isData = schema === datasetSchema;
        const parts: Parts = { ...extra.parts };
        if (isData) parts.dataset = put(parts.dataset, f.path[0] === "name" ? ["name"] : f.path, value);
        else parts[where] = put(parts[where], f.path, value);
        const fromFile = base.fromPlan(plan(parts));
        assert.deepEqual(fromFlags, fromFile, `${label}: the flag and the file`);
        compared++;
        if (c.name === "train")
          assert.equal(
            taskKey("train", { kind: "train", config: fromFlags }),
            plan(parts).tasks.find((t) => t.kind === "train")?.key,
            `${label}: one task key`,
          );
      }
  }
  // Every key of the three schemas and their data sections but stitch's seed.
  assert.ok(compared >= 60, `only ${compared} keys compared`);
});

test("a shorthand sets each of its keys whose section is on, and is refused beside a flag of its own key", () => {
  const o = (argv: string[]) => parsed(registerStitchCommand, "stitch", merged(BASE.stitch.argv, argv));
  const both = givenFromFlags(
    o(["--adversarial", "--robust-eval", "--eps", "4/255"]),
    stitchSettingsSchema,
    STITCH_FLAGS,
  );
  assert.deepEqual(both.adversarial, { eps: 4 / 255 });
  assert.deepEqual(both.robustEval, { eps: 4 / 255 });
  // The file keeps them apart; so do the flags now.
  const apart = stitchConfigFromFlags(
    o(["--adversarial", "--robust-eval", "--pgd-eps", "4/255", "--robust-eval-eps", "8/255"]),
  );
  assert.deepEqual([apart.adversarial?.eps, apart.robustEval?.eps], [4 / 255, 8 / 255]);
  assert.throws(
    () => stitchConfigFromFlags(o(["--adversarial", "--eps", "4/255", "--pgd-eps", "2/255"])),
    /--eps and --pgd-eps both set adversarial\.eps/,
  );
  assert.throws(() => stitchConfigFromFlags(o(["--eps", "4/255"])), /--eps is the radius/);
  assert.equal(stitchConfigFromFlags(o(["--adversarial", "--random-start"])).adversarial?.randomStart, true);
});

test("iris --help names compare's IRI recipe in iris's flags, read from compare's own settings", () => {
  const recipe = compareRecipeFlags();
  const { limit: _l, ...tight } = COMPARE_DEFAULTS.iris;
  // The recipe's flags give compare's settings back.
  const o = parsed(registerIrisCommand, "iris", [...BASE.iris.argv, ...recipe.split(" ")]);
  assert.deepEqual(givenFromFlags(o, irisSettingsSchema, IRIS_FLAGS), tight);
  for (const words of ["--optimizer adam", "--start uniform", "--keep-best", "--target 0.2", "--max-steps 600"])
    assert.ok(recipe.includes(words), words);
  const { cmd } = command(registerIrisCommand, "iris");
  assert.ok(cmd.description().includes(recipe));
  assert.match(cmd.description(), /defaults are the protocol's signed steps/);
});

test("no default is written in the command files: their help reads it from the schema", () => {
  for (const file of ["cli/stitch.ts", "cli/iris.ts", "cli/train.ts"]) {
    const text = readFileSync(join(root, file), "utf8");
    assert.doesNotMatch(text, /default:? \d/, file);
    assert.doesNotMatch(text, /\d+\/255/, file);
  }
});

test("compare's size flags are the experiment file's keys: their bounds, and --limit and --batch-size as shorthands", () => {
  const { options } = command(registerCompareCommand, "compare");
  const flags = schemaFlags(experimentSchema, COMPARE_FLAGS);
  assert.deepEqual(flags.map((f) => f.flag).sort(), [
    "--epochs",
    "--iris-limit",
    "--iris-steps",
    "--replicates",
    "--stitch-augment",
    "--stitch-limit",
    "--test-limit",
  ]);
  for (const f of flags) {
    assert.ok(options.get(f.flag), f.flag);
    // A switch that is on by default (stitch.augment: the protocol's) is turned off by --no-...
    if (f.kind === "boolean") {
      assert.ok(options.get(`--no-${f.flag.slice(2)}`), `--no-${f.flag.slice(2)}`);
      continue;
    }
    // The fast protocol's default, read from COMPARE_DEFAULTS.
    assert.ok(f.help.endsWith(`(default ${formatDefault(f.default)})`), f.flag);
  }
  const parse = (flag: string, v: string) => options.get(flag)?.parseArg?.(v, undefined);
  assert.throws(() => parse("--replicates", "1001"), /at most 1000/);
  assert.throws(() => parse("--epochs", "0"), /./);
  assert.throws(() => parse("--limit", "0"), /./, "--limit has the limits' bounds");
  assert.throws(() => parse("--batch-size", "65537"), /at most 65536/);
  const given = (argv: string[]) => sizesFromFlags(parsed(registerCompareCommand, "compare", argv));
  assert.deepEqual(given([]), {});
  assert.deepEqual(given(["--limit", "64", "--batch-size", "32"]), {
    iris: { limit: 64, batchSize: 32 },
    stitch: { limit: 64, batchSize: 32 },
  });
  // --iris-limit and --stitch-limit narrow --limit, each for its own.
  assert.deepEqual(given(["--limit", "64", "--iris-limit", "16", "--epochs", "3", "--test-limit", "200"]), {
    iris: { limit: 16 },
    stitch: { limit: 64, epochs: 3 },
    dataset: { testLimit: 200 },
  });
});

test("a count flag gives one message for a bad value, made from a schema or written by hand (int)", () => {
  // --cka-images is a count from 0, as int's are.
  const made = command(registerStitchCommand, "stitch").options.get("--cka-images")?.parseArg;
  assert.ok(made);
  const message = (f: () => unknown) => {
    try {
      f();
    } catch (e) {
      return (e as Error).message;
    }
    return "no error";
  };
  for (const bad of ["abc", "", "1.5", "-1"])
    assert.equal(
      message(() => int(bad)),
      message(() => made(bad, undefined)),
      bad,
    );
  assert.equal(int("12"), 12);
});

test("--device is added in one place (cli/device.ts deviceOption): one parser, one default, one help", () => {
  const cli = fileURLToPath(new URL("../cli/", import.meta.url));
  const by = readdirSync(cli)
    .filter((f) => f.endsWith(".ts") && f !== "device.ts")
    .filter((f) => /["'`]--device[ <"'`]/.test(readFileSync(join(cli, f), "utf8")));
  assert.deepEqual(by, [], "files that add --device by hand");
  // And the commands that compute all have it, through deviceOption.
  const uses = readdirSync(cli).filter(
    (f) => f.endsWith(".ts") && /deviceOption\(/.test(readFileSync(join(cli, f), "utf8")),
  );
  for (const f of ["demo.ts", "iris.ts", "run.ts", "stitch.ts", "train.ts"]) assert.ok(uses.includes(f), f);
});

test("every --image-size (a model's, both models', the data's) is read by one parser, imageSide", () => {
  const cli = fileURLToPath(new URL("../cli/", import.meta.url));
  const lines = readdirSync(cli)
    .filter((f) => f.endsWith(".ts"))
    .flatMap((f) =>
      readFileSync(join(cli, f), "utf8")
        .split("\n")
        .filter((l) => /image-size <px>/.test(l))
        .map((l) => `${f}: ${l.trim()}`),
    );
  assert.ok(lines.length >= 5, lines.join("\n"));
  assert.deepEqual(
    lines.filter((l) => !/imageSide\)/.test(l)),
    [],
  );
  assert.equal(imageSide("224"), 224);
  for (const bad of ["0", "-3", "1.5", "abc"])
    assert.throws(() => imageSide(bad), /invalid|expected|must|>=|too small|integer|number/i, bad);
});
