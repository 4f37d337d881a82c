// From a run plan and the cache to the experiment's folder: results.csv and report.html (via
// report/), plan.json (what was asked), run.json (what happened to every task) and env.json.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import type { IriPreview, ModelRow, StitchRow, SummaryRow } from "../findings/index.js";
import { summarize } from "../findings/index.js";
import { reading, relianceLine, relianceWarnings, type Warning, warnings } from "../findings/reading.js";
import { readJsonFile, repoRoot, stitchlabVersion, writeFileAtomic } from "../io/files.js";
import { asModelSource, isStitchlabCheckpoint, sidecarPath } from "../models/checkpoint.js";
import { writeReport } from "../report/index.js";
import type { IriSetInfo } from "../stitch/iriset.js";
import type { StitchResult } from "../stitch/jobs.js";
import { fullRateLossFall } from "../stitch/train.js";
import * as torch from "../torch/index.js";
import { readManifest, taskDir } from "./cache.js";
import type { ModelRef, Plan } from "./plan.js";
import { settingsLines, standardRecipe } from "./plan-words.js";
import type { RunSummary } from "./runner.js";
import { modelSource } from "./tasks.js";

const readJson = <T>(path: string): T => readJsonFile<T>(path, "a cache entry's file");

/** The best of a model's recorded accuracies (a shortcut model's clean accuracy alone would undersell it). */
function bestAccuracy(acc: Record<string, number> | undefined): number | null {
  const vs = Object.values(acc ?? {}).filter((v) => Number.isFinite(v));
  return vs.length ? Math.max(...vs) : null;
}

/** A shortcut model's reliance on its marker: accuracy on marked minus on rolled test images (findings/grounding.ts); null without both. */
function markerReliance(acc: Record<string, number> | undefined): number | null {
  const marked = acc?.marked;
  const rolled = acc?.rolled;
  return marked !== undefined && rolled !== undefined && Number.isFinite(marked - rolled) ? marked - rolled : null;
}

/** The number of classes the stitches were scored on (10 when none has finished). */
function numClassesOf(plan: Plan, cache: string): number {
  for (const s of plan.stitches) {
    const path = join(taskDir(cache, "stitch", s.key), "scores.json");
    if (existsSync(path)) return readJson<StitchResult>(path).scores.numClasses;
  }
  return 10;
}

/** The thread count each made task of the plan recorded in its cache manifest, each read once. */
function madeThreads(plan: Plan, cache: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const t of plan.tasks) {
    const made = readManifest(cache, t.key)?.made.threads;
    if (typeof made === "number") out.set(t.key, made);
  }
  return out;
}

/**
 * The thread counts a task and every task it depends on ran with (sorted, distinct; a task not
 * made yet adds nothing). The thread count is not in the cache key (docs/experiments.md,
 * "Threads"), so a result can rest on tasks made with different counts.
 */
function lineageThreads(deps: Map<string, string[]>, made: Map<string, number>, key: string): number[] {
  const seen = new Set<string>();
  const counts = new Set<number>();
  const visit = (k: string) => {
    if (seen.has(k)) return;
    seen.add(k);
    const threads = made.get(k);
    if (threads !== undefined) counts.add(threads);
    for (const d of deps.get(k) ?? []) visit(d);
  };
  visit(key);
  return [...counts].sort((a, b) => a - b);
}

/** How many of the plan's made tasks ran with each thread count, e.g. "1 (40 tasks), 2 (9 tasks)". */
export function taskThreads(plan: Plan, cache: string): string {
  const n = new Map<number, number>();
  for (const threads of madeThreads(plan, cache).values()) n.set(threads, (n.get(threads) ?? 0) + 1);
  if (n.size === 0) return "not recorded";
  return [...n.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([threads, tasks]) => `${threads} (${tasks} task${tasks === 1 ? "" : "s"})`)
    .join(", ");
}

