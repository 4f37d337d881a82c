// Null fronts (issue 40): what a stitch scores when the front knows nothing of the back's task,
// so that a pair's score can be read against chance. An experiment's `nulls` adds, for each pair
// of two different models, fronts of the pair's front architecture stitched into the same back at
// the same points, as pairs of their own (relation "null:KIND"):
//   untrained  the front's recipe at epoch 0: the very initialisation the front was trained from;
//   permuted   the front's recipe trained on the same (clean) images with their labels shuffled
//              across images once (data/dataset.ts permuteLabels): another task, learnable only
//              by memorising, that shares the images and nothing of the true task;
//   noise      no network: Smith et al.'s clustered random noise in the front's place, one cluster
//              per class at the point's shape (stitch/noise.ts), a sender with the labels and
//              nothing of the images: the labels-only sender. Its IRIs are their starts (its
//              features do not depend on the image), so it costs no descent and is stitched in
//              every mode of the pairs it stands beside, whatever nulls.modes says (which sets
//              the network nulls' modes, whose invariance-aware runs need IRI descents).
// They are ordinary models and pairs after this expansion, so the planner, the cache, the runner
// and the report take them as they take any other; the reading reads each real pair against them
// (beyondChance). An untrained or permuted null needs a recipe: a front loaded from a file has
// none, so it gets only the noise null, which needs the front's point shapes alone, and the plan
// says so.

import { isNoiseNull, isNullRelation, NULL_PREFIX } from "../findings/chance.js";
// Types only from spec.ts, which imports NULL_KINDS from here for its schema.
import type { Experiment, ModelSpec, TrainedModelSpec } from "./spec.js";

export const NULL_KINDS = ["untrained", "permuted", "noise"] as const;
export type NullKind = (typeof NULL_KINDS)[number];

export const nullRelation = (kind: NullKind): string => `${NULL_PREFIX}${kind}`;

/**
 * The front a pair's rows and plan lines name: a noise null's pair holds its real front (read for
 * the point shapes only), named apart as FRONT~noise.
 */
export const pairFrontName = (pair: { front: string; relation: string }): string =>
  isNoiseNull(pair.relation) ? `${pair.front}~noise` : pair.front;

/** A null front's training settings from its real front's: no shortcut, and the kind's change. */
function nullSpec(front: TrainedModelSpec, kind: NullKind): TrainedModelSpec {
  // Supervised on clean images: a Pixel, adversarial or SimCLR front's nulls are its architecture's.
  const { robustEval: _robustEval, simclr: _simclr, ...rest } = front;
  // A graded marker (markerAgreement) goes with the shortcut: one null for every grade.
  const base = { ...rest, shortcut: null, markerAgreement: 1, adversarial: null, method: "supervised" as const };
  return kind === "untrained" ? { ...base, epochs: 0 } : { ...base, labels: "permuted" };
}

/**
 * The experiment with its null fronts as models and pairs (the same experiment when it asks for
 * none), and what could not be made. A null model is made once per recipe: the demo's clean and
 * Pixel fronts share one once their shortcut is set aside, and it is stitched once per back,
 * points and stitching data (the cross-bias pair's are marked, so its nulls are scored marked).
 */
