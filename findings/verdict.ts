// compare's verdict: per direction and point, whether invariance-aware agreement stays close to
// standard agreement (CLOSE_RULE), the point from which they part, the controls (B into itself)
// and the verdict in words. Read from the run's summary rows and IRI sets; experiments/compare.ts
// builds the study, this file reads its answer.
import { compareIntervals, type Interval } from "../metrics/interval.js";
import { isNullRelation } from "./chance.js";
import {
  atLeast,
  CONTROL_MIN_AGREEMENT,
  type ControlReading,
  controlReading,
  IRI_VERDICT_MAX_RESIDUAL,
  SIMILAR_STANDARD,
  type StandardRecipe,
} from "./reading.js";
import type { IriPreview } from "./rows.js";
import { formatInterval, type IntervalSources, type SummaryRow, seedAndImageInterval } from "./summary.js";

/** Standard and invariance-aware agreement whose means differ by at most this are close, whatever their intervals. */
export const CLOSE_MARGIN = 0.05;

/**
 * What close and apart say of A and B, printed under the rule: a verdict alone reads as a yes or
 * no that it is not. The figures are the paper's (docs/method.md, "The paper's findings", on
 * ResNet-18s).
 */
export const COMPARE_MEANING = `What it means: standard stitching asks whether A's features, through a trained T, serve B on real images; invariance-aware stitching trains T on inputs A cannot tell apart (IRIs) and asks whether B treats them alike too. Close at a point where standard agreement is high (${SIMILAR_STANDARD} or more, as the run's reading asks): A and B are similar there in both senses; close at low agreement says only that both fall alike. Apart: A's features serve B, but B tells apart what A does not, so standard stitching alone overstates their similarity there. Even two seeds of one architecture part at the deepest points (the paper: invariance-aware SLM about 0.5 at a ResNet-18's last point, standard 0.93-0.99), so weigh a pair against such a baseline (a cross-seed pair in an experiment file; --nulls for chance).`;

/** The rule by which standard and invariance-aware agreement at a point are close, as the verdict states it. */
export const CLOSE_RULE = `close: their 95% intervals overlap, or their means differ by at most ${CLOSE_MARGIN}; apart otherwise; a point whose IRI set has a mean residual above ${IRI_VERDICT_MAX_RESIDUAL} is too loose to judge`;

/** A score's interval in a verdict, with what it is over (findings/summary.ts seedAndImageInterval). */
export type VerdictInterval = Interval & { over: IntervalSources };

export interface PointVerdict {
  point: string;
  standard: VerdictInterval;
  iris: VerdictInterval;
  /** The largest mean residual of the point's IRI sets (null: none recorded). */
  residual: number | null;
  state: "close" | "apart" | "loose" | "missing";
}

/** One stitched direction (A -> B, B -> A or the control) with one objective, point by point. */
export interface DirectionVerdict {
  relation: string;
  front: string;
  back: string;
  objective: string;
  replicates: number;
  /**
   * What the intervals are over (findings/summary.ts seedAndImageInterval): the seeds and the test
   * images together; with one replicate, the test images alone; with no standard error recorded,
   * the seeds alone.
   */
  intervals: IntervalSources;
  points: PointVerdict[];
  /** The first point from which every judged point is apart (null: none). */
  partsFrom: string | null;
  /**
   * Why this direction's verdict cannot be read (null: it can): its back's control (the back
   * stitched into itself) failed, so the same recipe that stitched A into B also breaks B with
   * itself, and a gap or its absence says nothing about A. Set by compareVerdicts from the controls.
   */
  unreadable: string | null;
}

/**
 * Of intervals' sources, the one every interval covers: seeds and test images, unless one covers
 * less (seeds alone and test images alone together cover neither).
 */
function commonSources(over: IntervalSources[]): IntervalSources {
  const order: IntervalSources[] = ["none", "seeds", "test images", "seeds and test images"];
  if (!over.length || (over.includes("seeds") && over.includes("test images"))) return "none";
  return order[Math.min(...over.map((o) => order.indexOf(o)))] as IntervalSources;
}

const capital = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);

/** Close or apart by CLOSE_RULE. */
export function closeness(standard: Interval, iris: Interval): "close" | "apart" {
  if (Math.abs(standard.mean - iris.mean) <= CLOSE_MARGIN) return "close";
  return compareIntervals(standard, iris) === "overlap" ? "close" : "apart";
}

/**
 * The verdicts of a compare run, per direction and objective, from its summary rows and IRI sets;
 * a direction whose back's control failed is marked unreadable, with the reason (opts.recipe: the
 * standard runs' recipe, for the control's hint).
 */
