// Text summaries of an experiment's results for the terminal: the agreement table (pairs,
// objectives and modes by stitch point) and the IRI residuals.
import type { IriPreview, StitchRow } from "../report/index.js";

/** Agreement probability, one line per (pair, objective, mode), one column per point (mean over seeds). */
export function agreementTable(rows: StitchRow[]): string {
  const points = [...new Map(rows.map((r) => [r.point, r.pointIndex])).entries()]
    .sort((a, b) => a[1] - b[1])
    .map(([p]) => p);
  const groups = new Map<string, StitchRow[]>();
  for (const r of rows) {
    const k = [r.pair, `${r.front}->${r.back}`, r.objective, r.mode].join("\t");
    groups.set(k, [...(groups.get(k) ?? []), r]);
  }
  const header = ["pair", "front->back", "objective", "mode", ...points];
  const lines = [header];
  for (const [k, rs] of groups) {
    const cells = points.map((p) => {
      const at = rs.filter((r) => r.point === p);
      return at.length ? (at.reduce((s, r) => s + r.agreement_prob, 0) / at.length).toFixed(3) : "-";
    });
    lines.push([...k.split("\t"), ...cells]);
  }
  const widths = header.map((_, i) => Math.max(...lines.map((l) => l[i].length)));
  return lines
    .map((l) =>
      l
        .map((c, i) => c.padEnd(widths[i]))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
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

function meanOf(rows: StitchRow[]): number {
  return rows.reduce((s, r) => s + r.agreement_prob, 0) / rows.length;
}

/**
 * A short reading of an experiment's agreement in words: the identical pair as the control, what
 * standard stitching says of each pair, and how invariance-aware agreement compares between
 * pairs from the middle point on. Numbers are means over objectives and seeds.
 */
export function reading(rows: StitchRow[]): string[] {
  const out: string[] = [];
  const points = [...new Map(rows.map((r) => [r.point, r.pointIndex])).entries()]
    .sort((a, b) => a[1] - b[1])
    .map(([p]) => p);
  const pairs = [...new Set(rows.map((r) => r.pair))];
  const at = (pair: string, mode: string, point: string) =>
    rows.filter((r) => r.pair === pair && r.mode === mode && r.point === point);
  const fmt = (v: number) => v.toFixed(2);
  const series = (pair: string, mode: string) =>
    points.map((p) => (at(pair, mode, p).length ? meanOf(at(pair, mode, p)) : Number.NaN));
  if (pairs.includes("identical")) {
    const lows = rows.filter((r) => r.pair === "identical").map((r) => r.agreement_prob);
    const min = Math.min(...lows);
    out.push(
      min >= 0.95
        ? `Control: the identical pair agrees at ${min.toFixed(3)} or more everywhere, as a model stitched with itself must.`
        : `Control FAILED: the identical pair drops to ${min.toFixed(3)} (below 0.95); the other numbers cannot be trusted.`,
    );
  }
  for (const pair of pairs.filter((p) => p !== "identical")) {
    const std = series(pair, "standard").filter((v) => !Number.isNaN(v));
    const iri = series(pair, "iris");
    if (std.length)
      out.push(
        `${pair}: standard stitching agrees at ${fmt(Math.min(...std))}-${fmt(Math.max(...std))}` +
          (Math.min(...std) >= 0.7 ? " (it calls the pair similar)" : " (below 0.7 somewhere)") +
          (iri.some((v) => !Number.isNaN(v))
            ? `; invariance-aware: ${points.map((p, i) => `${p} ${Number.isNaN(iri[i]) ? "-" : fmt(iri[i])}`).join(", ")}.`
            : "."),
      );
  }
  if (pairs.includes("cross-seed") && pairs.includes("cross-bias") && points.length >= 2) {
    const seed = series("cross-seed", "iris");
    const bias = series("cross-bias", "iris");
    const from = Math.floor((points.length - 1) / 2);
    const gaps = points.slice(from).map((p, i) => ({ p, d: seed[from + i] - bias[from + i] }));
    const clear = gaps.filter((g) => g.d >= 0.1);
    out.push(
      clear.length === gaps.length
        ? `From the middle point on, invariance-aware agreement is clearly higher for cross-seed than for cross-bias (${gaps.map((g) => `${g.p} +${fmt(g.d)}`).join(", ")}): the shortcut model is not functionally similar to the back model, although standard stitching says it is.`
        : `From the middle point on, cross-seed minus cross-bias invariance-aware agreement is ${gaps.map((g) => `${g.p} ${g.d >= 0 ? "+" : ""}${fmt(g.d)}`).join(", ")}: the pairs are ${clear.length ? "told apart only at some points" : "not told apart"} at this scale.`,
    );
  }
  return out;
}