/** One row per finished stitch task. */
export function stitchRows(plan: Plan, cache: string): StitchRow[] {
  const rows: StitchRow[] = [];
  const deps = new Map(plan.tasks.map((t) => [t.key, t.deps]));
  const made = madeThreads(plan, cache);
  for (const s of plan.stitches) {
    const path = join(taskDir(cache, "stitch", s.key), "scores.json");
    if (!existsSync(path)) continue;
    const r = readJson<StitchResult>(path);
    rows.push({
      front: s.front,
      back: s.back,
      pair: s.relation,
      point: s.point,
      front_point: r.config.frontPoint,
      pointIndex: s.pointIndex,
      objective: s.objective,
      mode: s.mode,
      accuracy: r.scores.accuracy,
      back_accuracy: r.scores.backAccuracy,
      hard_agreement: r.scores.hardAgreement,
      agreement_prob: r.scores.agreementProbability,
      hard_error_consistency: r.scores.hardErrorConsistency,
      soft_error_consistency: r.scores.softErrorConsistency,
      cka: r.cka,
      excess_agreement: r.excess?.excessAgreement ?? null,
      robust_accuracy: r.robust?.scores.accuracy ?? null,
      robust_agreement_prob: r.robust?.scores.agreementProbability ?? null,
      test_data: r.testData,
      iri_residual: r.iris?.residuals.mean ?? null,
      bn_mode: r.config.bnMode,
      epochs: r.config.epochs,
      seed: s.seed,
      replicate: s.replicate,
      // A noise-cluster null's front sent nothing of its own: its checkpoint gave the shapes only.
      front_accuracy: r.config.noiseClusters ? null : bestAccuracy(r.front.accuracies),
      front_reliance: r.config.noiseClusters ? null : markerReliance(r.front.accuracies),
      front_alone_accuracy: r.frontAlone?.accuracy ?? null,
      front_alone_agreement_prob: r.frontAlone?.agreementProbability ?? null,
      agreement_prob_se: r.scores.agreementProbabilitySe ?? null,
      train_steps: r.config.epochs * Math.floor(r.training.trainImages / r.config.batchSize),
      t_loss: r.training.epochLosses.at(-1) ?? null,
      t_loss_fall: fullRateLossFall(r.training.epochLosses, r.config),
      iri_front_agreement: r.iris?.frontAgreement ?? null,
      front_clean_accuracy: r.config.noiseClusters ? null : (r.front.accuracies?.clean ?? null),
      threads: lineageThreads(deps, made, s.key).join("/"),
    });
  }
  return rows;
}

/**
 * Every base model of the run, the replicates' own included ("pixel-s1 rep 2"), with the
 * accuracies its checkpoint records (a shortcut model's clean, marked and rolled ones).
 */
export function modelRows(plan: Plan, cache: string): ModelRow[] {
  const rows: ModelRow[] = [];
  const named = new Map(
    Object.entries(plan.models).flatMap(([name, ref]) => ("task" in ref ? [[ref.task, name] as const] : [])),
  );
  const refs: [string, ModelRef][] = [
    ...Object.entries(plan.models).filter(([, ref]) => !("task" in ref)),
    // Trained models in plan order; a replicate's own is named by its task's label.
    ...plan.tasks
      .filter((t) => t.kind === "train")
      .map((t): [string, ModelRef] => [named.get(t.key) ?? t.label.replace(/^train /, ""), { task: t.key }]),
  ];
  for (const [name, ref] of refs) {
    const source = asModelSource(modelSource(cache, ref));
    if (!isStitchlabCheckpoint(source.checkpoint)) {
      // Weights made elsewhere: what the experiment file says of them (no recorded accuracies).
      // A trained model not made yet (a failed or unfinished task) is left out.
      if (!existsSync(source.checkpoint) || "task" in ref) continue;
      rows.push({
        name,
        arch: source.arch ?? "",
        dataset: "",
        shortcut: null,
        adversarial: false,
        seed: 0,
        accuracies: {},
      });
      continue;
    }
    const side = sidecarPath(source.checkpoint);
    const m = readJson<{
      arch: string;
      dataset?: string;
      shortcut?: string | null;
      markerAgreement?: number;
      adversarial?: unknown;
      seed?: number;
      accuracies?: Record<string, number>;
    }>(side);
    rows.push({
      name,
      arch: m.arch,
      dataset: m.dataset ?? "",
      shortcut: m.shortcut ?? null,
      ...(m.markerAgreement !== undefined ? { markerAgreement: m.markerAgreement } : {}),
      adversarial: Boolean(m.adversarial),
      seed: m.seed ?? 0,
      accuracies: m.accuracies ?? {},
    });
  }
  return rows;
}

/**
 * Every IRI set of the plan with its residuals and preview, named by front (and replicate) and
 * point; where one front has sets at a point on clean and on marked images (a null front standing
 * beside a clean and a marked pair), each name says which ("[clean]", "[pixel]").
 */
