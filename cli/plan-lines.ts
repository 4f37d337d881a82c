// The plan of an experiment as the user reads it before the run, one form for `demo` and
// `compare` (each printed its own, and they had drifted): the pairs and replicates, the models to
// train, the points, modes and objectives, the data, the IRI recipe, T's recipe, and the tasks with
// how many the cache holds. Read from the tasks' resolved settings, so the defaults are the schemas'.
import { isDone } from "../experiments/cache.js";
import { pairFrontName } from "../experiments/nulls.js";
import type { IrisTask, Plan, StitchTask, TrainTask } from "../experiments/plan.js";
import { standardRecipe } from "../experiments/plan-words.js";
import { stitchModeWords } from "../stitch/config.js";
import { iriStepCap } from "../stitch/iri-options.js";

const plural = (n: number, w: string) => `${n} ${w}${n === 1 ? "" : "s"}`;

/**
 * A pair's relation in words: the control for "identical"; none for a relation that only names
 * the direction (compare's A->B, B->A: the arrow between the models' names says it).
 */
function relationWords(relation: string): string {
  if (relation === "identical") return " (the control)";
  return /^\w+->\w+$/.test(relation) ? "" : ` (${relation})`;
}

/**
 * The plan's lines under `title` ("demo", "compare"); `notes` (compare's intervals) come before
 * the tasks line.
 */
export function planLines(title: string, plan: Plan, cache: string, notes: string[] = []): string[] {
  const e = plan.experiment;
  const of = (kind: string) => plan.tasks.filter((t) => t.kind === kind);
  const count = (kind: string, what: string) =>
    of(kind).length
      ? [`${of(kind).length} ${what} (${of(kind).filter((t) => isDone(cache, t.key)).length} cached)`]
      : [];
  const pairs = e.pairs.map(
    (p) =>
      `${pairFrontName(p)} -> ${p.back}${relationWords(p.relation)}, ${plural(p.replicates ?? e.replicates, "replicate")}${p.modes ? `, ${p.modes.map(stitchModeWords).join(" and ")} only` : ""}${p.shortcut ? `, ${p.shortcut}-marked data` : ""}`,
  );
  // The models to train, grouped by recipe (seeds and shortcuts aside).
  const recipes = new Map<string, number>();
  for (const t of of("train")) {
    const c = (t.spec as TrainTask).config;
    const width = c.modelOptions.width !== undefined ? ` width ${c.modelOptions.width}` : "";
    // An epoch-0 model (a null front) is built, not trained.
    const r =
      c.epochs === 0
        ? `build: ${c.model}${width} at its initialisation (a null front)`
        : `train: ${c.model}${width}, ${c.epochs} epochs on ${c.limit ?? "all"} ${c.dataset} images, batch ${c.batchSize}`;
    recipes.set(r, (recipes.get(r) ?? 0) + 1);
  }
  const iri = of("iris")[0]?.spec as IrisTask | undefined;
  const io = iri?.options;
  const st = (of("stitch")[0]?.spec as StitchTask | undefined)?.config;
  const points = [...new Set(plan.stitches.map((s) => s.point))];
  const modes = [...new Set(plan.stitches.map((s) => stitchModeWords(s.mode)))];
  return [
    `${title}: ${pairs.join("; ")}`,
    ...(recipes.size ? [`  models     ${[...recipes].map(([r, n]) => `${n} to ${r}`).join("; ")}`] : []),
    `  points     ${points.join(", ")} (${points.length})`,
    ...pairedByDepth(plan),
    `  modes      ${modes.join(", ")}; objectives ${e.objectives.join(", ")}`,
    `  data       ${e.dataset.name}${e.dataset.imageSize ? ` at ${e.dataset.imageSize} px` : ""}${e.dataset.root ? ` (${e.dataset.root})` : ""}, ${st?.testLimit ?? "all"} test images`,
    ...(iri && io
      ? [
          `  IRIs       ${iri.limit ?? "all"} per model and point, ${io.optimizer} ${io.steps} steps${io.start === "image" ? " from another image" : ` from ${io.start} noise`}${io.keepBest ? ", keep-best" : ""}${io.target !== undefined ? `; an image stops at residual ${io.target}, restarts up to ${iriStepCap(io)} steps` : ""}`,
        ]
      : []),
    ...(st
      ? [
          `  stitching  ${st.epochs} epochs on ${st.limit ?? "all"} real images (or the IRIs), batch ${st.batchSize}, Adam lr ${st.lr}${standardRecipe(plan).augmented ? "" : "; real images not augmented"}`,
        ]
      : []),
    ...notes,
    ...plan.notes.map((n) => `  note       ${n}`),
    `  tasks      ${[...count("train", "models"), ...count("iris", "IRI sets"), ...count("stitch", "stitches")].join(", ")}; cache ${cache}`,
  ];
}

/**
 * Where a pair's front is another architecture (its frontPoints): which of the front's points
 * stitches into which of the back's, and by what rule (experiments/compare.ts pairByDepth).
 */
function pairedByDepth(plan: Plan): string[] {
  const lines: string[] = [];
  for (const p of plan.experiment.pairs) {
    if (!p.frontPoints) continue;
    const pairs = Object.entries(p.frontPoints).map(([back, front]) => `${p.front}'s ${front} -> ${p.back}'s ${back}`);
    lines.push(`             paired by relative depth: ${pairs.join(", ")}`);
  }
  return lines;
}
