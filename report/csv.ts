// results.csv: one row per stitched run, in a fixed column order that starts with the columns
// every consumer relies on. Numbers are written unrounded (JavaScript's shortest round-trip
// form), null as an empty field; fields are quoted as RFC 4180 says (lines end in "\n").
import { readFileSync } from "node:fs";
import type { GroundingRow } from "../findings/grounding.js";
import type { StitchRow } from "../findings/rows.js";
import { SUMMARY_SCORES, type SummaryRow } from "../findings/summary.js";

/** The columns of results.csv, in order: the required ones first, then the rest of StitchRow. */
export const CSV_COLUMNS = [
  "front",
  "back",
  "pair",
  "point",
  "objective",
  "mode",
  "accuracy",
  "hard_agreement",
  "agreement_prob",
  "soft_error_consistency",
  "cka",
  "point_index",
  "back_accuracy",
  "hard_error_consistency",
  "excess_agreement",
  "test_data",
  "iri_residual",
  "bn_mode",
  "epochs",
  "seed",
  "replicate",
  "front_accuracy",
  "train_steps",
  "robust_accuracy",
  "robust_agreement_prob",
  "front_alone_accuracy",
  "front_alone_agreement_prob",
  "agreement_prob_se",
  "threads",
  "front_reliance",
  "front_point",
  "t_loss",
  "t_loss_fall",
  "iri_front_agreement",
  "front_clean_accuracy",
] as const;

type Cell = string | number | boolean | null | undefined;

/** One CSV field: quoted (with doubled quotes) when it holds a comma, a quote or a line break. */
export function csvField(v: Cell): string {
  if (v === null || v === undefined) return "";
  const s = String(v);
  return /[",\r\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

function cellOf(row: StitchRow, column: (typeof CSV_COLUMNS)[number]): Cell {
  return column === "point_index" ? row.pointIndex : row[column];
}

/** The text of results.csv for these rows, in the given order, header first. */
export function resultsCsv(rows: StitchRow[]): string {
  const lines = [CSV_COLUMNS.join(",")];
  for (const row of rows) lines.push(CSV_COLUMNS.map((c) => csvField(cellOf(row, c))).join(","));
  return `${lines.join("\n")}\n`;
}

/** CSV text's rows of fields, as RFC 4180 reads them (quoted fields may hold commas, quotes and line breaks). */
export function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let fields: string[] = [];
  let field = "";
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        field += '"';
        i++;
      } else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === "," || c === "\n") {
      fields.push(field);
      field = "";
      if (c === "\n") {
        rows.push(fields);
        fields = [];
      }
    } else if (c !== "\r") field += c;
  }
  if (field !== "" || fields.length) rows.push([...fields, field]);
  return rows;
}

/** A CSV file's rows as objects keyed by its header (results.csv, summary.csv). */
export function csvRecords(path: string): Record<string, string>[] {
  const [head, ...rows] = parseCsv(readFileSync(path, "utf8"));
  return (rows ?? []).map((r) => Object.fromEntries((head ?? []).map((h, i) => [h, r[i] ?? ""])));
}

/** summary.csv: the group, n, then mean, std, lo, hi of every score (empty where undefined). */
export function summaryCsv(summary: SummaryRow[]): string {
  const head = ["pair", "front", "back", "point", "objective", "mode", "test_data", "n"];
  for (const s of SUMMARY_SCORES) head.push(`${s}_mean`, `${s}_std`, `${s}_lo`, `${s}_hi`);
  const num = (v: number) => (Number.isFinite(v) ? v : null);
  const lines = [head.join(",")];
  for (const r of summary) {
    const cells: (string | number | null)[] = [r.pair, r.front, r.back, r.point, r.objective, r.mode, r.test_data, r.n];
    for (const s of SUMMARY_SCORES) {
      const i = r.scores[s];
      cells.push(num(i.mean), num(i.std), num(i.lo), num(i.hi));
    }
    lines.push(cells.map(csvField).join(","));
  }
  return `${lines.join("\n")}\n`;
}

/**
 * grounding.csv: one row per back, point, test data and measure (the baselines "front accuracy"
 * and "front alone" among them); rho and the partial rho with the fronts' accuracy held, each per
 * replicate joined by ";".
 */
export function groundingCsv(rows: GroundingRow[]): string {
  const head =
    "back,point,test_data,measure,fronts,n,rho_mean,rho_lo,rho_hi,rho_per_replicate,partial_mean,partial_lo,partial_hi,partial_per_replicate";
  const cell = (x: number) => (Number.isFinite(x) ? String(x) : "");
  const lines = rows.map((r) =>
    [
      r.back,
      r.point,
      r.test_data,
      r.measure,
      r.fronts,
      r.rho.n,
      cell(r.rho.mean),
      cell(r.rho.lo),
      cell(r.rho.hi),
      r.rhos.map(cell).join(";"),
      cell(r.partial.mean),
      cell(r.partial.lo),
      cell(r.partial.hi),
      r.partialRhos.map(cell).join(";"),
    ]
      .map((v) => csvField(v))
      .join(","),
  );
  return `${[head, ...lines].join("\n")}\n`;
}
