// How tight must an IRI be (issue 27)? On a finished demo run's models (replicate 0: the clean
// back, the cross-seed front and the Pixel front), invariance-aware SLM agreement of both pairs at
// the middle and the last point, against the IRI set's mean residual, as the IRI descent is given
// more and more steps, for both recipes: the demo's (Adam from another image, keep-best) and the
// reference's (200 signed steps of 1/255 from uniform noise, generate_iris.py). Each setting is an
// experiment file run through `stitchlab run` on one cache, so every IRI set and stitch is a cached
// task. Writes bench/results/iri-tightness.json, docs/figures/iri-tightness.svg and prints a
// markdown table.
//
//   npm run bench -- iri-tightness --run DIR --cache DIR [--work DIR]
//     --run, --cache: the demo's run folder (runs/demo) and its cache (its replicate 0's models)
//   npm run bench -- iri-tightness --back F --cross-seed F --cross-bias F --cache DIR [--work DIR]
//     the three models' checkpoints given directly; the data settings are presets/demo.yaml's
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parse as parseYaml } from "yaml";
import { taskDir } from "../experiments/cache.js";
import { cliCommand } from "../experiments/tasks.js";
import { writeFileAtomic } from "../io/files.js";
import { csvRecords } from "../report/csv.js";
import { renderSvg } from "../report/render.js";

const here = dirname(fileURLToPath(import.meta.url));

/** The descent budgets tried per recipe (what 2 cores allow: about 20 minutes in all). */
const RECIPES = {
  adam: { iris: "{ optimizer: adam, start: image, keepBest: true", steps: [25, 50, 100, 200] },
  reference: { iris: "{ optimizer: sign, start: uniform", steps: [200] },
} as const;

