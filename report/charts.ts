// The report's figures as vega-lite specs, in the manner of the paper's: a score against the
// stitch point, one panel per pair relation, colour = objective, solid = standard stitching,
// dashed = invariance-aware (trained on IRIs). Each spec carries its data, so a figure's
// .vl.json reproduces it alone. A figure with no data is left out.
import type { TopLevelSpec } from "vega-lite";
import { beyondChance, nullBand as nullBandOf } from "../findings/chance.js";
import { groundingRows, measureWords } from "../findings/grounding.js";
import { groupKey, rowKey, type SummaryRow, summarize } from "../findings/summary.js";
import { MODE_LABELS } from "../stitch/modes.js";
import type { StitchRow } from "./types.js";

export interface Figure {
  /** File stem under figures/: <name>.vl.json, <name>.svg, <name>.png. */
  name: string;
  title: string;
  /** What the figure shows and which way is "more similar", for the report's caption. */
  caption: string;
  spec: TopLevelSpec;
}

const SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json";
const MODES = ["standard", "iris"];
const MODE_LABEL_EXPR = Object.entries(MODE_LABELS)
  .map(([mode, label]) => `datum.value === ${JSON.stringify(mode)} ? ${JSON.stringify(label)} : `)
  .join("")
  .concat("datum.label");
/**
 * Objectives in the paper's order, with fixed colours so every figure agrees: Okabe and Ito's
 * palette, which readers with the common colour-vision deficiencies tell apart (SLM orange and
 * FuLA reddish purple, not orange and red).
 */
const OBJECTIVE_COLOURS: Record<string, string> = {
  hlm: "#0072B2",
  slm: "#E69F00",
  dm: "#009E73",
  fula: "#CC79A7",
};
const OTHER_COLOURS = ["#56B4E9", "#D55E00", "#F0E442", "#000000", "#999999"];
/** Pair relations in the paper's order; any other comes after them, in order of appearance. */
const PAIR_ORDER = ["identical", "cross-seed", "cross-bias", "cross-robust", "robust-robust", "cross-supervision"];

/** Distinct values in order of first appearance. */
function distinct<T>(values: Iterable<T>): T[] {
  return [...new Set(values)];
}

function ordered(values: string[], canonical: string[]): string[] {
  const known = canonical.filter((v) => values.includes(v));
  return [...known, ...values.filter((v) => !canonical.includes(v))];
}

/** The panel label of each pair: the pair, and "front → back" when the panel holds one such combination. */
function panelLabels(rows: StitchRow[]): Map<string, string> {
  const labels = new Map<string, string>();
  for (const pair of distinct(rows.map((r) => r.pair))) {
    const combos = distinct(rows.filter((r) => r.pair === pair).map((r) => `${r.front} → ${r.back}`));
    labels.set(pair, combos.length === 1 ? `${pair}: ${combos[0]}` : `${pair} (${combos.length} model pairs)`);
  }
  return labels;
}

const CONFIG = {
  font: "sans-serif",
  background: "white",
  view: { stroke: "#ccc" },
  axis: { labelFontSize: 10, titleFontSize: 11, titleFontWeight: "normal" as const, gridColor: "#eee" },
  header: { labelFontSize: 12, labelFontWeight: "bold" as const },
  legend: { labelFontSize: 11, titleFontSize: 11 },
  title: { fontSize: 14, subtitleFontSize: 11, subtitleColor: "#555", anchor: "start" as const },
};

interface ScoreFigure {
  name: string;
  title: string;
  subtitle: string;
  caption: string;
  field: "agreement_prob" | "accuracy" | "excess_agreement";
  yTitle: string;
  /** [0, 1] for scores that live there; undefined lets the data decide (always including 0). */
  domain?: [number, number];
  /** An extra horizontal reference in every panel. */
  reference?: { field: "back_accuracy" } | { value: number };
  /** Draw each pair's highest null front's interval as a grey band (experiments/nulls.ts). */
  nullBand?: boolean;
  /**
   * The ends of the reference's curves (construct_plots/information_stitching.py), drawn as black
   * crosses before the first point and after the last: "End", B alone, and "Front", A alone with
   * its own head; each a function of a row, null where unknown.
   */
  ends?: { end: (r: StitchRow) => number | null; front: (r: StitchRow) => number | null };
}