export function compareVerdicts(
  summary: SummaryRow[],
  iris: IriPreview[],
  opts: { recipe?: StandardRecipe } = {},
): DirectionVerdict[] {
  // Null fronts are read against, not judged (findings/chance.ts beyondChance reads them).
  const clean = summary.filter((s) => s.test_data === "clean" && !isNullRelation(s.pair));
  const groups = new Map<string, SummaryRow[]>();
  for (const s of clean) {
    const k = `${s.pair}\t${s.front}\t${s.back}\t${s.objective}`;
    groups.set(k, [...(groups.get(k) ?? []), s]);
  }
  const out: DirectionVerdict[] = [];
  for (const rows of groups.values()) {
    const first = rows[0];
    const order = [...new Map(rows.map((r) => [r.point, r.pointIndex])).entries()]
      .sort((x, y) => x[1] - y[1])
      .map(([p]) => p);
    const points = order.map((point): PointVerdict => {
      const pick = (mode: string) => {
        const row = rows.find((r) => r.point === point && r.mode === mode);
        return row ? seedAndImageInterval(row) : undefined;
      };
      const standard = pick("standard");
      const inv = pick("iris");
      const residuals = iris.filter((i) => i.front === first.front && i.point === point).map((i) => i.residuals.mean);
      const residual = residuals.length ? Math.max(...residuals) : null;
      if (!standard || !inv || !(standard.n > 0 && inv.n > 0))
        return {
          point,
          standard: standard as VerdictInterval,
          iris: inv as VerdictInterval,
          residual,
          state: "missing",
        };
      const loose = residual !== null && residual > IRI_VERDICT_MAX_RESIDUAL;
      return { point, standard, iris: inv, residual, state: loose ? "loose" : closeness(standard, inv) };
    });
    const judged = points.filter((p) => p.state === "close" || p.state === "apart");
    let partsFrom: string | null = null;
    for (let i = judged.length - 1; i >= 0 && judged[i].state === "apart"; i--) partsFrom = judged[i].point;
    const replicates = Math.max(...rows.map((r) => r.n));
    out.push({
      relation: first.pair,
      front: first.front,
      back: first.back,
      objective: first.objective,
      replicates,
      // What every point's interval covers (a point without a standard error covers less).
      intervals: commonSources(points.flatMap((p) => [p.standard, p.iris]).flatMap((x) => (x ? [x.over] : []))),
      points,
      partsFrom,
      unreadable: null,
    });
  }
  for (const v of out) {
    if (v.relation === "identical") continue;
    const control = compareControls(
      out.filter((c) => c.relation === "identical" && c.back === v.back && c.objective === v.objective),
      opts,
    )[0];
    if (control && !control.passed)
      v.unreadable =
        `its control, ${v.back} stitched into itself, ${Number.isFinite(control.min) ? `drops to ${control.min.toFixed(3)} (below ${CONTROL_MIN_AGREEMENT})` : "has no score"}: ` +
        `the recipe breaks ${v.back} even with itself, so the gap between the modes says nothing about ${v.front}` +
        (control.hint ? `. ${control.hint.replace(/\.$/, "")}` : "");
  }
  // The compared directions first, the control last.
  return out.sort((x, y) => Number(x.relation === "identical") - Number(y.relation === "identical"));
}

const list = (xs: string[]) => (xs.length <= 1 ? xs.join("") : `${xs.slice(0, -1).join(", ")} and ${xs.at(-1)}`);

/** Each control of a compare run (B into itself; with --both-ways A into itself too), read as the verdict reads it. */
export function compareControls(
  verdicts: DirectionVerdict[],
  opts: { recipe?: StandardRecipe } = {},
): ({ front: string; back: string; objective: string } & ControlReading)[] {
  return verdicts
    .filter((v) => v.relation === "identical")
    .map((v) => ({
      front: v.front,
      back: v.back,
      objective: v.objective,
      ...controlReading(
        {
          standard: v.points.map((p) => p.standard?.mean ?? Number.NaN),
          iris: v.points.map((p) => p.iris?.mean ?? Number.NaN),
        },
        opts.recipe,
      ),
    }));
}

/**
 * The verdict in words, printed before the report: per direction and objective, the points where
 * invariance-aware agreement stays close to standard agreement and the point from which they part,
 * with the intervals; the rule; and what the intervals measure (fixed checkpoints: IRI and
 * stitching seeds only).
 */
