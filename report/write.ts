// Writes an experiment's report directory: results.csv (one row per run), summary.csv (means and
// 95% intervals over replicates), report.html and figures/ (each figure
// as <name>.vl.json, <name>.svg, <name>.png). Every file is written atomically (temporary
// sibling, then rename), so an interrupted run never leaves a half-written report.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { groundingRows } from "../findings/grounding.js";
import { summarize } from "../findings/summary.js";
import { writeFileAtomic } from "../io/files.js";
import { reportFigures } from "./charts.js";
import { groundingCsv, resultsCsv, summaryCsv } from "./csv.js";
import { type PageFigure, reportHtml } from "./html.js";
import { renderFigure } from "./render.js";
import type { ReportInput, StitchRow } from "./types.js";

export interface WrittenReport {
  /** Path of report.html. */
  html: string;
  /** Path of results.csv. */
  csv: string;
  /** Names of the figures written, each as figures/<name>.vl.json, .svg and .png. */
  figures: string[];
}

/** An error naming the row and the field, for rows the experiment layer built wrongly. */
function checkRows(rows: StitchRow[]): void {
  rows.forEach((r, i) => {
    const where = `report: stitched run ${i} (${r.front} -> ${r.back}, ${r.point}, ${r.objective})`;
    if (r.mode !== "standard" && r.mode !== "iris")
      throw new Error(`${where}: mode must be "standard" or "iris", got ${JSON.stringify(r.mode)}`);
    if (!Number.isInteger(r.pointIndex) || r.pointIndex < 0)
      throw new Error(
        `${where}: pointIndex must be the point's position in the back model's list, got ${r.pointIndex}`,
      );
  });
}

/** Writes the report of `input` into outDir (created if missing) and returns what it wrote. */
export async function writeReport(input: ReportInput, outDir: string): Promise<WrittenReport> {
  checkRows(input.rows);
  // One summary for the whole report: summary.csv, the table and the figures' bands.
  const summary = input.summary ?? summarize(input.rows);
  const figuresDir = join(outDir, "figures");
  mkdirSync(figuresDir, { recursive: true });

  const page: PageFigure[] = [];
  for (const figure of reportFigures(input.rows, summary)) {
    const { svg, png } = await renderFigure(figure.spec);
    writeFileAtomic(join(figuresDir, `${figure.name}.vl.json`), [`${JSON.stringify(figure.spec, null, 2)}\n`]);
    writeFileAtomic(join(figuresDir, `${figure.name}.svg`), [svg]);
    writeFileAtomic(join(figuresDir, `${figure.name}.png`), [png]);
    page.push({ name: figure.name, title: figure.title, caption: figure.caption, svg });
  }

  const csv = join(outDir, "results.csv");
  writeFileAtomic(csv, [resultsCsv(input.rows)]);
  writeFileAtomic(join(outDir, "summary.csv"), [summaryCsv(summary)]);
  // A grounding study's rank correlations (none written elsewhere).
  const grounding = groundingRows(input.rows);
  if (grounding.length) writeFileAtomic(join(outDir, "grounding.csv"), [groundingCsv(grounding)]);
  const html = join(outDir, "report.html");
  writeFileAtomic(html, [reportHtml(input, page, summary)]);
  return { html, csv, figures: page.map((f) => f.name) };
}