export async function main(args: string[]): Promise<void> {
  const opt: Record<string, string> = {};
  const known = ["--run", "--cache", "--work", "--back", "--cross-seed", "--cross-bias"];
  for (let i = 0; i < args.length; i += 2) {
    if (!known.includes(args[i]))
      throw new Error(`iri-tightness: unknown option '${args[i]}'; options: ${known.join(", ")}`);
    opt[args[i].slice(2)] = args[i + 1];
  }
  if (!opt.cache || !(opt.run || (opt.back && opt["cross-seed"] && opt["cross-bias"])))
    throw new Error(
      "iri-tightness: give --cache and --run (a demo run folder), or --back, --cross-seed and --cross-bias",
    );
  type Exp = {
    dataset: { name: string; limit?: number; testLimit?: number; markerScale?: number };
    iris: { limit: number };
  };
  const plan = opt.run
    ? (JSON.parse(readFileSync(join(opt.run, "plan.json"), "utf8")) as {
        experiment: Exp;
        tasks: { key: string; label: string }[];
      })
    : { experiment: parseYaml(readFileSync(join(here, "..", "presets", "demo.yaml"), "utf8")) as Exp, tasks: [] };
  const given: Record<string, string | undefined> = {
    "clean-s0": opt.back,
    "clean-s1": opt["cross-seed"],
    "pixel-s1": opt["cross-bias"],
  };
  const model = (name: string) => {
    if (given[name]) return resolve(given[name]);
    const t = plan.tasks.find((x) => x.label === `train ${name}`);
    if (!t) throw new Error(`iri-tightness: ${opt.run} has no model ${name}`);
    return join(taskDir(opt.cache, "train", t.key), "model.safetensors");
  };
  const work = opt.work ?? mkdtempSync(join(tmpdir(), "stitchlab-iri-tightness-"));
  mkdirSync(work, { recursive: true });
  const d = plan.experiment.dataset;
  const points: { recipe: string; steps: number; pair: string; point: string; residual: number; agreement: number }[] =
    [];
  for (const [recipe, r] of Object.entries(RECIPES))
    for (const steps of r.steps) {
      const name = `${recipe}-${steps}`;
      const file = join(work, `${name}.yaml`);
      writeFileSync(
        file,
        [
          `name: iri-tightness-${name}`,
          `dataset: { name: ${d.name}, limit: ${d.limit}, testLimit: ${d.testLimit}, markerScale: ${d.markerScale ?? 1} }`,
          "models:",
          `  clean-s0: { checkpoint: ${model("clean-s0")} }`,
          `  clean-s1: { checkpoint: ${model("clean-s1")} }`,
          `  pixel-s1: { checkpoint: ${model("pixel-s1")} }`,
          "pairs:",
          "  - { front: clean-s1, back: clean-s0, relation: cross-seed }",
          "  - { front: pixel-s1, back: clean-s0, relation: cross-bias, shortcut: pixel }",
          "points: [layer2.1, layer4.1]",
          "objectives: [slm]",
          "modes: [iris]",
          `iris: ${r.iris}, steps: ${steps}, limit: ${plan.experiment.iris.limit} }`,
          `stitch: { limit: ${plan.experiment.iris.limit}, epochs: 30 }`,
          "",
        ].join("\n"),
      );
      const out = join(work, name);
      const t0 = performance.now();
      const run = spawnSync(
        process.execPath,
        [...cliCommand("run", file, "--out", out, "--cache", opt.cache, "--workers", "2")],
        {
          encoding: "utf8",
          stdio: ["ignore", "ignore", "inherit"],
        },
      );
      if (run.status !== 0) throw new Error(`iri-tightness: ${name} failed (status ${run.status})`);
      console.error(`iri-tightness: ${name} in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
      for (const row of csvRecords(join(out, "results.csv")))
        points.push({
          recipe,
          steps,
          pair: row.pair,
          point: row.point,
          residual: Number(row.iri_residual),
          agreement: Number(row.agreement_prob),
        });
    }
  const table = [
    "| recipe | steps | point | cross-seed residual | cross-seed agreement | cross-bias residual | cross-bias agreement | gap |",
    "|---|---|---|---|---|---|---|---|",
  ];
  for (const [recipe, r] of Object.entries(RECIPES))
    for (const steps of r.steps)
      for (const point of ["layer2.1", "layer4.1"]) {
        const at = (pair: string) =>
          points.find((p) => p.recipe === recipe && p.steps === steps && p.point === point && p.pair === pair);
        const [s, b] = [at("cross-seed"), at("cross-bias")];
        if (!s || !b) continue;
        table.push(
          `| ${recipe} | ${steps} | ${point} | ${s.residual.toFixed(3)} | ${s.agreement.toFixed(3)} | ${b.residual.toFixed(3)} | ${b.agreement.toFixed(3)} | ${(s.agreement - b.agreement).toFixed(3)} |`,
        );
      }
  console.log(table.join("\n"));
  const svg = await renderSvg({
    $schema: "https://vega.github.io/schema/vega-lite/v5.json",
    title: "Invariance-aware SLM agreement against the IRI set's mean residual",
    data: { values: points },
    facet: { column: { field: "point", type: "nominal", title: null } },
    spec: {
      width: 260,
      height: 200,
      layer: [
        {
          mark: { type: "line", point: true },
          encoding: {
            x: { field: "residual", type: "quantitative", title: "mean relative residual of the IRI set" },
            y: { field: "agreement", type: "quantitative", title: "agreement probability", scale: { domain: [0, 1] } },
            color: { field: "pair", type: "nominal" },
            strokeDash: { field: "recipe", type: "nominal" },
            shape: { field: "recipe", type: "nominal" },
          },
        },
      ],
    },
  });
  const figure = join(here, "..", "docs", "figures", "iri-tightness.svg");
  mkdirSync(dirname(figure), { recursive: true });
  writeFileAtomic(figure, [svg]);
  const path = join(here, "results", "iri-tightness.json");
  writeFileAtomic(path, [`${JSON.stringify({ run: opt.run, recipes: RECIPES, points }, null, 2)}\n`]);
  console.error(`iri-tightness: wrote ${path} and ${figure}`);
}
