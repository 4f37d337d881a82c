// What a report is made of: the rows (findings/rows.ts), their summary, the reading and the
// run's environment. The experiment layer fills these; report/ only formats and draws them.
import type { IriPreview, ModelRow, StitchRow } from "../findings/rows.js";
import type { SummaryRow } from "../findings/summary.js";

export type { IriPreview, ModelRow, StitchMode, StitchRow } from "../findings/rows.js";

export interface ReportInput {
  title: string;
  rows: StitchRow[];
  /**
   * The replicate summary of `rows` (findings/summary.ts summarize), made once by whoever assembles
   * the report (experiments/results.ts) and used for summary.csv, the summary table and the
   * figures' bands; writeReport makes it when absent.
   */
  summary?: SummaryRow[];
  models: ModelRow[];
  iris: IriPreview[];
  environment: Record<string, string | number | boolean>;
  /** The reading in words (findings/reading.ts makes it; the terminal prints the same lines). */
  reading?: string[];
  /** Sanity warnings: the text, a tag shown next to the affected rows, and those rows (rowKey). */
  warnings?: { text: string; tag: string; rows: string[] }[];
  notes?: string[];
}
