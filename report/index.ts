// report/: the tables, figures and self-contained HTML page of an experiment.
export { type Figure, reportFigures } from "./charts.js";
export { CSV_COLUMNS, csvField, groundingCsv, resultsCsv, summaryCsv } from "./csv.js";
export { escapeHtml, type PageFigure, reportHtml } from "./html.js";
export { type Rendered, renderFigure, renderSvg } from "./render.js";
export type { ReportInput } from "./types.js";
export { type WrittenReport, writeReport } from "./write.js";
