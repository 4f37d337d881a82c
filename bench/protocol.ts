// How far does the fast protocol (compare's and the demo's defaults) stand from the full one
// (issue 52)? Each factor the fast protocol cuts is grown one at a time from the fast setting,
// everything else held, and every (pair, point, mode) is scored at each size:
// - images: IRIs per set and T's real images together (48, 192, 768), T's optimiser steps held at
//   about 120 (one batch of 48 per step). The least-squares start reads min(initImages, limit)
//   real images (stitch/config.ts), so it grows with them: the factor is the two together;
// - steps: T's optimiser steps (120, 480, 1,920) on the fast 48 images;
// - recipe: the IRI recipe: the reference's (uniform noise, 200 signed steps of 1/255, the last
//   iterate: pgd_iris.py with random_start in every config), tight from noise (start uniform, stop
//   at residual 0.2, restarts), tight from another image (the fast default);
// - noise-steps: T's steps (480) with IRIs from noise, the start the defaults took;
// - settled: every factor at its largest at once, the run the others are measured against;
// - shipped: the scale's defaults as they ship (the demo's preset, compare's COMPARE_DEFAULTS),
//   whatever they are now, measured against the settled run like every other setting.
// Two scales: `--scale demo`, the demo's models (presets/demo.yaml: width 1/8, Fashion-MNIST;
// identical, cross-seed and cross-bias, three fronts each; trained once in the cache, as the demo
// trains them), and `--scale full`, two full-width ResNet-18s of different seeds and B into
// itself (bench/compare-full.ts's models, or --a/--b checkpoints). Each setting is an experiment
// file run through `stitchlab run` on one cache, so a rerun (or a study cut short) reruns only what
// is missing. Writes bench/results/protocol-SCALE.json and prints a markdown table per factor:
// each cell mean ± 95% interval over replicates, with the IRI sets' mean residual and descent steps.
//
//   npm run bench -- protocol --scale demo|full [--work DIR] [--cache DIR] [--factors LIST]
//                            (factors: images, steps, recipe, noise-steps, settled, shipped; default all)
//                            [--replicates N] [--workers N] [--a CKPT --b CKPT]
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parse as parseYaml, stringify } from "yaml";
import { taskDir } from "../experiments/cache.js";
import { COMPARE_DEFAULTS } from "../experiments/compare.js";
import { cliCommand } from "../experiments/tasks.js";
import { CONTROL_MIN_AGREEMENT } from "../findings/reading.js";
import { closeness } from "../findings/verdict.js";
import { compareIntervals, type Interval, interval } from "../metrics/interval.js";
import { csvRecords } from "../report/csv.js";

const here = dirname(fileURLToPath(import.meta.url));

/** The fast IRI recipe (compare's and the demo's: TIGHT_IRIS), and the reference's. */
const RECIPES = {
  "tight-image": { optimizer: "adam", steps: 200, keepBest: true, start: "image", target: 0.2, maxSteps: 600 },
  "tight-noise": { optimizer: "adam", steps: 200, keepBest: true, start: "uniform", target: 0.2, maxSteps: 600 },
  reference: { optimizer: "sign", steps: 200, keepBest: false, start: "uniform" },
} as const;

type Recipe = keyof typeof RECIPES;

/**
 * One setting of the study: the IRI recipe, the images per set (IRIs and T's), and T's steps; or
 * "shipped", the scale's own defaults as they ship (presets/demo.yaml's iris and stitch sections,
 * compare's COMPARE_DEFAULTS), so that the defaults are always measured against the settled run.
 */
export interface Setting {
  factor: string;
  name: string;
  recipe: Recipe | "shipped";
  images: number;
  steps: number;
}

/** T's batch in every setting: the fast protocol's one batch of 48. */
const BATCH = 48;

export const FACTORS: Record<string, Setting[]> = {
  images: [48, 192, 768].map((images) => ({
    factor: "images",
    name: `images-${images}`,
    recipe: "tight-image",
    images,
    steps: 120,
  })),
  steps: [120, 480, 1920].map((steps) => ({
    factor: "steps",
    name: `steps-${steps}`,
    recipe: "tight-image",
    images: 48,
    steps,
  })),
  recipe: (Object.keys(RECIPES) as Recipe[]).map((recipe) => ({
    factor: "recipe",
    name: `recipe-${recipe}`,
    recipe,
    images: 48,
    steps: 120,
  })),
  // T's steps again from noise: the candidate defaults (480 came within 0.05 of the settled run).
  "noise-steps": [480].map((steps) => ({
    factor: "noise-steps",
    name: `noise-steps-${steps}`,
    recipe: "tight-noise",
    images: 48,
    steps,
  })),
  settled: [{ factor: "settled", name: "settled", recipe: "tight-noise", images: 768, steps: 1920 }],
  // Images and steps as the scale's defaults set them (read from there: settingYaml).
  shipped: [{ factor: "shipped", name: "shipped", recipe: "shipped", images: 0, steps: 0 }],
};