const END_LABEL = "End: B alone";
const FRONT_LABEL = "Front: A alone";

/** The end points of each panel: the mean over its rows of each end's value (rows without one left out). */
function endValues(rows: StitchRow[], labels: Map<string, string>, f: ScoreFigure): Record<string, unknown>[] {
  if (!f.ends) return [];
  const out: Record<string, unknown>[] = [];
  for (const [pair, panel] of labels) {
    const mine = rows.filter((r) => r.pair === pair);
    const last = Math.max(...mine.map((r) => r.pointIndex));
    const first = Math.min(...mine.map((r) => r.pointIndex));
    for (const [label, at, value] of [
      [END_LABEL, first - 1, f.ends.end],
      [FRONT_LABEL, last + 1, f.ends.front],
    ] as const) {
      const vs = mine.map(value).filter((v): v is number => v !== null && Number.isFinite(v));
      if (vs.length)
        out.push({ panel, point: label, pointIndex: at, end: true, [f.field]: vs.reduce((a, b) => a + b) / vs.length });
    }
  }
  return out;
}

function scoreFigure(rows: StitchRow[], summary: SummaryRow[], f: ScoreFigure): Figure | null {
  const used = rows.filter((r) => r[f.field] !== null && Number.isFinite(r[f.field]));
  if (used.length === 0) return null;
  const labels = panelLabels(used);
  const panels = ordered(distinct(used.map((r) => r.pair)), PAIR_ORDER).map((p) => labels.get(p)!);
  const objectives = ordered(distinct(used.map((r) => r.objective)), Object.keys(OBJECTIVE_COLOURS));
  let other = 0;
  const colours = objectives.map((o) => OBJECTIVE_COLOURS[o] ?? OTHER_COLOURS[other++ % OTHER_COLOURS.length]);
  const modes = ordered(distinct(used.map((r) => r.mode)), MODES);
  // Width from the longest panel, so a 13-point ViT panel is not squeezed into a 9-point one's room.
  const maxPoints = Math.max(
    ...panels.map((p) => distinct(used.filter((r) => labels.get(r.pair) === p).map((r) => r.point)).length),
  );
  const width = Math.min(420, Math.max(180, 32 * maxPoints));
  // The 95% interval over replicates of each point's mean, drawn as a band around the line. The
  // summary of all rows serves: an interval is made of the finite values alone, so the rows left
  // out of `used` (this score not finite) change no band.
  const bands = new Map(summary.map((s) => [`${groupKey(s)}\t${s.point}`, s.scores[f.field]] as const));
  const band = (r: StitchRow) => bands.get(`${groupKey(r)}\t${r.point}`);
  // The nearest null's interval where the pair has nulls at the point (the band a score is tested
  // against: findings/chance.ts), a chance null's before the label alone's: its mean alone where it
  // has one replicate.
  const nullOf = new Map<string, { lo: number; hi: number }>();
  if (f.nullBand)
    for (const c of beyondChance(summary))
      if (c.family === "chance" || !nullOf.has(rowKey(c))) nullOf.set(rowKey(c), nullBandOf(c.null));
  const nullBand = (r: StitchRow) => nullOf.get(rowKey(r));
  const values = used.map((r) => ({
    panel: labels.get(r.pair)!,
    ...(Number.isFinite(band(r)?.lo) ? { lo: band(r)!.lo, hi: band(r)!.hi } : {}),
    ...(nullBand(r) ? { null_lo: nullBand(r)!.lo, null_hi: nullBand(r)!.hi } : {}),
    point: r.point,
    pointIndex: r.pointIndex,
    objective: r.objective,
    mode: r.mode,
    [f.field]: r[f.field],
    ...(f.reference && "field" in f.reference ? { [f.reference.field]: r[f.reference.field] } : {}),
  }));
  const ends = endValues(used, labels, f);
  const x = {
    field: "point",
    type: "ordinal" as const,
    sort: { field: "pointIndex", op: "min" as const },
    title: "stitch point",
    axis: { labelAngle: -45 },
  };
  const y = {
    field: f.field,
    aggregate: "mean" as const,
    type: "quantitative" as const,
    title: f.yTitle,
    scale: f.domain ? { domain: f.domain } : { zero: true },
  };
  const color = {
    field: "objective",
    type: "nominal" as const,
    title: "objective",
    scale: { domain: objectives, range: colours },
  };
  // The curves' layers leave the end points out; the ends' layer takes only them.
  const curve = { transform: [{ filter: "datum.end !== true" }] };
  const layers: unknown[] = [];
  if (f.reference)
    layers.push({
      mark: { type: "rule", color: "#999", strokeWidth: 1 },
      encoding:
        "field" in f.reference
          ? { y: { field: f.reference.field, aggregate: "mean", type: "quantitative" } }
          : { y: { datum: f.reference.value } },
    });
  if (values.some((v) => "null_lo" in v))
    layers.push({
      transform: [{ filter: "datum.end !== true && isValid(datum.null_lo)" }],
      mark: { type: "area", color: "#888", opacity: 0.15 },
      encoding: {
        x,
        // One band per objective and mode (each curve's own highest null), all grey.
        y: { field: "null_lo", aggregate: "max", type: "quantitative", title: f.yTitle },
        y2: { field: "null_hi", aggregate: "max" },
        detail: [
          { field: "mode", type: "nominal" },
          { field: "objective", type: "nominal" },
        ],
      },
    });
  if (values.some((v) => "lo" in v))
    layers.push({
      ...curve,
      mark: { type: "area", opacity: 0.18 },
      encoding: {
        x,
        y: { field: "lo", aggregate: "mean", type: "quantitative", title: f.yTitle },
        y2: { field: "hi", aggregate: "mean" },
        color,
        detail: { field: "mode", type: "nominal" },
      },
    });
  layers.push(
    {
      ...curve,
      mark: { type: "line", strokeWidth: 2 },
      encoding: {
        x,
        y,
        color,
        strokeDash: {
          field: "mode",
          type: "nominal",
          title: "mode",
          scale: { domain: modes, range: modes.map((m) => (m === "iris" ? [6, 4] : [1, 0])) },
          // The mode's name in files and the CLI is "iris"; a reader's name for it is the text's.
          legend: {
            symbolSize: 400,
            symbolStrokeWidth: 2,
            symbolStrokeColor: "#555",
            labelExpr: MODE_LABEL_EXPR,
          },
        },
      },
    },
    {
      ...curve,
      mark: { type: "point", filled: true, size: 36 },
      encoding: {
        x,
        y,
        color,
        // Without mode among the point layer's fields its mean would mix standard and iris runs.
        detail: { field: "mode", type: "nominal" },
      },
    },
  );
  if (ends.length)
    layers.push({
      transform: [{ filter: "datum.end === true" }],
      mark: { type: "point", shape: "cross", filled: true, size: 120, color: "black", angle: 45 },
      encoding: { x, y: { ...y, aggregate: undefined } },
    });
  const spec = {
    $schema: SCHEMA,
    title: { text: f.title, subtitle: f.subtitle },
    data: { values: [...values, ...ends] },
    facet: { field: "panel", type: "nominal", sort: panels, title: null },
    columns: Math.min(3, panels.length),
    spec: { width, height: 200, layer: layers },
    resolve: { scale: { x: "independent" } },
    config: CONFIG,
  } as TopLevelSpec;
  return { name: f.name, title: f.title, caption: f.caption, spec };
}

