// report/: the tables, figures and self-contained HTML page of an experiment.
export { type Figure, reportFigures } from "./charts.js";
export { CSV_COLUMNS, csvField, resultsCsv } from "./csv.js";
export { escapeHtml, type PageFigure, reportHtml } from "./html.js";
export { type Rendered, renderFigure, renderSvg } from "./render.js";
export {
  agreementInterval,
  formatInterval,
  groupBy,
  groupKey,
  type IntervalSources,
  perReplicate,
  pointsOf,
  rowKey,
  SUMMARY_SCORES,
  type SummaryRow,
  type SummaryScore,
  seedAndImageInterval,
  summarize,
  summaryCsv,
} from "./summary.js";
export type { IriPreview, ModelRow, ReportInput, StitchMode, StitchRow } from "./types.js";
export { type WrittenReport, writeReport } from "./write.js";
