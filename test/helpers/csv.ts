// results.csv as the tests read it. The required columns are written out here, from the issue,
// not taken from report/csv.ts, so that the tests stay an independent check of the file.
import { readFileSync } from "node:fs";

/** The columns every results.csv must start with, in this order. */
export const REQUIRED_COLUMNS = [
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
];

/** Rows as objects keyed by the header (plain split: the tests' values hold no commas). */
export function csvRows(path: string): Record<string, string>[] {
  const [head, ...lines] = readFileSync(path, "utf8").trim().split("\n");
  const cols = head.split(",");
  return lines.map((l) => Object.fromEntries(l.split(",").map((v, i) => [cols[i], v])));
}
