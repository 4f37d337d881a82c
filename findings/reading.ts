// What an experiment's results say, for the terminal and the report alike (one text, made here):
// the agreement table with 95% intervals over replicates (findings/summary.ts), rAuA and excess
// agreement per pair, sanity warnings, and the reading. A difference between pairs is
// stated only when the seed-level test finds it (findings/chance.ts SEED_TEST_RULE); otherwise the
// reading says "not told apart with N replicates" (docs/method.md, "Replicates").

import { maxExcessAgreement } from "../metrics/excess.js";
import { type Interval, interval } from "../metrics/interval.js";
import { rAuA } from "../metrics/raua.js";
import { holm, type WelchTest, welch } from "../metrics/welch.js";
import { GOOD_IRI_RESIDUAL } from "../stitch/residuals.js";
import { chanceLines, differenceWords, isNullRelation, SEED_TEST_ALPHA } from "./chance.js";
import { groundingLines, groundingRows } from "./grounding.js";
import type { IriPreview, ModelRow, StitchRow } from "./rows.js";
import {
  formatInterval,
  groupBy,
  groupKey,
  perReplicate,
  pointsOf,
  rowKey,
  type SummaryRow,
  summarize,
} from "./summary.js";

function columns(lines: string[][]): string {
  const widths = lines[0].map((_, i) => Math.max(...lines.map((l) => (l[i] ?? "").length)));
  return lines
    .map((l) =>
      l
        .map((c, i) => c.padEnd(widths[i]))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

/**
 * Agreement probability, one line per (pair, objective, mode), one column per point: mean ± 95%
 * half-width. `summary`: summarize(rows), passed in where the report already made it.
 */
export function agreementTable(rows: StitchRow[], summary: SummaryRow[] = summarize(rows)): string {
  const points = pointsOf(rows);
  const lines = [["pair", "front->back", "objective", "mode", "n", ...points]];
  for (const ss of groupBy(summary, groupKey).values()) {
    const s = ss[0];
    const data = s.test_data === "clean" ? "" : ` [${s.test_data}]`;
    lines.push([
      `${s.pair}${data}`,
      `${s.front}->${s.back}`,
      s.objective,
      s.mode,
      String(Math.max(...ss.map((x) => x.n))),
      ...points.map((p) => formatInterval(ss.find((x) => x.point === p)?.scores.agreement_prob)),
    ]);
  }
  return columns(lines);
}

export function residualTable(iris: IriPreview[]): string {
  return iris
    .map(
      (i) =>
        `${i.front} @ ${i.point}: mean ${i.residuals.mean.toFixed(3)}, median ${i.residuals.median.toFixed(3)}, ` +
        `p90 ${i.residuals.p90.toFixed(3)}, share <= ${GOOD_IRI_RESIDUAL}: ${(100 * i.residuals.below01).toFixed(0)}%` +
        (i.frontAgreement !== undefined ? `, A's own class kept: ${(100 * i.frontAgreement).toFixed(0)}%` : ""),
    )
    .join("\n");
}

export interface CurveSummary {
  pair: string;
  objective: string;
  mode: string;
  test_data: string;
  /** rAuA (mean agreement over the points run, per replicate), summarised over replicates. */
  rAuA: Interval;
  /**
   * The same over the agreement on adversarial test images (robust_agreement_prob), the
   * reference's rAuA for adversarial stitching (construct_plots/adversarial_stitching.py reads
   * test_robust there); null where the runs did not score robustly.
   */
  robustRAuA: Interval | null;
  /** Excess agreement: the maximum over points of the replicate-averaged difference (null without excess). */
  maxExcess: { value: number; point: string; interval: Interval } | null;
}

/** rAuA and the excess-agreement summary per (pair, objective, mode). */
export function curveSummaries(rows: StitchRow[]): CurveSummary[] {
  const points = pointsOf(rows);
  const out: CurveSummary[] = [];
  for (const rs of groupBy(rows, groupKey).values()) {
    // rAuA per replicate: the mean over points of the seed-averaged agreement.
    const replicates = [...new Set(rs.map((r) => r.replicate))].sort((a, b) => a - b);
    const curvesOf = (score: (r: StitchRow) => number) =>
      replicates.map((rep) => {
        const mine = rs.filter((r) => r.replicate === rep);
        const values = points.flatMap((p) =>
          perReplicate(
            mine.filter((r) => r.point === p),
            score,
          ),
        );
        return values.length && values.every(Number.isFinite) ? rAuA(values) : Number.NaN;
      });
    const curves = curvesOf((r) => r.agreement_prob);
    const robust = rs.every((r) => r.robust_agreement_prob !== null)
      ? interval(curvesOf((r) => r.robust_agreement_prob as number))
      : null;
    const excessAt = points.map((p) =>
      interval(
        perReplicate(
          rs.filter((r) => r.point === p && r.excess_agreement !== null),
          (r) => r.excess_agreement as number,
        ),
      ),
    );
    const withExcess = excessAt.some((i) => Number.isFinite(i.mean));
    const best = withExcess
      ? maxExcessAgreement(excessAt.map((i) => (Number.isFinite(i.mean) ? i.mean : -Infinity)))
      : null;
    const r = rs[0];
    out.push({
      pair: r.pair,
      objective: r.objective,
      mode: r.mode,
      test_data: r.test_data,
      rAuA: interval(curves),
      robustRAuA: robust,
      maxExcess: best ? { value: best.value, point: points[best.index], interval: excessAt[best.index] } : null,
    });
  }
  return out;
}

/** What a warning is about, and where (a pair, a model, an IRI set). */
export interface Warning {
  what: string;
  where: string;
  /** A few words for the affected rows of the report's table; warnings of one tag are one kind. */
  tag: string;
  /** The number the warning is about (a residual, an accuracy, a step count), for a kind's range. */
  value?: number;
  /** The affected rows: summary keys (findings/summary.ts rowKey). */
  rows: string[];
}

/**
 * The mean IRI residual up to which invariance-aware agreement may be judged at a point (issue
 * 27): beyond it A does not represent x' as it represents x, and the reading says "IRIs too loose
 * to judge" there instead of a verdict. Measured (bench iri-tightness, docs/method.md "How tight an
 * IRI must be"): the cross-seed/cross-bias gap stays within 0.025 of its value at the tightest IRIs
 * while every IRI set's mean residual is at most 0.31, and moves by 0.08 to 0.14 at 0.43-0.44.
 */
export const IRI_VERDICT_MAX_RESIDUAL = 0.3;

/**
 * The most T's loss may still fall over the last quarter of its full-rate phase (stitch/train.ts
 * fullRateLossFall) for T to count as settled. Measured by the protocol study's steps factor on the
 * demo's pairs (docs/method.md, "The fast protocol"): of the invariance-aware stitches at 480
 * steps, every one whose fall was at most 0.03 moved by at most 0.023 when trained to 1,920 steps,
 * while those above it moved by up to 0.064. On real images with augmentation each epoch's loss is
 * noisier, and a fall under it does not promise a settled T there.
 */
export const T_SETTLED_MAX_FALL = 0.03;

/**
 * The least share of an IRI set's x' to which A's own head gives x's class (results.csv
 * iri_front_agreement) before the reading warns that A itself tells the IRIs from their sources.
 * A check that needs no scale of features, so it reads alike at every architecture and point,
 * where the residual rule's 0.3 was measured at one. It warns only: verdicts still follow the
 * residual rule until the two are measured side by side (docs/method.md, "How tight an IRI must be").
 */
export const IRI_MIN_FRONT_AGREEMENT = 0.9;

/**
 * Whether an accuracy over K classes is near chance: at most 2/K (nothing there to stitch), and
 * below 1 for few classes, where 2/K is not (at most a quarter of the way from chance to 1).
 */
export function nearChance(accuracy: number, numClasses: number): boolean {
  const chance = 1 / numClasses;
  return accuracy <= Math.min(2 * chance, chance + (1 - chance) / 4);
}

/**
 * Sanity warnings, each naming the rows it affects:
 * - the back or front model near chance (nearChance: nothing there to stitch);
 * - an IRI set whose mean residual is above IRI_VERDICT_MAX_RESIDUAL, 0.3 ("loose IRIs": A does
 *   not represent x' as x: the verdict leaves that set out, or withholds the point: contrast);
 * - an IRI set on which A's own head keeps x's class for under IRI_MIN_FRONT_AGREEMENT of the x'
 *   ("A tells IRIs apart");
 * - T trained for fewer than 100 optimiser steps;
 * - T still learning when its rate first fell (its loss's full-rate fall above T_SETTLED_MAX_FALL);
 * - a score that is not finite.
 */
export function warnings(rows: StitchRow[], numClasses = 10): Warning[] {
  const out = new Map<string, Warning>();
  const add = (w: Omit<Warning, "rows">, r: StitchRow) => {
    const k = `${w.where}\t${w.what}`;
    const had = out.get(k);
    if (had) {
      if (!had.rows.includes(rowKey(r))) had.rows.push(rowKey(r));
    } else out.set(k, { ...w, rows: [rowKey(r)] });
  };
  for (const r of rows) {
    const k = numClasses;
    const rep = r.replicate > 0 ? ` (replicate ${r.replicate})` : "";
    if (nearChance(r.back_accuracy, k))
      // The back is usually shared by every replicate: one warning, not one per replicate.
      add(
        {
          where: r.back,
          what: `back model near chance (accuracy ${r.back_accuracy.toFixed(3)})`,
          tag: "back near chance",
        },
        r,
      );
    // A null front is near chance by design (experiments/nulls.ts): no warning.
    if (r.front_accuracy !== null && nearChance(r.front_accuracy, k) && !isNullRelation(r.pair))
      add(
        {
          where: `${r.front}${rep}`,
          what: `front model near chance (accuracy ${r.front_accuracy.toFixed(3)})`,
          tag: "front near chance",
          value: r.front_accuracy,
        },
        r,
      );
    if (r.iri_residual !== null && r.iri_residual > IRI_VERDICT_MAX_RESIDUAL)
      add(
        {
          where: `${r.front}${rep} @ ${r.point}`,
          what: `loose IRIs: mean residual ${r.iri_residual.toFixed(3)} > ${IRI_VERDICT_MAX_RESIDUAL} (A does not represent these x' as it represents x), so invariance-aware conclusions at this point are loose`,
          tag: "loose IRIs",
          value: r.iri_residual,
        },
        r,
      );
    const kept = r.iri_front_agreement;
    if (kept !== undefined && kept !== null && kept < IRI_MIN_FRONT_AGREEMENT)
      add(
        {
          where: `${r.front}${rep} @ ${r.point}`,
          what: `A tells IRIs apart: its own head keeps x's class on ${(100 * kept).toFixed(0)}% of the x' (less than ${100 * IRI_MIN_FRONT_AGREEMENT}%), so these x' are not all inputs A cannot tell from x`,
          tag: "A tells IRIs apart",
          value: kept,
        },
        r,
      );
    if (r.train_steps < 100)
      add(
        {
          where: `${r.pair} ${r.objective} ${r.mode}`,
          what: `T trained for only ${r.train_steps} optimiser steps (< 100)`,
          tag: "< 100 steps",
          value: r.train_steps,
        },
        r,
      );
    const fall = r.t_loss_fall;
    if (fall !== undefined && fall !== null && fall > T_SETTLED_MAX_FALL)
      add(
        {
          where: `${r.pair} @ ${r.point} ${r.objective} ${r.mode}${rep}`,
          what: `T still learning when its rate fell: its loss fell ${(100 * fall).toFixed(1)}% over the last quarter before (more than ${100 * T_SETTLED_MAX_FALL}%), so more steps may move this score`,
          tag: "T still learning",
          value: fall,
        },
        r,
      );
    for (const s of ["accuracy", "agreement_prob", "hard_agreement", "soft_error_consistency"] as const)
      if (!Number.isFinite(r[s]))
        add(
          {
            where: `${r.pair} @ ${r.point} ${r.objective} ${r.mode}${rep}`,
            what: `${s} is not finite (left out of every mean)`,
            tag: "not finite",
          },
          r,
        );
  }
  // Tasks made with different thread counts (a cache filled by runs with other --workers, or
  // STITCHLAB_THREADS): sums run in another order, so scores differ in their last digits, and
  // briefly trained models, whose training is chaotic, can differ by much more.
  const counts = [...new Set(rows.flatMap((r) => (r.threads ? r.threads.split("/") : [])))].sort(
    (a, b) => Number(a) - Number(b),
  );
  if (counts.length > 1)
    for (const r of rows)
      add(
        {
          where: "this run's tasks",
          what: `made with different thread counts (${counts.join(", ")}): results can differ from a run made with one count (docs/experiments.md, "Threads")`,
          tag: "mixed threads",
        },
        r,
      );
  return [...out.values()];
}

/** The paper's reference values (docs/method.md, "The paper's findings"), by relation. */
export const PAPER_VALUES: Record<string, string> = {
  identical: "about 0.95-1.0 under every setting",
  "cross-seed":
    "standard 0.93-0.99; invariance-aware SLM/FuLA fall with depth (about 0.98, 0.85 at the middle, 0.5 at the last point); HLM 0.93-0.95",
  "cross-bias":
    "standard 0.88-0.95; invariance-aware SLM/FuLA collapse to about 0.12 from the middle on; HLM 0.74-0.92",
  "pixel-loc":
    "excess agreement: standard HLM about 0.89, SLM 0.82, FuLA 0.25, DM 0.08; invariance-aware HLM 0.85, SLM 0.06, FuLA and DM about 0",
  "rand-control": "excess agreement about 0 everywhere",
};

/** An IRI set too loose to judge (mean residual above IRI_VERDICT_MAX_RESIDUAL), left out of a point's verdict. */
export interface LooseSet {
  pair: string;
  front: string;
  replicate: number;
  residual: number;
}

/** One pair against another on invariance-aware agreement, from the middle point on. */
export interface Contrast {
  higher: string;
  lower: string;
  objective: string;
  points: {
    point: string;
    /** The intervals over the replicates judged (those whose IRI sets are tight enough). */
    higher: Interval;
    lower: Interval;
    /** higher's replicates against lower's: one-sided Welch (null: fewer than two replicates a side). */
    test: WelchTest | null;
    /** Judged, and higher lies above lower by the seed-level rule (Holm across the points judged). */
    apart: boolean;
    /** The largest mean IRI residual of the two pairs' IRI sets at the point (null: none recorded). */
    residual: number | null;
    /** Withheld: too many of a pair's IRI sets there are too loose to judge (see contrast): neither apart nor not. */
    loose: boolean;
    /** The IRI sets left out as too loose, whether the point was then judged on the rest or withheld. */
    looseSets: LooseSet[];
  }[];
  /** Whether higher lies above lower at every point judged by the seed-level rule, and one was. */
  apart: boolean;
  /** Per replicate: whether `higher` agrees more than `lower` at every point, that replicate alone. */
  perReplicate: { replicate: number; holds: boolean }[];
}

/**
 * `higher` against `lower` (pair relations) with one objective, invariance-aware, from the middle
 * of the points run on: the intervals per point, and the verdict in each replicate alone.
 */
export function contrast(rows: StitchRow[], higher: string, lower: string, objective: string): Contrast | null {
  const points = pointsOf(rows);
  const from = points.slice(Math.floor((points.length - 1) / 2));
  const pick = (pair: string, point: string) =>
    rows.filter((r) => r.pair === pair && r.mode === "iris" && r.objective === objective && r.point === point);
  const isLoose = (r: StitchRow) =>
    r.iri_residual !== null && Number.isFinite(r.iri_residual) && r.iri_residual > IRI_VERDICT_MAX_RESIDUAL;
  const per = from.map((point) => {
    const all = [...pick(higher, point), ...pick(lower, point)];
    const residuals = all.map((r) => r.iri_residual).filter((v): v is number => v !== null && Number.isFinite(v));
    const residual = residuals.length ? Math.max(...residuals) : null;
    const looseSets = [
      ...new Map(
        all
          .filter(isLoose)
          .map((r) => [
            `${r.pair}\u0000${r.replicate}`,
            { pair: r.pair, front: r.front, replicate: r.replicate, residual: r.iri_residual as number },
          ]),
      ).values(),
    ];
    // A loose IRI set is a failed measurement of that replicate (A does not represent x' as x), so
    // a point is judged on each pair's tight replicates, as long as they are at least two (an
    // interval needs two) and most of the pair's replicates. Where most sets are loose the recipe
    // failed for that front and point, and what is left would be a selection: the point is withheld.
    const tight = (pair: string) => {
      const rs = pick(pair, point);
      const kept = rs.filter((r) => !isLoose(r));
      const n = new Set(rs.map((r) => r.replicate)).size;
      const k = new Set(kept.map((r) => r.replicate)).size;
      return { kept, enough: k === n || (k >= 2 && 2 * k > n) };
    };
    const [th, tl] = [tight(higher), tight(lower)];
    const loose = !(th.enough && tl.enough);
    const hs = perReplicate(loose ? pick(higher, point) : th.kept, (r) => r.agreement_prob);
    const ls = perReplicate(loose ? pick(lower, point) : tl.kept, (r) => r.agreement_prob);
    return {
      point,
      higher: interval(hs),
      lower: interval(ls),
      test: welch(hs, ls),
      apart: false,
      residual,
      loose,
      looseSets,
    };
  });
  // Told apart by the rule every seed-level statement uses (findings/chance.ts SEED_TEST_RULE):
  // one-sided Welch over replicates at each point judged, Holm-corrected across them.
  // A point with no test (a side with fewer than two replicates, or none) is not apart; the others
  // are judged among themselves.
  const tested = per.filter((p) => !p.loose && p.test);
  const rejected = holm(
    tested.map((p) => (p.test as WelchTest).p),
    SEED_TEST_ALPHA,
  );
  for (const [i, p] of tested.entries()) p.apart = rejected[i] as boolean;
  if (per.every((p) => p.higher.n === 0 || p.lower.n === 0)) return null;
  const replicates = [...new Set(rows.map((r) => r.replicate))].sort((a, b) => a - b);
  // Per replicate, over the points judged, with that replicate's loose sets left out as above.
  const judged = per.filter((p) => !p.loose);
  const verdicts = replicates.map((replicate) => ({
    replicate,
    holds: judged.every(({ point }) => {
      const mine = (pair: string) => pick(pair, point).filter((r) => r.replicate === replicate);
      if ([...mine(higher), ...mine(lower)].some(isLoose)) return true;
      const [h] = perReplicate(mine(higher), (r) => r.agreement_prob);
      const [l] = perReplicate(mine(lower), (r) => r.agreement_prob);
      return h !== undefined && l !== undefined && h > l;
    }),
  }));
  return {
    higher,
    lower,
    objective,
    points: per,
    apart: judged.length > 0 && judged.every((p) => p.apart),
    perReplicate: verdicts,
  };
}

/** Loose IRI sets in words: "clean-s1 replicate 3 (residual 0.316)". */
const looseWords = (sets: LooseSet[]): string =>
  sets.map((x) => `${x.front} replicate ${x.replicate} (residual ${x.residual.toFixed(3)})`).join(", ");

/**
 * A contrast's verdict in words, on the points judged only (issue 37: a withheld point is neither
 * apart nor not apart): the verdict, and a note naming the points withheld and the IRI sets left
 * out, each with its front, replicate and residual ("" when none).
 */
export function verdictWords(c: Contrast, other: string): { word: string; note: string } {
  const judged = c.points.filter((p) => !p.loose);
  const withheld = c.points.filter((p) => p.loose);
  const names = (ps: typeof c.points) => ps.map((p) => p.point).join(", ");
  const apartAt = judged.filter((p) => p.apart);
  const notAt = judged.filter((p) => !p.apart);
  const word =
    judged.length === 0
      ? "no verdict: the IRIs are too loose to judge at every point"
      : notAt.length === 0
        ? `told apart${withheld.length ? ` at ${names(judged)}` : ""}: ${other} is less similar to the back model than a model of another seed`
        : apartAt.length
          ? `told apart at ${names(apartAt)}, not told apart at ${names(notAt)}`
          : `not told apart${withheld.length ? ` at ${names(judged)}` : ""}`;
  const notes = [
    ...withheld.map((p) => `${p.point} withheld, its IRIs too loose to judge: ${looseWords(p.looseSets)}`),
    ...judged
      .filter((p) => p.looseSets.length)
      .map((p) => `${p.point} judged without the too-loose IRI sets of ${looseWords(p.looseSets)}`),
  ];
  return { word, note: notes.length && judged.length ? ` ${notes.join("; ")}.` : "" };
}

/** A pair's standard-stitching agreement means, point by point (finite ones only). */
const standardMeans = (summary: SummaryRow[], pair: string): number[] =>
  summary
    .filter((s) => s.pair === pair && s.mode === "standard")
    .map((s) => s.scores.agreement_prob.mean)
    .filter(Number.isFinite);

/**
 * The answer first, one line per pair compared with cross-seed (the paper's baseline of
 * functional similarity), per objective, from the middle point on: told apart, not told apart, or
 * IRIs too loose to judge, with the intervals. What the terminal and the report open with; the
 * reading below gives the details.
 */
export function verdictLines(
  rows: StitchRow[],
  summary: SummaryRow[] = summarize(rows),
  recipe?: StandardRecipe,
): string[] {
  const out: string[] = [];
  const pairs = [...new Set(rows.map((r) => r.pair))];
  // Beside a failed identical control no verdict can be read: the recipe breaks a model even with
  // itself, so a gap between pairs says nothing of them.
  const control = pairs.includes("identical") ? identicalControl(summary, recipe) : null;
  const unreadable =
    control && !control.passed && Number.isFinite(control.min)
      ? `cannot be read: the identical control drops to ${control.min.toFixed(3)} (below ${CONTROL_MIN_AGREEMENT})${control.hint ? `. ${control.hint.replace(/\.$/, "")}` : ""}`
      : null;
  const n = Math.max(0, ...summary.map((s) => s.n));
  const standard = (pair: string) => {
    const v = standardMeans(summary, pair);
    return v.length ? Math.min(...v) : null;
  };
  if (pairs.includes("cross-seed"))
    for (const other of pairs.filter((p) => p !== "cross-seed" && p !== "identical" && !isNullRelation(p)))
      for (const objective of [...new Set(rows.map((r) => r.objective))]) {
        const c = contrast(rows, "cross-seed", other, objective);
        if (!c) continue;
        const { word, note } = verdictWords(c, other);
        const std = [standard("cross-seed"), standard(other)].filter((v): v is number => v !== null);
        if (unreadable) {
          out.push(
            `Verdict, ${other} vs cross-seed (invariance-aware ${objective.toUpperCase()}, ${n} replicate${n === 1 ? "" : "s"}): ${unreadable}.`,
          );
          continue;
        }
        out.push(
          `Verdict, ${other} vs cross-seed (invariance-aware ${objective.toUpperCase()}, ${n} replicate${n === 1 ? "" : "s"}): ${word} (${c.points
            .map((p) =>
              p.loose
                ? `${p.point} withheld`
                : `${p.point} ${formatInterval(p.higher, 2)} vs ${formatInterval(p.lower, 2)}`,
            )
            .join(", ")})` +
            (std.length === 2
              ? `; standard stitching ${Math.min(...std) >= SIMILAR_STANDARD ? "calls both similar" : "does not call both similar"} (${Math.min(...std).toFixed(2)} or more).`
              : ".") +
            note,
        );
      }
  return out;
}

/** Standard agreement from which standard stitching calls a pair similar (the reading's rule). */
export const SIMILAR_STANDARD = 0.7;

/** A model stitched with itself agrees at this or more at every point and in every mode (the identical control). */
export const CONTROL_MIN_AGREEMENT = 0.95;

/** The identical control, read from its agreement means by mode (one home for the run's reading and compare's verdict). */
export interface ControlReading {
  passed: boolean;
  /** The lowest mean (NaN: none finite). */
  min: number;
  /** Where only standard runs fall short: why they likely do, and what to run instead (null otherwise). */
  hint: string | null;
}

/** x to 3 decimals rounded down: what "x or more" may say of it (0.9995 is not "1.000 or more"). */
export const atLeast = (x: number): string => (Math.floor(x * 1000) / 1000).toFixed(3);

export function controlReading(
  byMode: { standard: number[]; iris: number[] },
  recipe: StandardRecipe = { augmented: true, bnMode: "adapt" },
): ControlReading {
  const finite = (xs: number[]) => xs.filter(Number.isFinite);
  const all = [...finite(byMode.standard), ...finite(byMode.iris)];
  const min = all.length ? Math.min(...all) : Number.NaN;
  if (!all.length || min >= CONTROL_MIN_AGREEMENT) return { passed: all.length > 0, min, hint: null };
  const std = finite(byMode.standard);
  const inv = finite(byMode.iris);
  // Invariance-aware runs keep every statistic and see no augmentation: where they pass and
  // standard runs do not, what standard runs change is the suspect. Batch norm's adapt
  // re-estimates the statistics on T's real training images, augmented as the paper's base
  // training was; a model trained without augmentation meets other statistics there (a ResNet
  // trained in PyTorch on plain Fashion-MNIST: 0.926 stitched with itself, 0.9997 with its own).
  const onlyStandard =
    std.length > 0 &&
    Math.min(...std) < CONTROL_MIN_AGREEMENT &&
    inv.length > 0 &&
    Math.min(...inv) >= CONTROL_MIN_AGREEMENT;
  // The cause named only where the recipe has it: batch norm adapted (bnMode eval or batch leave
  // the statistics as trained, and get no guess).
  const hint =
    !onlyStandard || recipe.bnMode !== "adapt"
      ? null
      : `Only standard runs fall short (invariance-aware ${atLeast(Math.min(...inv))} or more): ` +
        (recipe.augmented
          ? "they re-estimate batch norm's statistics on augmented real images (crop and flip, as the paper's base training), which a model trained without augmentation never saw. If yours were, run again with --no-stitch-augment (stitch.augment: false in an experiment file)."
          : "they re-estimate batch norm's statistics on the real training images (batch norm adapt). stitch.bnMode: {standard: eval} keeps the models' own.");
  return { passed: false, min, hint };
}

/** The identical pair's control, read from the summary's agreement means by mode (the verdicts' and the reading's). */
const identicalControl = (summary: SummaryRow[], recipe?: StandardRecipe): ControlReading => {
  const meansOf = (mode: string) =>
    summary.filter((s) => s.pair === "identical" && s.mode === mode).map((s) => s.scores.agreement_prob.mean);
  return controlReading({ standard: meansOf("standard"), iris: meansOf("iris") }, recipe);
};

/** What a plan's standard stitches do to the real images and batch norm: what a failed control's hint reads. */
export interface StandardRecipe {
  /** stitch.augment: true unless false. */
  augmented: boolean;
  bnMode: string;
}

/**
 * The reading in words. Every number is a mean over replicates with its 95% interval; pairs are
 * compared point by point on invariance-aware agreement, and a difference is stated only where
 * the seed-level test finds it (one-sided Welch over replicates, Holm across the points).
 */
export function reading(
  rows: StitchRow[],
  opts: {
    settings?: string[];
    warnings?: Warning[];
    summary?: SummaryRow[];
    reliance?: string | null;
    /** What the standard runs did to real images and batch norm (standardRecipe): the control's hint. */
    recipe?: StandardRecipe;
  } = {},
): string[] {
  const out: string[] = [...(opts.settings ?? [])];
  // The answer first (one line per pair), then the settings and the details.
  if (rows.length) out.unshift(...verdictLines(rows, opts.summary ?? summarize(rows), opts.recipe));
  if (rows.length === 0) return [...out, "No stitch has finished: nothing to read."];
  // summarize(rows), passed in where the report already made it (experiments/results.ts).
  const summary = opts.summary ?? summarize(rows);
  const points = pointsOf(rows);
  const pairs = [...new Set(rows.map((r) => r.pair))];
  const n = Math.max(...summary.map((s) => s.n));
  const fmt = (v: number) => v.toFixed(2);
  // "0.91", not "0.91-0.91", where the ends agree to the digits shown.
  const range = (lo: number, hi: number) => (fmt(lo) === fmt(hi) ? fmt(lo) : `${fmt(lo)}-${fmt(hi)}`);
  const objectives = [...new Set(rows.map((r) => r.objective))];
  // The settings line, when given, says "Replicates: n" already: said once.
  const said = (opts.settings ?? []).some((l) => l.includes(`Replicates: ${n} `) || l.includes(`Replicates: ${n}.`));
  out.push(
    `${said ? "" : `Replicates: ${n}. `}Values are means${n > 1 ? " ± the half-width of their 95% Student-t interval" : " (one replicate: no interval over replicates, so no difference between pairs is called here; `stitchlab compare` gives its verdict intervals over the test images)"}.`,
  );
  if (pairs.includes("identical")) {
    const c = identicalControl(summary, opts.recipe);
    out.push(
      Number.isNaN(c.min)
        ? "Control: the identical pair has no finite score."
        : c.passed
          ? `Control: the identical pair agrees at ${atLeast(c.min)} or more everywhere, as a model stitched with itself must.`
          : `Control FAILED: the identical pair drops to ${c.min.toFixed(3)} (below ${CONTROL_MIN_AGREEMENT}); the other numbers cannot be trusted.${c.hint ? ` ${c.hint}` : ""}`,
    );
  }
  for (const pair of pairs.filter((p) => p !== "identical" && !isNullRelation(p))) {
    const std = standardMeans(summary, pair);
    if (std.length)
      out.push(
        `${pair}: standard stitching agrees at ${range(Math.min(...std), Math.max(...std))}` +
          (Math.min(...std) >= SIMILAR_STANDARD
            ? " (it calls the pair similar)."
            : ` (below ${SIMILAR_STANDARD} somewhere).`),
      );
  }
  // Each pair against its null fronts, where the experiment has them (experiments/nulls.ts).
  out.push(...chanceLines(summary));
  // How each measure ranks fronts of graded, measured reliance (a grounding study's pairs only).
  out.push(...groundingLines(groundingRows(rows)));
  // Each other pair against cross-seed (the paper's baseline of functional similarity), per
  // objective, from the middle point on.
  if (pairs.includes("cross-seed") && points.length >= 1) {
    for (const other of pairs.filter((p) => p !== "cross-seed" && p !== "identical" && !isNullRelation(p)))
      for (const objective of objectives) {
        const c = contrast(rows, "cross-seed", other, objective);
        if (!c) continue;
        const show = c.points
          .map(
            (x) =>
              `${x.point} ${x.loose ? `withheld (IRIs too loose to judge: residual up to ${x.residual?.toFixed(2)} > ${IRI_VERDICT_MAX_RESIDUAL})` : `${formatInterval(x.higher, 2)} vs ${formatInterval(x.lower, 2)}${x.test ? `, difference ${differenceWords(x.test)}` : ""}`}`,
          )
          .join(", ");
        const held = c.perReplicate.filter((r) => r.holds).length;
        const { word, note } = verdictWords(c, other);
        const withheld = c.points.some((x) => x.loose);
        out.push(
          (c.apart
            ? `Invariance-aware ${objective.toUpperCase()}: from the middle point on, cross-seed agrees more than ${other}, told apart at every point${withheld ? " judged" : ""} by the seed-level test (${show}): the ${other} front is not functionally similar to the back model in the way a model of another seed is, whatever standard stitching says.${note}`
            : `Invariance-aware ${objective.toUpperCase()}, cross-seed vs ${other} from the middle point on: ${show}: ${word} with ${n} replicate${n > 1 ? "s" : ""}.${note}`) +
            (c.perReplicate.length > 1
              ? ` Taken alone, ${held} of ${c.perReplicate.length} replicates rank cross-seed above ${other} at every one of these points.`
              : ""),
        );
      }
  }
  if (opts.reliance) out.push(opts.reliance);
  const curves = curveSummaries(rows);
  // A pair scored on several test sets (a null beside a clean and a marked pair) names each.
  const sets = new Map<string, Set<string>>();
  for (const c of curves) sets.set(c.pair, (sets.get(c.pair) ?? new Set()).add(c.test_data));
  const data = (c: CurveSummary) => ((sets.get(c.pair)?.size ?? 0) > 1 ? ` [${c.test_data}]` : "");
  if (curves.length)
    out.push(
      `rAuA (mean agreement over the points run, larger = more similar): ${curves
        .map((c) => `${c.pair}${data(c)} ${c.objective} ${c.mode} ${formatInterval(c.rAuA, 2)}`)
        .join("; ")}.`,
    );
  const robustCurves = curves.filter((c) => c.robustRAuA);
  if (robustCurves.length)
    out.push(
      `rAuA on adversarial test images (robust agreement, larger = more similar): ${robustCurves
        .map((c) => `${c.pair} ${c.objective} ${c.mode} ${formatInterval(c.robustRAuA as Interval, 2)}`)
        .join("; ")}.`,
    );
  for (const c of curves)
    if (c.maxExcess)
      out.push(
        `${c.pair} ${c.objective} ${c.mode}: excess agreement up to ${formatInterval(c.maxExcess.interval)} (at ${c.maxExcess.point}; the maximum over points of the replicate means).`,
      );
  for (const pair of pairs)
    if (PAPER_VALUES[pair]) out.push(`The paper (ResNet-18, CIFAR-10), ${pair}: ${PAPER_VALUES[pair]}.`);
  out.push(...warningLines(opts.warnings ?? []));
  return out;
}

/**
 * A shortcut front relies on its marker when images carrying another class's marker (the rolled
 * test set) mostly fool it. Issue 23's guide, from the paper's width-1 model (rolled 0.12): a
 * rolled accuracy of at most 0.3, well below what its clean accuracy allows.
 */
export const MARKER_RELIANCE_MAX_ROLLED = 0.3;

/** What each kind of warning means, for the one line that collapses several of it. */
const WARNING_KINDS: Record<string, string> = {
  "loose IRIs": `mean IRI residual above ${IRI_VERDICT_MAX_RESIDUAL} (A does not represent these x' as it represents x), so invariance-aware conclusions there are loose`,
  "A tells IRIs apart": `A's own head keeps x's class on less than ${100 * IRI_MIN_FRONT_AGREEMENT}% of an IRI set's x'`,
  "< 100 steps": "T trained for fewer than 100 optimiser steps",
  "T still learning": `T's loss still fell by more than ${100 * T_SETTLED_MAX_FALL}% over the last quarter before its rate first fell, so more steps may move these scores`,
  "front near chance": "front model near chance: nothing there to stitch",
  "marker not relied on": `shortcut front does not rely on its marker (rolled accuracy above ${MARKER_RELIANCE_MAX_ROLLED}): the pair is not the cross-bias pair it claims to be`,
};

/**
 * The reading's warnings, one line per kind: a kind met once is written out; met several times,
 * it is one line with the count, the range of its numbers and the places (the report's table
 * keeps every one on its rows).
 */
export function warningLines(ws: Warning[]): string[] {
  const byTag = new Map<string, Warning[]>();
  for (const w of ws) byTag.set(w.tag, [...(byTag.get(w.tag) ?? []), w]);
  return [...byTag.entries()].map(([tag, group]) => {
    if (group.length === 1) return `Warning: ${group[0].where}: ${group[0].what}.`;
    const values = group.map((w) => w.value).filter((v): v is number => v !== undefined && Number.isFinite(v));
    const digits = values.every(Number.isInteger) ? 0 : 3;
    const range = values.length
      ? ` (${Math.min(...values).toFixed(digits)}-${Math.max(...values).toFixed(digits)})`
      : "";
    const places = group.map((w) => w.where);
    const shown =
      places.length > 4 ? `${places.slice(0, 4).join("; ")}; and ${places.length - 4} more` : places.join("; ");
    return `Warning, ${group.length} times: ${WARNING_KINDS[tag] ?? tag}${range}: ${shown}.`;
  });
}

/** The shortcut fronts whose rolled accuracy is known: name, clean, marked, rolled. */
export function shortcutFronts(models: ModelRow[]): { name: string; clean: number; marked: number; rolled: number }[] {
  return models
    .filter((m) => m.shortcut && m.shortcut !== "rand" && m.accuracies.rolled !== undefined)
    .map((m) => ({
      name: m.name,
      clean: m.accuracies.clean ?? Number.NaN,
      marked: m.accuracies.marked ?? Number.NaN,
      rolled: m.accuracies.rolled,
    }));
}

/** One reading line: each shortcut front's accuracy on clean, marked and rolled test images. */
export function relianceLine(models: ModelRow[]): string | null {
  const fronts = shortcutFronts(models);
  if (!fronts.length) return null;
  const relying = fronts.filter((f) => f.rolled <= MARKER_RELIANCE_MAX_ROLLED).length;
  return (
    `Shortcut fronts' reliance on their markers (accuracy on clean / marked / rolled test images; rolled: each class carries another class's marker): ${fronts
      .map((f) => `${f.name} ${f.clean.toFixed(2)} / ${f.marked.toFixed(2)} / ${f.rolled.toFixed(2)}`)
      .join("; ")}. ` +
    (relying === fronts.length
      ? `Every one relies on its marker (rolled at most ${MARKER_RELIANCE_MAX_ROLLED}).`
      : `${relying} of ${fronts.length} rely on their markers (rolled at most ${MARKER_RELIANCE_MAX_ROLLED}).`)
  );
}

/** A warning naming each shortcut front that does not rely on its marker. */
export function relianceWarnings(models: ModelRow[]): Warning[] {
  // A front trained with markers that agree on only part of its images (markerAgreement < 1, the
  // grounding study's) is meant to rely on them less: no warning.
  const graded = new Set(models.filter((m) => (m.markerAgreement ?? 1) < 1).map((m) => m.name));
  return shortcutFronts(models)
    .filter((f) => f.rolled > MARKER_RELIANCE_MAX_ROLLED && !graded.has(f.name))
    .map((f) => ({
      where: f.name,
      what: `does not rely on its marker: rolled accuracy ${f.rolled.toFixed(2)} > ${MARKER_RELIANCE_MAX_ROLLED} (clean ${f.clean.toFixed(2)}, marked ${f.marked.toFixed(2)}), so its pair is not the cross-bias pair it claims to be`,
      tag: "marker not relied on",
      value: f.rolled,
      rows: [],
    }));
}
