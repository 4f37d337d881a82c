// A plan's settings in words, read from its resolved configs (what the tasks ran and their keys
// hash): the settings paragraph of the reading and the report, and what the standard stitches do
// to real images (the control's hint, findings/reading.ts StandardRecipe). Here, beside the plan,
// because it reads the plan's tasks; findings/ only reads results.
import { datasetImageSize, markerSide } from "../data/index.js";
import type { StandardRecipe } from "../findings/reading.js";
import { iriStepCap } from "../stitch/iri-options.js";
import type { IrisTask, Plan, StitchTask } from "./plan.js";

export function standardRecipe(plan: Plan): StandardRecipe {
  const st = plan.tasks
    .map((t) => t.spec)
    .find((t): t is StitchTask => t.kind === "stitch" && t.config.mode === "standard")?.config;
  return { augmented: st?.augment !== false, bnMode: st?.bnMode ?? "adapt" };
}

/**
 * The settings a reader needs next to the numbers: models (widths, epochs, shortcuts), images,
 * the IRI optimiser and steps, stitching epochs and images, batch-norm modes, replicates. Read
 * from the plan's resolved configs (what the tasks ran and their keys hash), never re-derived.
 */
export function settingsLines(plan: Plan): string[] {
  const exp = plan.experiment;
  const configOf = (key: string) => plan.tasks.find((t) => t.key === key)?.spec;
  const models = Object.entries(plan.models).map(([name, ref]) => {
    const spec = "task" in ref ? configOf(ref.task) : undefined;
    if (spec?.kind !== "train") return `${name} (checkpoint ${"checkpoint" in ref ? ref.checkpoint : "?"})`;
    const m = spec.config;
    const width = m.modelOptions.width;
    return `${name} (${m.model}${width !== undefined ? ` width ${width}` : ""}${m.greyStem ? ", grey stem" : ""}, ${m.epochs} epochs in batches of ${m.batchSize} at lr ${m.lr}, seed ${m.seed}${m.shortcut ? `, ${m.shortcut} shortcut` : ""}${m.adversarial ? ", adversarial" : ""})`;
  });
  const d = exp.dataset;
  // The images' side, for the markers' size in pixels (the cell grows with the image).
  const side = datasetImageSize(d.name, { imageSize: d.imageSize, pad32: true });
  const iris = plan.tasks.map((t) => t.spec).find((t): t is IrisTask => t.kind === "iris");
  const stitch = (mode: string) =>
    plan.tasks.map((t) => t.spec).find((t): t is StitchTask => t.kind === "stitch" && t.config.mode === mode)?.config;
  const st = stitch("standard") ?? stitch("iris");
  const marked = exp.pairs.filter((p) => (p.shortcut !== undefined ? p.shortcut : exp.stitch.shortcut));
  // Only the modes the experiment runs are described.
  const bn = [
    ...(stitch("standard") ? [`${stitch("standard")?.bnMode} (standard)`] : []),
    ...(stitch("iris") ? [`${stitch("iris")?.bnMode} (invariance-aware)`] : []),
  ];
  // Adversarial stitching may differ per pair (a pair's own `adversarial`, null: none): one
  // clause per distinct setting, naming its pairs when not every pair has it.
  const advPairs = new Map<string, Set<string>>();
  for (const role of plan.stitches) {
    const spec = configOf(role.key);
    if (spec?.kind !== "stitch" || spec.config.mode !== "standard") continue;
    const a = spec.config.adversarial;
    const text = a ? `eps ${a.eps.toFixed(4)}, ${a.steps} steps, fraction ${a.fraction}` : "none";
    advPairs.set(text, (advPairs.get(text) ?? new Set()).add(role.relation));
  }
  const advSettings = [...advPairs.keys()].filter((t) => t !== "none");
  const adv = advSettings.length
    ? `Adversarial stitching (standard runs): T on PGD examples, ${[...advPairs.entries()]
        .map(([t, pairs]) => (advPairs.size === 1 ? t : `${t} for ${[...pairs].join(", ")}`))
        .join("; ")}. `
    : "";
  return [
    `Settings: ${d.name}${d.imageSize ? ` at ${d.imageSize} px` : ""}${d.limit ? `, ${d.limit} training images` : ""}${d.testLimit ? `, ${d.testLimit} test images` : ""}; models ${models.join("; ")}.`,
    (iris
      ? `IRIs: ${iris.limit ?? "all"} per front and point, ${iris.options.optimizer} optimiser, ${iris.options.steps} steps from ${iris.options.start === "image" ? "another image" : `${iris.options.start} noise`}${iris.options.keepBest ? ", best iterate kept" : ""}${iris.options.target !== undefined ? `, an image stopping at residual ${iris.options.target} and restarting up to ${iriStepCap(iris.options)} steps` : ""}. `
      : "") +
      (st
        ? `Stitching: ${st.epochs} epochs on ${st.limit ?? "all"} real images, batch ${st.batchSize}, Adam lr ${st.lr}${stitch("standard") ? (standardRecipe(plan).augmented ? ", augmented in standard runs (crop and flip)" : ", not augmented") : ""}; `
        : "") +
      `batch norm ${bn.join(" and ")}. ` +
      adv +
      `Replicates: ${exp.replicates}${exp.replicateBack ? " (back models too)" : " (one back model shared)"}.` +
      // Checkpoints cannot be retrained: their replicates vary the seeds of the method only.
      (exp.replicates > 1 && Object.values(plan.models).every((m) => !("task" in m))
        ? " The models are fixed checkpoints: replicates differ in IRI and stitching seeds only, the only source of variation the intervals measure."
        : "") +
      (exp.seedShift ? ` Every seed shifted by ${exp.seedShift} (--seed ${exp.seedShift}).` : "") +
      (marked.length
        ? ` Marked stitching data (training images, IRI sources, test set): ${marked.map((p) => `${p.relation} (${p.shortcut ?? exp.stitch.shortcut})`).join(", ")}.`
        : "") +
      (exp.dataset.markerScale !== 1
        ? ` Shortcut markers at ${d.markerScale}x the protocol's cell size (${markerSide(side, side, d.markerScale)} px squares at ${side} px).`
        : ""),
  ];
}