export function withNulls(exp: Experiment): { experiment: Experiment; notes: string[] } {
  const kinds = (exp.nulls?.kinds ?? []) as NullKind[];
  const { modes, replicates } = exp.nulls ?? {};
  // Expanded once: an experiment that holds null pairs already is returned as it is.
  if (kinds.length === 0 || exp.pairs.some((p) => isNullRelation(p.relation))) return { experiment: exp, notes: [] };
  // A null pair shares its back, data and points with the pairs it stands beside; a pair's own
  // adversarial stitching would need a null of each kind, which the summary cannot yet tell apart.
  const own = exp.pairs.findIndex((p) => p.adversarial !== undefined && p.front !== p.back);
  if (own >= 0)
    throw new Error(
      `pairs[${own}].adversarial: nulls are stitched as the experiment's stitch section says; a pair's own adversarial setting with nulls is not supported yet`,
    );
  const models: Record<string, ModelSpec> = { ...exp.models };
  const pairs = [...exp.pairs];
  const notes: string[] = [];
  // One model per recipe; one pair per model, back, front points and stitching data, holding every
  // point of the pairs it stands beside (two pairs of one front with overlapping points would
  // otherwise count each null replicate twice at the shared points).
  const modelOf = new Map<string, string>();
  const nullPairs = new Map<string, Experiment["pairs"][number]>();
  const expPoints = exp.points === "all" ? null : exp.points;
  for (const pair of exp.pairs) {
    if (pair.front === pair.back) continue;
    const front = exp.models[pair.front];
    if (!front) continue; // the planner names the missing model
    for (const kind of kinds) {
      if ("checkpoint" in front && kind !== "noise") {
        notes.push(
          `${pair.front}: no ${kind} null, since a model loaded from a file has no recipe to start or retrain it from`,
        );
        continue;
      }
      // The noise null's front is the real one, read for its point shapes only: one per architecture
      // (what sets the shapes: arch, width, options, data; a loaded model is its own), whichever
      // front comes first. Seeds and recipes do not change a shape, so they share it.
      const noise = kind === "noise";
      // Adversarial stitching trains T on attacks on the image, which the sender does not read:
      // a noise null beside adversarially stitched pairs would be another method, not their chance.
      if (noise && exp.stitch.adversarial) {
        notes.push(
          "nulls.kinds: noise is not stitched where stitch.adversarial is set (its features do not depend on the image)",
        );
        continue;
      }
      const shapes = "checkpoint" in front ? front : [front.arch, front.width, front.options, front.dataset];
      const spec = "checkpoint" in front || noise ? null : nullSpec(front, kind);
      const specKey = JSON.stringify(noise ? ["noise", shapes] : spec);
      let name = modelOf.get(specKey);
      if (noise && !name) {
        name = pair.front;
        modelOf.set(specKey, name);
      }
      if (!name && spec) {
        name = `${pair.front}~${kind}`;
        for (let i = 2; name in models; i++) name = `${pair.front}~${kind}${i}`;
        models[name] = spec;
        modelOf.set(specKey, name);
      }
      if (!name) continue;
      const key = JSON.stringify([name, pair.back, pair.frontPoints ?? null, pair.shortcut ?? null]);
      const had = nullPairs.get(key);
      if (had) {
        // Points: "all" (or the experiment's, where either pair takes those) wins; else the union.
        const mine = pair.points === undefined ? expPoints : pair.points === "all" ? null : pair.points;
        const theirs = had.points === undefined ? expPoints : had.points === "all" ? null : had.points;
        had.points = mine && theirs ? [...new Set([...theirs, ...mine])] : "all";
        if (replicates === undefined)
          had.replicates = Math.max(had.replicates ?? exp.replicates, pair.replicates ?? exp.replicates);
        // Modes: the nulls' own where given; else the union of the pairs' (the experiment's where either takes those).
        if (modes === undefined || noise)
          had.modes =
            had.modes === undefined || pair.modes === undefined
              ? undefined
              : [...new Set([...had.modes, ...pair.modes])];
        continue;
      }
      nullPairs.set(key, {
        front: name,
        back: pair.back,
        relation: nullRelation(kind),
        ...(pair.points !== undefined ? { points: pair.points } : {}),
        ...(pair.frontPoints !== undefined ? { frontPoints: pair.frontPoints } : {}),
        ...(replicates !== undefined
          ? { replicates }
          : pair.replicates !== undefined
            ? { replicates: pair.replicates }
            : {}),
        ...(noise
          ? pair.modes !== undefined
            ? { modes: pair.modes }
            : {}
          : modes !== undefined
            ? { modes }
            : pair.modes !== undefined
              ? { modes: pair.modes }
              : {}),
        ...(pair.shortcut !== undefined ? { shortcut: pair.shortcut } : {}),
      });
    }
  }
  pairs.push(...nullPairs.values());
  return { experiment: { ...exp, models, pairs }, notes: [...new Set(notes)] };
}
