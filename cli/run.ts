// `stitchlab run FILE`: an experiment file through the planner and the cache; `stitchlab task KEY`:
// one task of a planned graph (what each worker process runs); `stitchlab schema`: the experiment
// file's JSON Schema for editors.
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { type Plan, planExperiment } from "../experiments/plan.js";
import { writeResults } from "../experiments/results.js";
import { type RunEvent, runPlan } from "../experiments/runner.js";
import { type Experiment, experimentJsonSchema, readExperiment } from "../experiments/spec.js";
import { agreementTable, reading, residualTable } from "../experiments/summary.js";
import { isDone, loadTask, partials, runTask } from "../experiments/tasks.js";
import { repoRoot } from "../torch/native.js";
import { int } from "./parse.js";

/** The cache experiments share: --cache, else $STITCHLAB_CACHE, else $XDG_CACHE_HOME/stitchlab (~/.cache/stitchlab). */
export function defaultCache(): string {
  return process.env.STITCHLAB_CACHE ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "stitchlab");
}

export function dryRun(plan: Plan, cache: string): string {
  const lines: string[] = [];
  const kinds = ["train", "iris", "stitch"] as const;
  lines.push(`cache: ${cache}`);
  for (const k of kinds) {
    const all = plan.tasks.filter((t) => t.kind === k);
    const cached = all.filter((t) => isDone(cache, t.key)).length;
    lines.push(
      `${k.padEnd(7)} ${String(all.length).padStart(4)} tasks: ${cached} cached, ${all.length - cached} to run`,
    );
  }
  lines.push(`report  written from ${plan.stitches.length} stitch results`);
  const todo = plan.tasks.filter((t) => !isDone(cache, t.key));
  if (todo.length) lines.push("to run:", ...todo.map((t) => `  ${t.key}  ${t.label}`));
  const left = partials(cache);
  if (left.length) lines.push(`unfinished work from interrupted runs (resumed or redone): ${left.join(", ")}`);
  return lines.join("\n");
}

/** Progress lines on stderr: one per task start/end, and at most one progress line a second. */
export function eventPrinter(): (e: RunEvent) => void {
  let last = 0;
  return (e) => {
    const tag = `[${e.index}/${e.total}]`;
    if (e.kind === "start") console.error(`${tag} ${e.task.label} ...`);
    else if (e.kind === "done") console.error(`${tag} ${e.task.label}: done in ${e.seconds?.toFixed(1)} s`);
    else if (e.kind === "failed") console.error(`${tag} ${e.task.label}: FAILED: ${e.error}`);
    else if (e.kind === "skipped") console.error(`${tag} ${e.task.label}: skipped (${e.error})`);
    else if (Date.now() - last > 2000) {
      last = Date.now();
      console.error(
        `${tag}   ${Object.entries(e.fields ?? {})
          .map(([k, v]) => `${k} ${v}`)
          .join(", ")}`,
      );
    }
  };
}

/** Points the experiment's dataset (and models' own datasets of the same name) at dir. */
function withDataDir(exp: Experiment, dir: string): void {
  const name = exp.dataset.name;
  exp.dataset.root = resolve(dir);
  for (const m of Object.values(exp.models))
    if ("dataset" in m && m.dataset?.name === name) m.dataset.root = resolve(dir);
}

/** Plans, runs and reports an experiment; returns the number of failed or skipped tasks. */
export async function runExperiment(
  file: string,
  o: {
    out: string;
    cache?: string;
    scale?: string;
    workers?: number;
    dryRun?: boolean;
    dataDir?: string;
    read?: boolean;
  },
): Promise<number> {
  const cache = resolve(o.cache ?? defaultCache());
  const exp = readExperiment(file, o.scale);
  if (o.dataDir) withDataDir(exp, o.dataDir);
  const plan = planExperiment(exp, file);
  if (o.dryRun) {
    console.log(dryRun(plan, cache));
    return 0;
  }
  const summary = await runPlan(plan, { cache, workers: o.workers, onEvent: eventPrinter() });
  const { rows, iris } = await writeResults(plan, summary, cache, o.out, { scale: o.scale ?? "default" });
  console.log(`agreement probability (larger = more similar):\n${agreementTable(rows)}`);
  if (iris.length) console.log(`\nIRI residuals (relative; 0.1 or less is a good IRI):\n${residualTable(iris)}`);
  if (o.read)
    console.log(
      `\nReading:\n${reading(rows)
        .map((l) => `- ${l}`)
        .join("\n")}`,
    );
  const failed = Object.keys(summary.errors).length;
  console.log(
    `\n${o.out}: report.html, results.csv (${rows.length} runs); ${summary.seconds.toFixed(0)} s` +
      (failed ? `; ${failed} task(s) failed or skipped, see run.json` : ""),
  );
  return failed;
}

export function registerRunCommands(program: Command): void {
  program
    .command("run <file>")
    .description("run an experiment file (YAML or JSON): train -> iris -> stitch -> report, reusing the cache")
    .requiredOption(
      "--out <dir>",
      "experiment folder: report.html, results.csv, figures/, plan.json, run.json, env.json",
    )
    .option("--cache <dir>", "task cache shared by experiments (default $STITCHLAB_CACHE or ~/.cache/stitchlab)")
    .option("--scale <name>", "one of the file's scales (small, paper); default small when it has one")
    .option("--workers <n>", "tasks at once, each in its own process with its share of the cores", int, 1)
    .option("--dry-run", "print the task graph (per kind: cached, to run) and stop")
    .option("--data-dir <dir>", "the experiment dataset's root (overrides the file)")
    .action(async (file: string, o) => {
      const failed = await runExperiment(file, { ...o, read: true });
      if (failed) process.exitCode = 1;
    });

  program
    .command("demo")
    .description(
      "the main job: Fashion-MNIST, narrow ResNet-18s; standard and invariance-aware stitching for the pairs " +
        "identical, cross-seed and cross-bias; prints the table, the IRI residuals and a reading; writes report.html",
    )
    .option("--out <dir>", "experiment folder", "runs/demo")
    .option(
      "--data-dir <dir>",
      "where Fashion-MNIST's IDX files are (default: Debian's /usr/share/datasets/fashion-mnist)",
    )
    .option("--cache <dir>", "task cache (default $STITCHLAB_CACHE or ~/.cache/stitchlab)")
    .option("--workers <n>", "tasks at once", int, 2)
    .option("--dry-run", "print the task graph and stop")
    .action(async (o) => {
      const failed = await runExperiment(join(repoRoot, "presets", "demo.yaml"), { ...o, read: true });
      if (failed) process.exitCode = 1;
    });

  program
    .command("task <key>")
    .description("run one task of a planned graph (idempotent: exits at once when its output exists)")
    .option("--cache <dir>", "the cache the task was planned in", defaultCache())
    .action(async (key: string, o: { cache: string }) => {
      const cache = resolve(o.cache);
      let last = 0;
      const state = await runTask(cache, loadTask(cache, key), (fields) => {
        if (Date.now() - last > 1000) {
          last = Date.now();
          console.log(JSON.stringify(fields));
        }
      });
      console.log(JSON.stringify({ event: "done", key, state }));
    });

  program
    .command("schema")
    .description("print the JSON Schema of experiment files (for editor completion)")
    .action(() => console.log(JSON.stringify(experimentJsonSchema(), null, 2)));
}