/** The experiment file of one setting at one scale. */
/** One scale of the study: its models, pairs, data, T's learning rate (null: the stitching default) and replicates. */
interface Scale {
  name: string;
  models: Record<string, unknown>;
  pairs: unknown[];
  dataset: unknown;
  lr: number | null;
  replicates: number;
  /** The scale's shipped IRI and stitching settings (the "shipped" setting runs them as they are). */
  shipped: { iris: Record<string, unknown>; stitch: Record<string, unknown> };
}

export function settingYaml(s: Setting, scale: Scale): string {
  const batches = Math.max(1, Math.floor(s.images / BATCH));
  return stringify({
    name: `protocol-${scale.name}-${s.name}`,
    description: `the protocol study, ${scale.name} scale: ${s.factor} at ${s.name}`,
    dataset: scale.dataset,
    models: scale.models,
    pairs: scale.pairs,
    points: ["layer2.1", "layer4.1"],
    objectives: ["slm"],
    modes: ["standard", "iris"],
    replicates: scale.replicates,
    ...(s.recipe === "shipped"
      ? scale.shipped
      : {
          iris: { limit: s.images, ...RECIPES[s.recipe] },
          // T's steps are epochs times the batches of its images (the last partial batch dropped).
          stitch: {
            limit: s.images,
            batchSize: BATCH,
            epochs: Math.max(1, Math.round(s.steps / batches)),
            ...(scale.lr === null ? {} : { lr: scale.lr }),
          },
        }),
  });
}

/** The demo's models, pairs and data (presets/demo.yaml), three fronts each, without its nulls. */
export function demoScale(replicates: number): Scale {
  const demo = parseYaml(readFileSync(join(here, "..", "presets", "demo.yaml"), "utf8")) as {
    dataset: unknown;
    models: Record<string, unknown>;
    pairs: unknown[];
    iris: Record<string, unknown>;
    stitch: Record<string, unknown> & { lr: number };
  };
  return {
    name: "demo",
    models: demo.models,
    pairs: demo.pairs,
    dataset: demo.dataset,
    lr: demo.stitch.lr,
    replicates,
    shipped: { iris: demo.iris, stitch: demo.stitch },
  };
}

/** Two full-width checkpoints (A of another seed than B) and B into itself, as compare plans them. */
export function fullScale(a: string, b: string, replicates: number): Scale {
  return {
    name: "full",
    models: { a: { checkpoint: a }, b: { checkpoint: b } },
    pairs: [
      { front: "b", back: "b", relation: "identical", replicates: 1 },
      { front: "a", back: "b", relation: "cross-seed" },
    ],
    dataset: { name: "fashion-mnist", testLimit: 1000 },
    // compare's: the stitching default's lr (1e-3).
    lr: null,
    replicates,
    shipped: { iris: { ...COMPARE_DEFAULTS.iris }, stitch: { ...COMPARE_DEFAULTS.stitch } },
  };
}

export interface Cell {
  setting: string;
  factor: string;
  pair: string;
  point: string;
  mode: string;
  n: number;
  mean: number;
  halfWidth: number;
  residual: number | null;
  descentSteps: number | null;
}

