// What an experiment's results say, for the terminal and the report alike (one text, made here):
// the agreement table with 95% intervals over replicates (report/summary.ts), rAuA and excess
// agreement per pair, sanity warnings, and the reading. A difference between pairs is
// stated only when their intervals separate; otherwise the reading says "not told apart with N
// replicates" (PROTOCOL.md, "Replicates").
import { maxExcessAgreement } from "../metrics/excess.js";
import { compareIntervals, type Interval, interval } from "../metrics/interval.js";
import { rAuA } from "../metrics/raua.js";
import {
  formatInterval,
  groupKey,
  type IriPreview,
  pointsOf,
  type StitchRow,
  type SummaryRow,
  summarize,
} from "../report/index.js";
import { IRI_DEFAULTS } from "../stitch/iris.js";
import { defaultBnMode } from "../stitch/train.js";
import { type Experiment, isLoaded } from "./spec.js";

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

/** Agreement probability, one line per (pair, objective, mode), one column per point: mean ± 95% half-width. */
export function agreementTable(rows: StitchRow[]): string {
  const summary = summarize(rows);
  const points = pointsOf(rows);
  const lines = [["pair", "front->back", "objective", "mode", "n", ...points]];
  const seen = new Map<string, SummaryRow[]>();
  for (const s of summary) seen.set(groupKey(s), [...(seen.get(groupKey(s)) ?? []), s]);
  for (const ss of seen.values()) {
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
        `p90 ${i.residuals.p90.toFixed(3)}, share <= 0.1: ${(100 * i.residuals.below01).toFixed(0)}%`,
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
  /** Excess agreement: the maximum over points of the replicate-averaged difference (null without excess). */
  maxExcess: { value: number; point: string } | null;
}

/** rAuA and the excess-agreement summary per (pair, objective, mode). */
export function curveSummaries(rows: StitchRow[]): CurveSummary[] {
  const points = pointsOf(rows);
  const groups = new Map<string, StitchRow[]>();
  for (const r of rows) groups.set(groupKey(r), [...(groups.get(groupKey(r)) ?? []), r]);
  const out: CurveSummary[] = [];
  for (const rs of groups.values()) {
    const byReplicate = new Map<string, StitchRow[]>();
    for (const r of rs) {
      const k = `${r.replicate}/${r.seed}`;
      byReplicate.set(k, [...(byReplicate.get(k) ?? []), r]);
    }
    const perReplicate = [...byReplicate.values()].map((curve) => {
      const values = points.flatMap((p) => curve.filter((r) => r.point === p).map((r) => r.agreement_prob));
      return values.length && values.every(Number.isFinite) ? rAuA(values) : Number.NaN;
    });
    const excessMeans = points.map((p) => {
      const xs = rs
        .filter((r) => r.point === p && r.excess_agreement !== null)
        .map((r) => r.excess_agreement as number);
      return xs.length ? interval(xs).mean : Number.NaN;
    });
    const withExcess = excessMeans.some(Number.isFinite);
    const best = withExcess ? maxExcessAgreement(excessMeans.map((v) => (Number.isFinite(v) ? v : -Infinity))) : null;
    const r = rs[0];
    out.push({
      pair: r.pair,
      objective: r.objective,
      mode: r.mode,
      test_data: r.test_data,
      rAuA: interval(perReplicate),
      maxExcess: best ? { value: best.value, point: points[best.index] } : null,
    });
  }
  return out;
}

/** What a warning is about, and where (a pair, a model, an IRI set). */
export interface Warning {
  what: string;
  where: string;
}

/**
 * Sanity warnings, each naming the rows it affects:
 * - the back or front model near chance (accuracy at most 2/K: nothing there to stitch);
 * - an IRI set whose mean residual is above 0.1 ("loose IRIs": A does not represent x' as x);
 * - T trained for fewer than 100 optimiser steps;
 * - a score that is not finite.
 */
export function warnings(rows: StitchRow[], numClasses = 10): Warning[] {
  const out = new Map<string, Warning>();
  const add = (w: Warning) => out.set(`${w.where}\t${w.what}`, w);
  for (const r of rows) {
    const k = numClasses;
    const rep = r.replicate > 0 ? ` (replicate ${r.replicate})` : "";
    if (r.back_accuracy <= 2 / k)
      add({ where: `${r.back}${rep}`, what: `back model near chance (accuracy ${r.back_accuracy.toFixed(3)})` });
    if (r.front_accuracy !== null && r.front_accuracy <= 2 / k)
      add({ where: `${r.front}${rep}`, what: `front model near chance (accuracy ${r.front_accuracy.toFixed(3)})` });
    if (r.iri_residual !== null && r.iri_residual > 0.1)
      add({
        where: `${r.front}${rep} @ ${r.point}`,
        what: `loose IRIs: mean residual ${r.iri_residual.toFixed(3)} > 0.1 (A does not represent these x' as it represents x), so invariance-aware conclusions at this point are loose`,
      });
    if (r.train_steps < 100)
      add({
        where: `${r.pair} ${r.objective} ${r.mode}`,
        what: `T trained for only ${r.train_steps} optimiser steps (< 100)`,
      });
    for (const s of ["accuracy", "agreement_prob", "hard_agreement", "soft_error_consistency"] as const)
      if (!Number.isFinite(r[s]))
        add({
          where: `${r.pair} @ ${r.point} ${r.objective} ${r.mode}${rep}`,
          what: `${s} is not finite (left out of every mean)`,
        });
  }
  return [...out.values()];
}

/** The paper's reference values (PROTOCOL.md, "The paper's findings"), by relation. */
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

/**
 * The reading in words. Every number is a mean over replicates with its 95% interval; pairs are
 * compared point by point on invariance-aware agreement, and a difference is stated only where
 * the intervals separate.
 */
export function reading(rows: StitchRow[], opts: { settings?: string[]; warnings?: Warning[] } = {}): string[] {
  const out: string[] = [...(opts.settings ?? [])];
  if (rows.length === 0) return [...out, "No stitch has finished: nothing to read."];
  const summary = summarize(rows);
  const points = pointsOf(rows);
  const pairs = [...new Set(rows.map((r) => r.pair))];
  const n = Math.max(...summary.map((s) => s.n));
  const fmt = (v: number) => v.toFixed(2);
  const at = (pair: string, mode: string, objective: string, point: string) =>
    summary.find((s) => s.pair === pair && s.mode === mode && s.objective === objective && s.point === point)?.scores
      .agreement_prob;
  const objectives = [...new Set(rows.map((r) => r.objective))];
  out.push(
    `Replicates: ${n}. Values are means${n > 1 ? " ± the half-width of their 95% Student-t interval" : " (one replicate: no interval, so no difference can be called)"}.`,
  );
  if (pairs.includes("identical")) {
    const means = summary.filter((s) => s.pair === "identical").map((s) => s.scores.agreement_prob.mean);
    const min = Math.min(...means);
    out.push(
      min >= 0.95
        ? `Control: the identical pair agrees at ${min.toFixed(3)} or more everywhere, as a model stitched with itself must.`
        : `Control FAILED: the identical pair drops to ${min.toFixed(3)} (below 0.95); the other numbers cannot be trusted.`,
    );
  }
  for (const pair of pairs.filter((p) => p !== "identical")) {
    const std = summary
      .filter((s) => s.pair === pair && s.mode === "standard")
      .map((s) => s.scores.agreement_prob.mean);
    if (std.length)
      out.push(
        `${pair}: standard stitching agrees at ${fmt(Math.min(...std))}-${fmt(Math.max(...std))}` +
          (Math.min(...std) >= 0.7 ? " (it calls the pair similar)." : " (below 0.7 somewhere)."),
      );
  }
  // Each other pair against cross-seed (the paper's baseline of functional similarity), per
  // objective, from the middle point on.
  if (pairs.includes("cross-seed") && points.length >= 1) {
    const from = Math.floor((points.length - 1) / 2);
    for (const other of pairs.filter((p) => p !== "cross-seed" && p !== "identical"))
      for (const objective of objectives) {
        const cmp = points.slice(from).map((p) => {
          const a = at("cross-seed", "iris", objective, p);
          const b = at(other, "iris", objective, p);
          return { p, a, b, c: a && b ? compareIntervals(a, b) : "unknown" };
        });
        if (cmp.every((x) => !x.a || !x.b)) continue;
        const show = cmp.map((x) => `${x.p} ${formatInterval(x.a, 2)} vs ${formatInterval(x.b, 2)}`).join(", ");
        const higher = cmp.filter((x) => x.c === "higher").length;
        out.push(
          higher === cmp.length
            ? `Invariance-aware ${objective.toUpperCase()}: from the middle point on, cross-seed agrees more than ${other}, with the 95% intervals apart at every point (${show}): the ${other} front is not functionally similar to the back model in the way a model of another seed is${pairs.includes(other) ? ", whatever standard stitching says" : ""}.`
            : `Invariance-aware ${objective.toUpperCase()}, cross-seed vs ${other} from the middle point on: ${show}: ${higher ? `apart at ${higher} of ${cmp.length} points, not told apart at the others` : "not told apart"} with ${n} replicate${n > 1 ? "s" : ""}.`,
        );
      }
  }
  for (const c of curveSummaries(rows))
    if (c.maxExcess)
      out.push(
        `${c.pair} ${c.objective} ${c.mode}: excess agreement up to ${c.maxExcess.value.toFixed(3)} (at ${c.maxExcess.point}, mean over replicates).`,
      );
  for (const pair of pairs)
    if (PAPER_VALUES[pair]) out.push(`The paper (ResNet-18, CIFAR-10), ${pair}: ${PAPER_VALUES[pair]}.`);
  for (const w of opts.warnings ?? []) out.push(`Warning: ${w.where}: ${w.what}.`);
  return out;
}

/**
 * The settings a reader needs next to the numbers: models (widths, epochs, shortcuts), images,
 * the IRI optimiser and steps, stitching epochs and images, batch-norm modes, replicates.
 */
export function settingsLines(exp: Experiment): string[] {
  const models = Object.entries(exp.models).map(([name, m]) =>
    isLoaded(m)
      ? `${name} (checkpoint ${m.checkpoint})`
      : `${name} (${m.arch}${m.width !== undefined ? ` width ${m.width}` : ""}, ${m.epochs} epochs, seed ${m.seed}${m.shortcut ? `, ${m.shortcut} shortcut` : ""}${m.adversarial ? ", adversarial" : ""})`,
  );
  const d = exp.dataset;
  const iris = exp.iris;
  const st = exp.stitch;
  const marked = exp.pairs.filter((p) => (p.shortcut !== undefined ? p.shortcut : st.shortcut));
  return [
    `Settings: ${d.name}${d.limit ? `, ${d.limit} training images` : ""}${d.testLimit ? `, ${d.testLimit} test images` : ""}; models ${models.join("; ")}.`,
    `IRIs: ${iris.limit ?? "all"} per front and point, ${iris.optimizer ?? IRI_DEFAULTS.optimizer} optimiser, ${iris.steps ?? IRI_DEFAULTS.steps} steps. ` +
      `Stitching: ${st.epochs ?? "30 (12 for image folders)"} epochs on ${st.limit ?? "all"} real images, batch ${st.batchSize ?? 128}; ` +
      `batch norm ${st.bnMode?.standard ?? defaultBnMode("standard")} (standard) and ${st.bnMode?.iris ?? defaultBnMode("iris")} (invariance-aware). ` +
      `Replicates: ${exp.replicates}${exp.replicateBack ? " (back models too)" : " (one back model shared)"}.` +
      (marked.length
        ? ` Marked stitching data (training images, IRI sources, test set): ${marked.map((p) => `${p.relation} (${p.shortcut ?? st.shortcut})`).join(", ")}.`
        : ""),
  ];
}