const ENDS =
  "Black crosses mark the ends of the curves, as the reference draws them: B alone on the left (End) and A alone, with its own head and no T, on the right (Front).";
const NULLS =
  "Where the experiment has null fronts (nulls: untrained, permuted, noise), the grey band in a pair's panel is the 95% interval of the highest null at each point: chance, which a score must clear to be beyond it.";
const SEVERAL =
  "Where several replicates share a panel, objective, mode and point, the line is their mean and the band its 95% Student-t interval.";

/**
 * The report's figures for these rows, those without data left out. `summary`: summarize(rows),
 * passed in where the report already made it (report/write.ts).
 */
export function reportFigures(rows: StitchRow[], summary: SummaryRow[] = summarize(rows)): Figure[] {
  const figures = [
    scoreFigure(rows, summary, {
      name: "agreement",
      title: "Agreement probability vs stitch point",
      subtitle: "larger = more similar; solid: standard stitching, dashed: invariance-aware (IRIs)",
      caption:
        "Agreement probability between the stitched model and the back model on the test set (marked where the pair's data are), " +
        "against the stitch point, one panel per pair of models; colour is the objective, solid lines are " +
        `standard stitching and dashed lines invariance-aware stitching. Larger agreement = more similar. ${ENDS} ${SEVERAL} ${NULLS}`,
      field: "agreement_prob",
      yTitle: "agreement probability",
      domain: [0, 1],
      // B agrees with itself; A alone is scored against B on the same test set.
      ends: { end: () => 1, front: (r) => r.front_alone_agreement_prob },
      nullBand: true,
    }),
    scoreFigure(rows, summary, {
      name: "accuracy",
      title: "Stitched accuracy vs stitch point",
      subtitle: "grey line: the back model's own accuracy; solid: standard, dashed: invariance-aware",
      caption:
        "Test accuracy of the stitched model against the stitch point; the grey line is the back model's " +
        "own accuracy. A stitch that keeps the back model's accuracy is forward compatible; it says nothing " +
        `about backward compatibility, which the agreement of invariance-aware stitching measures. ${ENDS} ${SEVERAL}`,
      field: "accuracy",
      yTitle: "accuracy",
      domain: [0, 1],
      reference: { field: "back_accuracy" },
      ends: { end: (r) => r.back_accuracy, front: (r) => r.front_alone_accuracy },
    }),
    scoreFigure(rows, summary, {
      name: "excess_agreement",
      title: "Excess agreement vs stitch point",
      subtitle: "agreement with class-consistent markers minus with rolled markers; near 0 = shortcut not shared",
      caption:
        "Excess agreement: agreement probability on a test set with class-consistent shortcut markers minus " +
        "that on a test set whose marker colours are rolled by one class. Larger means the stitched model " +
        `follows the front model's shortcut (false similarity); near 0 means it does not. ${SEVERAL}`,
      field: "excess_agreement",
      yTitle: "excess agreement",
      reference: { value: 0 },
    }),
    groundingFigure(rows),
  ];
  return figures.filter((f): f is Figure => f !== null);
}