export async function main(args: string[]): Promise<void> {
  const opt: Record<string, string> = {};
  const known = ["--scale", "--work", "--cache", "--factors", "--replicates", "--workers", "--a", "--b"];
  for (let i = 0; i < args.length; i += 2) {
    if (!known.includes(args[i] as string))
      throw new Error(`protocol: unknown option '${args[i]}'; options: ${known.join(", ")}`);
    opt[(args[i] as string).slice(2)] = args[i + 1] as string;
  }
  const scaleName = opt.scale ?? "demo";
  if (!["demo", "full"].includes(scaleName)) throw new Error(`protocol: --scale demo or full, not ${scaleName}`);
  const factors = (opt.factors ?? Object.keys(FACTORS).join(",")).split(",");
  for (const f of factors)
    if (!FACTORS[f]) throw new Error(`protocol: unknown factor '${f}'; factors: ${Object.keys(FACTORS).join(", ")}`);
  const replicates = Number(opt.replicates ?? (scaleName === "demo" ? 3 : 1));
  const work = resolve(opt.work ?? join(tmpdir(), `stitchlab-protocol-${scaleName}`));
  const cache = resolve(opt.cache ?? join(work, "cache"));
  mkdirSync(work, { recursive: true });
  let scale: Scale;
  if (scaleName === "demo") scale = demoScale(replicates);
  else {
    const fullWork = join(tmpdir(), "stitchlab-compare-full");
    const a = resolve(opt.a ?? join(fullWork, "resnet18-s1", "model.safetensors"));
    const b = resolve(opt.b ?? join(fullWork, "resnet18-s0", "model.safetensors"));
    for (const f of [a, b])
      if (!existsSync(f))
        throw new Error(`protocol: no checkpoint ${f}: run npm run bench -- compare-full first, or give --a and --b`);
    scale = fullScale(a, b, replicates);
  }

  const cells: Cell[] = [];
  for (const setting of factors.flatMap((f) => FACTORS[f] as Setting[])) {
    const file = join(work, `${setting.name}.yaml`);
    writeFileSync(file, settingYaml(setting, scale));
    const out = join(work, setting.name);
    const t0 = performance.now();
    const run = spawnSync(
      process.execPath,
      cliCommand("run", file, "--out", out, "--cache", cache, "--workers", opt.workers ?? "2", "--force"),
      { encoding: "utf8", stdio: ["ignore", "ignore", "inherit"] },
    );
    if (run.status !== 0) throw new Error(`protocol: ${setting.name} failed (status ${run.status})`);
    console.error(`protocol: ${setting.name} in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
    cells.push(...readCells(out, cache, setting));
  }
  const distances = distancesFromSettled(cells);
  const result = {
    scale: scaleName,
    replicates,
    settings: factors.flatMap((f) => FACTORS[f]),
    shipped: scale.shipped,
    settled: FACTORS.settled,
    cells,
    distances,
  };
  const path = join(here, "results", `protocol-${scaleName}.json`);
  writeFileSync(path, `${JSON.stringify(result, null, 2)}\n`);
  console.log(tables(cells).join("\n"));
  console.log(distanceTable(distances).join("\n"));
  console.error(`protocol: wrote ${path}`);
}

/** A setting's cells from its run: agreement over replicates, and its IRI sets' residual and descent steps. */
export function readCells(out: string, cache: string, s: Setting): Cell[] {
  const rows = csvRecords(join(out, "results.csv")).filter((r) => r.test_data !== undefined);
  const plan = JSON.parse(readFileSync(join(out, "plan.json"), "utf8")) as {
    tasks: { key: string; label: string }[];
  };
  // Each IRI set's record: its front and point from the label ("iris FRONT @ POINT ...").
  const sets = plan.tasks
    .filter((t) => t.key.startsWith("iris-"))
    .map((t) => {
      const info = JSON.parse(readFileSync(join(taskDir(cache, "iris", t.key), "iris.json"), "utf8")) as {
        residuals: { mean: number };
        descent?: { meanSteps: number };
      };
      const m = /^iris (\S+) @ (\S+)/.exec(t.label);
      return { front: m?.[1], point: m?.[2], residual: info.residuals.mean, steps: info.descent?.meanSteps ?? null };
    });
  const out2: Cell[] = [];
  const keys = new Set(rows.map((r) => `${r.pair}\t${r.point}\t${r.mode}`));
  for (const k of keys) {
    const [pair, point, mode] = k.split("\t") as [string, string, string];
    const these = rows.filter((r) => r.pair === pair && r.point === point && r.mode === mode);
    const iv = interval(these.map((r) => Number(r.agreement_prob)));
    const fronts = new Set(these.map((r) => r.front));
    const mine = sets.filter((x) => fronts.has(x.front as string) && x.point === point);
    const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
    out2.push({
      setting: s.name,
      factor: s.factor,
      pair,
      point,
      mode,
      n: these.length,
      mean: iv.mean,
      halfWidth: iv.halfWidth,
      residual: mode === "iris" ? mean(mine.map((x) => x.residual)) : null,
      descentSteps: mode === "iris" ? mean(mine.flatMap((x) => (x.steps === null ? [] : [x.steps]))) : null,
    });
  }
  return out2;
}

/** One markdown table per factor: a row per setting, a column per (pair, point, mode). */
export function tables(cells: Cell[]): string[] {
  const lines: string[] = [];
  for (const factor of [...new Set(cells.map((c) => c.factor))]) {
    const mine = cells.filter((c) => c.factor === factor);
    const cols = [...new Set(mine.map((c) => `${c.pair} ${c.point} ${c.mode}`))];
    lines.push(`\n${factor}:`, `| setting | ${cols.join(" | ")} |`, `|---|${cols.map(() => "---").join("|")}|`);
    for (const setting of [...new Set(mine.map((c) => c.setting))])
      lines.push(
        `| ${setting} | ${cols
          .map((col) => {
            const c = mine.find((x) => x.setting === setting && `${x.pair} ${x.point} ${x.mode}` === col);
            if (!c) return "";
            const ci = Number.isFinite(c.halfWidth) ? ` ± ${c.halfWidth.toFixed(3)}` : "";
            const iri =
              c.residual === null
                ? ""
                : ` (r ${c.residual.toFixed(2)}${c.descentSteps === null ? "" : `, ${c.descentSteps.toFixed(0)} steps`})`;
            return `${c.mean.toFixed(3)}${ci}${iri}`;
          })
          .join(" | ")} |`,
      );
  }
  return lines;
}

/** A cell's interval over its replicates (Student t; one replicate: none). */
const cellInterval = (c: Cell): Interval => ({
  n: c.n,
  mean: c.mean,
  std: Number.NaN,
  halfWidth: c.halfWidth,
  lo: c.mean - c.halfWidth,
  hi: c.mean + c.halfWidth,
  dropped: 0,
});

/**
 * A setting's verdicts, each a key and its answer: per pair and point, standard against
 * invariance-aware by compare's rule (close or apart: experiments/compare.ts closeness); per point,
 * cross-seed against every other pair in invariance-aware mode (higher, lower or overlap: the
 * demo's reading); and whether the control (identical) holds CONTROL_MIN_AGREEMENT everywhere.
 */
export function verdictsOf(cells: Cell[]): Record<string, string> {
  const out: Record<string, string> = {};
  const find = (pair: string, point: string, mode: string) =>
    cells.find((c) => c.pair === pair && c.point === point && c.mode === mode);
  const points = [...new Set(cells.map((c) => c.point))];
  const pairs = [...new Set(cells.map((c) => c.pair))];
  for (const point of points) {
    for (const pair of pairs.filter((p) => p !== "identical")) {
      const [std, iri] = [find(pair, point, "standard"), find(pair, point, "iris")];
      if (std && iri)
        out[`${pair} ${point}: standard vs invariance-aware`] = closeness(cellInterval(std), cellInterval(iri));
    }
    const seed = find("cross-seed", point, "iris");
    for (const pair of pairs.filter((p) => p !== "identical" && p !== "cross-seed")) {
      const other = find(pair, point, "iris");
      if (seed && other)
        out[`cross-seed vs ${pair} ${point}: invariance-aware`] = compareIntervals(
          cellInterval(seed),
          cellInterval(other),
        );
    }
  }
  const control = cells.filter((c) => c.pair === "identical");
  if (control.length) out.control = control.every((c) => c.mean >= CONTROL_MIN_AGREEMENT) ? "passed" : "failed";
  return out;
}

/** How far one setting stands from the settled one: the largest distance of a cell's mean, where, and the verdicts that differ. */
export interface Distance {
  setting: string;
  maxAbs: number;
  at: string;
  differ: string[];
}

/** Every setting's distance from the settled setting (none without a settled run). */
export function distancesFromSettled(cells: Cell[]): Distance[] {
  const settled = cells.filter((c) => c.setting === "settled");
  if (!settled.length) return [];
  const key = (c: Cell) => `${c.pair} ${c.point} ${c.mode}`;
  const base = verdictsOf(settled);
  const out: Distance[] = [];
  for (const setting of [...new Set(cells.map((c) => c.setting))].filter((s) => s !== "settled")) {
    const mine = cells.filter((c) => c.setting === setting);
    let maxAbs = 0;
    let at = "";
    for (const c of mine) {
      const s = settled.find((x) => key(x) === key(c));
      if (s && Math.abs(c.mean - s.mean) > maxAbs) [maxAbs, at] = [Math.abs(c.mean - s.mean), key(c)];
    }
    const v = verdictsOf(mine);
    const differ = Object.keys(base)
      .filter((k) => k in v && v[k] !== base[k])
      .map((k) => `${k}: ${v[k]} (settled: ${base[k]})`);
    out.push({ setting, maxAbs, at, differ });
  }
  return out;
}

/** The distances as a markdown table. */
export function distanceTable(ds: Distance[]): string[] {
  if (!ds.length) return ["", "(no settled run: no distances)"];
  return [
    "",
    "distance from the settled setting:",
    "| setting | largest distance of a mean | where | verdicts that differ |",
    "|---|---|---|---|",
    ...ds.map(
      (d) => `| ${d.setting} | ${d.maxAbs.toFixed(3)} | ${d.at} | ${d.differ.length ? d.differ.join("; ") : "none"} |`,
    ),
  ];
}