export function compareVerdictLines(
  verdicts: DirectionVerdict[],
  /** recipe: what the standard runs did to real images and batch norm (reading.ts standardRecipe): the control's hint. */
  opts: { recipe?: StandardRecipe } = {},
): string[] {
  const lines: string[] = [];
  const iv = (i: Interval | undefined) => formatInterval(i, 3);
  for (const v of verdicts) {
    const what = `${v.front} -> ${v.back}${v.relation === "identical" ? " (the control)" : ""}, ${v.objective.toUpperCase()}, ${v.replicates} replicate${v.replicates === 1 ? "" : "s"}`;
    const close = v.points.filter((p) => p.state === "close").map((p) => p.point);
    const loose = v.points.filter((p) => p.state === "loose").map((p) => p.point);
    const part = v.points.find((p) => p.point === v.partsFrom);
    const apartEarly = v.points
      .filter((p) => p.state === "apart" && v.points.indexOf(p) < (part ? v.points.indexOf(part) : Infinity))
      .map((p) => p.point);
    let word: string;
    if (v.relation === "identical") {
      const c = compareControls([v], opts)[0] as ControlReading;
      word = c.passed
        ? `agreement ${atLeast(c.min)} or more everywhere, as a model stitched with itself must`
        : `FAILED: agreement drops to ${c.min.toFixed(3)} (below ${CONTROL_MIN_AGREEMENT}); the numbers below cannot be trusted${c.hint ? `. ${c.hint.replace(/\.$/, "")}` : ""}`;
    } else if (v.unreadable) word = `cannot be read: ${v.unreadable}`;
    else if (!close.length && !part)
      word =
        loose.length === v.points.length
          ? "no verdict: the IRIs are too loose to judge at every point"
          : "no point judged";
    else if (!part)
      word = `invariance-aware agreement stays close to standard agreement at every point judged (${list(close)})`;
    else
      word =
        (close.length
          ? `invariance-aware agreement stays close to standard agreement at ${list(close.filter((p) => v.points.findIndex((x) => x.point === p) < v.points.indexOf(part)))}`
          : "invariance-aware agreement is apart from standard agreement from the first point judged") +
        `; they part from ${part.point} on (${part.point}: standard ${iv(part.standard)}, invariance-aware ${iv(part.iris)})`;
    lines.push(
      `Verdict, ${what}: ${word}.` +
        (apartEarly.length && !v.unreadable ? ` Apart earlier at ${list(apartEarly)}, close again after.` : "") +
        (loose.length && v.relation !== "identical" && !v.unreadable
          ? ` Too loose to judge at ${list(loose)} (IRI residual above ${IRI_VERDICT_MAX_RESIDUAL}).`
          : ""),
    );
    if (v.relation !== "identical")
      for (const p of v.points)
        lines.push(
          `  ${p.point.padEnd(10)} standard ${iv(p.standard).padEnd(15)} invariance-aware ${iv(p.iris).padEnd(15)} ${v.unreadable ? "unreadable (control failed)" : p.state === "loose" ? `too loose to judge (residual ${p.residual?.toFixed(2)})` : p.state}`,
        );
  }
  const compared = verdicts.filter((v) => v.relation !== "identical");
  // A and B one model: the control is all there is, and its intervals are the ones to describe.
  const described = compared.length ? compared : verdicts;
  const n = Math.max(0, ...described.map((v) => v.replicates));
  const over = commonSources(described.map((v) => v.intervals));
  const notTraining = "neither measures another training run of either model";
  lines.push(
    `Rule: ${CLOSE_RULE}; agreement is the agreement probability, mean ± 95% half-width.`,
    ...(compared.length ? [COMPARE_MEANING] : []),
    {
      "seeds and test images": `The models are fixed checkpoints, so two sources move a score: the IRI and stitching seeds (the ${n} replicates, Student t) and the test sample (1.96 standard errors); each interval holds both, added in quadrature. ${capital(notTraining)}, which may land elsewhere.`,
      seeds: `The models are fixed checkpoints: the ${n} replicates differ in IRI and stitching seeds only, the only source of variation these intervals measure (no standard error over the test images was recorded; not training seeds either).`,
      "test images": `One replicate: each interval is over the test images only (mean ± 1.96 standard errors). Another IRI and stitching seed moves a score as well, by as much again at a ResNet-18's last point (docs/method.md, "The fast protocol"), so another --seed may land outside it; ${notTraining}. --replicates 3 (the default) gives intervals over both.`,
      none: "No interval over seeds or test images was recorded: only the margin decides.",
    }[over],
  );
  return lines;
}