/**
 * A grounding study's answer (findings/grounding.ts): each measure's Spearman rho with the fronts'
 * reliance, mean and 95% interval over replicates, one panel per point; null elsewhere.
 */
function groundingFigure(rows: StitchRow[]): Figure | null {
  const g = groundingRows(rows);
  if (g.length === 0) return null;
  const values = g.map((r) => ({
    point: r.point,
    pointIndex: r.pointIndex,
    measure: measureWords(r.measure),
    rho: r.rho.mean,
    // One replicate has no interval: its bar is its point.
    lo: Number.isFinite(r.rho.lo) ? r.rho.lo : r.rho.mean,
    hi: Number.isFinite(r.rho.hi) ? r.rho.hi : r.rho.mean,
  }));
  const points = distinct(values.sort((a, b) => a.pointIndex - b.pointIndex).map((v) => v.point));
  return {
    name: "grounding",
    title: "Grounding: rank correlation with reliance on the marker",
    caption:
      "For each measure, Spearman's rank correlation between its score and each front's measured reliance on its shortcut marker " +
      "(accuracy on marked minus rolled test images), within each replicate's fronts; the dot is the mean over replicates, the bar " +
      "its 95% interval. More reliance should mean less similarity, so a faithful measure sits left of 0, and the further left the better it ranks.",
    spec: {
      $schema: SCHEMA,
      data: { values },
      facet: { column: { field: "point", type: "nominal", sort: points, title: "stitch point" } },
      spec: {
        width: 220,
        layer: [
          { mark: { type: "rule", color: "#999999" }, encoding: { x: { datum: 0 } } },
          {
            mark: { type: "errorbar", ticks: true },
            encoding: {
              y: { field: "measure", type: "nominal", title: null },
              x: { field: "lo", type: "quantitative", scale: { domain: [-1, 1] }, title: "Spearman rho with reliance" },
              x2: { field: "hi" },
            },
          },
          {
            mark: { type: "point", filled: true, size: 50 },
            encoding: { y: { field: "measure", type: "nominal" }, x: { field: "rho", type: "quantitative" } },
          },
        ],
      },
    } as TopLevelSpec,
  };
}
