// results.csv: one row per stitched run, in a fixed column order that starts with the columns
// every consumer relies on. Numbers are written unrounded (JavaScript's shortest round-trip
// form), null as an empty field; fields are quoted as RFC 4180 says (lines end in "\n").
import { readFileSync } from "node:fs";
import type { StitchRow } from "./types.js";

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
