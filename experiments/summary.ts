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