export function irisSummaries(plan: Plan, cache: string): (IriPreview & { key: string })[] {
  const out: (IriPreview & { key: string; data: string })[] = [];
  const seen = new Set<string>();
  for (const s of plan.stitches) {
    if (!s.irisKey || seen.has(s.irisKey)) continue;
    seen.add(s.irisKey);
    const dir = taskDir(cache, "iris", s.irisKey);
    if (!existsSync(join(dir, "iris.json"))) continue;
    const info = readJson<IriSetInfo>(join(dir, "iris.json"));
    out.push({
      key: s.irisKey,
      data: info.shortcut ?? "clean",
      front: s.replicate > 0 ? `${s.front} (replicate ${s.replicate})` : s.front,
      point: s.point,
      residuals: info.residuals,
      ...(info.previewResiduals ? { previewResiduals: info.previewResiduals } : {}),
      ...(info.frontAgreement !== undefined ? { frontAgreement: info.frontAgreement } : {}),
      png: readFileSync(join(dir, "preview.png")),
    });
  }
  const named = (x: IriPreview) => `${x.front}\u0000${x.point}`;
  const sets = new Map<string, number>();
  for (const x of out) sets.set(named(x), (sets.get(named(x)) ?? 0) + 1);
  return out.map(({ data, ...x }) => ((sets.get(named(x)) ?? 0) > 1 ? { ...x, front: `${x.front} [${data}]` } : x));
}

function gitCommit(): string {
  try {
    return execFileSync("git", ["rev-parse", "--short", "HEAD"], {
      cwd: repoRoot,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    }).trim();
  } catch {
    return "unknown";
  }
}

export function environment(
  extra: Record<string, string | number | boolean> = {},
): Record<string, string | number | boolean> {
  const b = torch.buildInfo();
  return {
    stitchlab: stitchlabVersion,
    commit: gitCommit(),
    libtorch: b.torch,
    node: process.version,
    cores: availableParallelism(),
    cuda: torch.cuda.isAvailable(),
    ...extra,
  };
}

/** Writes the experiment's folder; returns the rows for printing. */
export async function writeResults(
  plan: Plan,
  summary: RunSummary,
  cache: string,
  out: string,
  extra: Record<string, string | number | boolean> = {},
): Promise<{
  rows: StitchRow[];
  /** summarize(rows), made once here for the reading, the report's tables and figures, and the terminal. */
  summary: SummaryRow[];
  iris: (IriPreview & { key: string })[];
  reading: string[];
  warnings: Warning[];
  /** True when nothing finished and an earlier report in `out` was left as it was. */
  kept: boolean;
}> {
  mkdirSync(out, { recursive: true });
  const rows = stitchRows(plan, cache);
  // A run in which no stitch finished has nothing to report: an earlier run's report in the same
  // folder is worth more than an empty one (the errors are in the terminal and in the cache).
  if (rows.length === 0 && existsSync(join(out, "results.csv")))
    return { rows, summary: [], iris: [], reading: [], warnings: [], kept: true };
  const iris = irisSummaries(plan, cache);
  // One reading for the terminal and the report (findings/reading.ts).
  const summarized = summarize(rows);
  const models = modelRows(plan, cache);
  const warned = [...warnings(rows, numClassesOf(plan, cache)), ...relianceWarnings(models)];
  const read = reading(rows, {
    settings: settingsLines(plan),
    recipe: standardRecipe(plan),
    warnings: warned,
    summary: summarized,
    reliance: relianceLine(models),
  });
  // The runner's own thread count says nothing of the tasks' (each worker gets cores / workers):
  // env.json and the report give the counts the tasks recorded in their manifests.
  const env = { ...environment({ cache, ...extra }), threads: taskThreads(plan, cache) };
  const failed = Object.entries(summary.errors).map(([k, e]) => `${k}: ${e}`);
  writeFileAtomic(join(out, "plan.json"), [
    `${JSON.stringify({ experiment: plan.experiment, tasks: plan.tasks.map((t) => ({ key: t.key, label: t.label, deps: t.deps })) }, null, 2)}\n`,
  ]);
  writeFileAtomic(join(out, "run.json"), [
    `${JSON.stringify({ seconds: summary.seconds, states: summary.states, errors: summary.errors }, null, 2)}\n`,
  ]);
  writeFileAtomic(join(out, "env.json"), [`${JSON.stringify(env, null, 2)}\n`]);
  await writeReport(
    {
      title: plan.experiment.name,
      rows,
      summary: summarized,
      models,
      iris,
      environment: env,
      reading: read,
      warnings: warned.map((w) => ({ text: `${w.where}: ${w.what}`, tag: w.tag, rows: w.rows })),
      notes: [
        ...(plan.experiment.description ? [plan.experiment.description] : []),
        ...(failed.length ? [`${failed.length} task(s) failed or were skipped: ${failed.join("; ")}`] : []),
      ],
    },
    out,
  );
  return { rows, summary: summarized, iris, reading: read, warnings: warned, kept: false };
}
