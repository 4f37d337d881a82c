// report.html: one self-contained file that opens with no network and no JavaScript: inline
// CSS, the figures as inline SVG, the IRI grids as data: URLs, and plain tables. Every piece
// of text that comes from the input is escaped.

import { formatInterval, groupBy, rowKey, type SummaryRow } from "../findings/summary.js";
import { GOOD_IRI_RESIDUAL } from "../stitch/residuals.js";
import type { Figure } from "./charts.js";
import type { IriPreview, ModelRow, ReportInput, StitchRow } from "./types.js";

/** A figure ready for the page: its spec's description and the rendered SVG text. */
export interface PageFigure extends Pick<Figure, "name" | "title" | "caption"> {
  svg: string;
}

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** Text made safe for HTML element content and quoted attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

/** A score to 3 decimals; null as a dash. */
export function fmt(x: number | null): string {
  if (x === null) return "–";
  return Number.isFinite(x) ? x.toFixed(3) : String(x);
}

/**
 * The SVG with its ids (and the references to them) prefixed, so that several inline SVGs on
 * one page cannot collide on a clip path or gradient id. The XML prologue, if any, is dropped.
 */
export function inlineSvg(svg: string, prefix: string): string {
  return svg
    .replace(/^<\?xml[^>]*\?>\s*/, "")
    .replace(/\bid="([^"]+)"/g, `id="${prefix}-$1"`)
    .replace(/url\(#([^)]+)\)/g, `url(#${prefix}-$1)`)
    .replace(/href="#([^"]+)"/g, `href="#${prefix}-$1"`);
}

/** Width and height from a PNG's IHDR chunk; an error naming the preview when it is not a PNG. */
export function pngSize(png: Buffer, what: string): { width: number; height: number } {
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  if (png.byteLength < 24 || !png.subarray(0, 8).equals(signature) || png.toString("latin1", 12, 16) !== "IHDR")
    throw new Error(`${what}: png is not a PNG image (${png.byteLength} bytes); pass the PNG bytes of the preview`);
  return { width: png.readUInt32BE(16), height: png.readUInt32BE(20) };
}

const CSS = `
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #222;
  background: #fff; margin: 0 auto; padding: 24px 32px 64px; max-width: 1200px; line-height: 1.45; }
h1 { font-size: 1.6rem; margin: 0 0 4px; }
h2 { font-size: 1.2rem; margin: 40px 0 8px; padding-bottom: 4px; border-bottom: 1px solid #e3e3e3; }
p.lead { color: #555; margin: 0 0 8px; }
nav a { margin-right: 14px; color: #2a5db0; text-decoration: none; font-size: 0.92rem; }
figure { margin: 16px 0 28px; }
figure.chart svg { display: block; max-width: 100%; height: auto; }
figcaption { color: #444; font-size: 0.9rem; max-width: 900px; margin-top: 6px; }
figcaption .files { color: #888; font-size: 0.82rem; }
.iris details { margin: 6px 0; }
.iris summary { cursor: pointer; padding: 4px 0; }
.iris summary .muted { font-size: 0.88rem; }
.iris .sets { display: flex; flex-wrap: wrap; gap: 28px 20px; margin: 8px 0 18px; }
.iris figure { margin: 0; }
.iris figcaption { margin: 0 0 6px; }
.iris img { image-rendering: pixelated; border: 1px solid #ddd; max-width: 100%; height: auto; }
.iris .grid { display: flex; align-items: stretch; gap: 8px; }
.iris .rows { display: flex; flex-direction: column; justify-content: space-around; font-size: 0.8rem; color: #444; text-align: right; }
.iris .per-image-row { display: flex; gap: 8px; }
.iris .per-image { display: flex; box-sizing: content-box; padding: 0 1px; font-size: 0.72rem; color: #444; font-variant-numeric: tabular-nums; }
.iris .per-image span { flex: 1; text-align: center; }
.iris .per-image span.loose, .iri-legend .loose { color: #b00; }
.iri-legend { font-size: 0.9rem; color: #444; }
.scroll { overflow-x: auto; max-width: 100%;
  /* A wide table scrolls in its own box: a shadow at the right edge while columns lie beyond it (the
     white cover travels with the table's end, so it hides the shadow once the end is in view), and
     the first column stays in place. */
  background: linear-gradient(to left, #fff 40%, rgba(255, 255, 255, 0)) right / 28px 100% no-repeat local,
    radial-gradient(farthest-side at 100% 50%, rgba(0, 0, 0, 0.22), rgba(0, 0, 0, 0)) right / 14px 100% no-repeat scroll; }
.scroll th:first-child, .scroll td:first-child { position: sticky; left: 0; z-index: 1; background: #fff;
  box-shadow: inset -1px 0 #e3e3e3; }
.scroll th:first-child { background: #f6f7f9; z-index: 2; }
.scroll tr:hover td:first-child { background: #fafbfd; }
table { border-collapse: collapse; font-size: 0.84rem; margin: 8px 0; }
th, td { padding: 3px 9px; border-bottom: 1px solid #eee; text-align: left; white-space: nowrap; }
th { background: #f6f7f9; font-weight: 600; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:hover td { background: #fafbfd; }
.reading li { margin: 4px 0; }
.warnings li { color: #a33; }
td.warning { color: #a33; font-size: 0.78rem; }
.muted { color: #888; }
`;

const h = escapeHtml;
const cell = (text: string, numeric = false) => `<td${numeric ? ' class="num"' : ""}>${h(text)}</td>`;

function table(headers: string[], rows: string[][]): string {
  const head = `<tr>${headers.map((c) => `<th>${h(c)}</th>`).join("")}</tr>`;
  return `<div class="scroll"><table><thead>${head}</thead><tbody>\n${rows.map((r) => `<tr>${r.join("")}</tr>`).join("\n")}\n</tbody></table></div>`;
}

function chartsSection(figures: PageFigure[]): string {
  if (figures.length === 0) return '<p class="muted">No stitched runs, so no figures.</p>';
  return figures
    .map(
      (f) =>
        `<figure class="chart" id="figure-${h(f.name)}">\n${inlineSvg(f.svg, `fig-${f.name}`)}\n` +
        `<figcaption><strong>${h(f.title)}.</strong> ${h(f.caption)} ` +
        `<span class="files">(figures/${h(f.name)}.svg, .png, .vl.json)</span></figcaption></figure>`,
    )
    .join("\n");
}

const OBJECTIVE_ORDER = ["hlm", "slm", "dm", "fula"];
const MODE_ORDER = ["standard", "iris"];

/** Rows grouped as a reader scans them: by pair (in order of appearance), models, objective, mode, point. */
function sortedRows(rows: StitchRow[]): StitchRow[] {
  const pairRank = new Map<string, number>();
  for (const r of rows) if (!pairRank.has(r.pair)) pairRank.set(r.pair, pairRank.size);
  const by = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  // Known names in the paper's order, any other after them, alphabetically.
  const rank = (order: string[], v: string) => (order.includes(v) ? order.indexOf(v) : order.length);
  const byKnown = (order: string[], a: string, b: string) => rank(order, a) - rank(order, b) || by(a, b);
  return [...rows].sort(
    (a, b) =>
      pairRank.get(a.pair)! - pairRank.get(b.pair)! ||
      by(a.front, b.front) ||
      by(a.back, b.back) ||
      byKnown(OBJECTIVE_ORDER, a.objective, b.objective) ||
      byKnown(MODE_ORDER, a.mode, b.mode) ||
      a.pointIndex - b.pointIndex,
  );
}

function resultsSection(rows: StitchRow[]): string {
  if (rows.length === 0) return '<p class="muted">No stitched runs.</p>';
  const headers = [
    "pair",
    "front",
    "back",
    "point",
    "objective",
    "mode",
    "accuracy",
    "back acc.",
    "hard agr.",
    "agreement prob.",
    "hard EC",
    "soft EC",
    "CKA",
    "excess agr.",
    "IRI residual",
    "BN",
    "epochs",
    "seed",
    "replicate",
    "threads",
  ];
  const body = sortedRows(rows).map((r) => [
    cell(r.pair),
    cell(r.front),
    cell(r.back),
    // The front's point where it is another (two architectures: its partner by depth).
    cell(r.front_point && r.front_point !== r.point ? `${r.front_point} -> ${r.point}` : r.point),
    cell(r.objective),
    cell(r.mode),
    cell(fmt(r.accuracy), true),
    cell(fmt(r.back_accuracy), true),
    cell(fmt(r.hard_agreement), true),
    cell(fmt(r.agreement_prob), true),
    cell(fmt(r.hard_error_consistency), true),
    cell(fmt(r.soft_error_consistency), true),
    cell(fmt(r.cka), true),
    cell(fmt(r.excess_agreement), true),
    cell(fmt(r.iri_residual), true),
    cell(r.bn_mode),
    cell(String(r.epochs), true),
    cell(String(r.seed), true),
    cell(String(r.replicate), true),
    cell(r.threads),
  ]);
  // A table that fits: the columns a reader compares first, then every column on demand.
  const compact = [
    "pair",
    "point",
    "objective",
    "mode",
    "replicate",
    "agreement prob.",
    "accuracy",
    "IRI residual",
    "BN",
  ];
  const pick = compact.map((c) => headers.indexOf(c));
  return (
    "<p>Scores on the test set named in the summary's test-data column (excess agreement: on the marked and the rolled test sets); for " +
    "agreement, error consistency (EC), CKA and excess agreement, " +
    "larger = more similar. Every row is also in <code>results.csv</code>, unrounded.</p>\n" +
    `<div class="compact">${table(
      compact,
      body.map((r) => pick.map((i) => r[i] as string)),
    )}</div>\n` +
    `<details class="all-columns"><summary>All ${headers.length} columns (front, back, back accuracy, hard agreement, error consistency, CKA, excess agreement, epochs, seed)</summary>\n${table(headers, body)}\n</details>`
  );
}

/** Mean ± 95% half-width over replicates, one row per (pair, point, objective, mode, test data). */
function summarySection(
  rows: StitchRow[],
  summary: SummaryRow[],
  warned: NonNullable<ReportInput["warnings"]>,
): string {
  if (rows.length === 0) return '<p class="muted">No stitched runs.</p>';
  const tagsOf = (key: string) => [...new Set(warned.filter((w) => w.rows.includes(key)).map((w) => w.tag))].join(", ");
  const all = [
    "pair",
    "front → back",
    "point",
    "objective",
    "mode",
    "test data",
    "n",
    "agreement prob.",
    "accuracy",
    "soft EC",
    "CKA",
    "excess agr.",
    "warnings",
  ];
  const texts = summary.map((s) => [
    s.pair,
    `${s.front} → ${s.back}`,
    s.point,
    s.objective,
    s.mode,
    s.test_data,
    String(s.n),
    formatInterval(s.scores.agreement_prob),
    formatInterval(s.scores.accuracy),
    formatInterval(s.scores.soft_error_consistency),
    formatInterval(s.scores.cka),
    formatInterval(s.scores.excess_agreement),
    tagsOf(rowKey(s)),
  ]);
  // A score no row has (excess agreement without marked test sets) and a warnings column with no
  // warning are left out, so that the table fits the page where it can; it scrolls in its own
  // box where it cannot.
  const empty = (i: number) => all[i] !== "n" && texts.every((t) => t[i] === "-" || t[i] === "");
  const keep = all.map((_, i) => i).filter((i) => !empty(i));
  const left = all.filter((_, i) => empty(i));
  const numeric = (i: number) => i >= all.indexOf("n") && all[i] !== "warnings";
  const body = texts.map((t) =>
    keep.map((i) => (all[i] === "warnings" ? `<td class="warning">${h(t[i])}</td>` : cell(t[i], numeric(i)))),
  );
  return (
    "<p>Means over replicates ± the half-width of their 95% Student-t interval (no interval for one replicate); " +
    "larger = more similar. Two values differ only where their intervals do not overlap. " +
    "Also in <code>summary.csv</code>, unrounded, with standard deviations." +
    (left.length
      ? ` Left out, with no value in any row: ${left.map((c) => (c === "warnings" ? "warnings (none)" : h(c))).join(", ")}.`
      : "") +
    "</p>\n" +
    `<div class="summary">${table(
      keep.map((i) => all[i]),
      body,
    )}</div>`
  );
}

function readingSection(input: ReportInput): string {
  const lines = input.reading ?? [];
  const warned = input.warnings ?? [];
  if (lines.length === 0 && warned.length === 0) return "";
  const items = lines
    .filter((l) => !l.startsWith("Warning: "))
    .map((l) => `<li>${h(l)}</li>`)
    .join("\n");
  const warn = warned.map((w) => `<li class="warning">${h(w.text)}</li>`).join("\n");
  return `<ul class="reading">\n${items}\n</ul>${warn ? `\n<h3>Warnings</h3>\n<ul class="warnings">\n${warn}\n</ul>` : ""}`;
}

function modelsSection(models: ModelRow[]): string {
  if (models.length === 0) return '<p class="muted">No base models listed.</p>';
  const sets = [...new Set(models.flatMap((m) => Object.keys(m.accuracies)))];
  const headers = ["name", "arch", "dataset", "shortcut", "adversarial", "seed", ...sets.map((s) => `accuracy (${s})`)];
  const body = models.map((m) => [
    cell(m.name),
    cell(m.arch),
    cell(m.dataset),
    cell(m.shortcut ?? "none"),
    cell(m.adversarial ? "yes" : "no"),
    cell(String(m.seed), true),
    ...sets.map((s) => cell(fmt(m.accuracies[s] ?? null), true)),
  ]);
  return table(headers, body);
}

/** One IRI grid: its title above it, the picture with its rows labelled, each image's residual under its column. */
function irisFigure(p: IriPreview): string {
  const what = `IRI preview for ${p.front} at ${p.point}`;
  const { width, height } = pngSize(p.png, what);
  // Small previews (32 px images) are shown at twice their size, pixelated, up to the page width.
  const scale = width <= 600 ? 2 : 1;
  const r = p.residuals;
  // Each grid row is labelled beside the picture: the image, its IRI, their amplified difference.
  const labels =
    `<div class="rows" style="height:${height * scale}px"><span>x</span><span>x′ (IRI)</span>` +
    "<span>|x − x′|, amplified</span></div>";
  // Under each column, that image's residual (red above GOOD_IRI_RESIDUAL), aligned with the picture.
  const per = p.previewResiduals?.length
    ? `<div class="per-image-row"><div class="rows" style="visibility:hidden"><span>|x − x′|, amplified</span></div>` +
      `<div class="per-image" style="width:${width * scale}px" title="relative residual of each image">` +
      p.previewResiduals
        .map((v) => `<span${v > GOOD_IRI_RESIDUAL ? ' class="loose"' : ""}>${h(v.toFixed(3))}</span>`)
        .join("") +
      "</div></div>"
    : "";
  // The title comes first, so that it reads as this grid's and not as the one after it.
  return (
    `<figure><figcaption><strong>${h(p.front)}</strong> at <strong>${h(p.point)}</strong><br>` +
    `relative residual: mean ${fmt(r.mean)}, median ${fmt(r.median)}, p90 ${fmt(r.p90)}; ` +
    `share &le; ${GOOD_IRI_RESIDUAL}: ${h((100 * r.below01).toFixed(1))}%</figcaption>\n` +
    `<div class="grid">${labels}<img src="data:image/png;base64,${p.png.toString("base64")}" width="${width * scale}" ` +
    `height="${height * scale}" alt="${h(what)}"></div>${per}</figure>`
  );
}

function irisSection(iris: IriPreview[]): string {
  if (iris.length === 0) return '<p class="muted">No IRI sets in this run.</p>';
  // One fold per front model (and replicate), its points side by side; the first open. A run's
  // dozens of grids would otherwise make a page many screens long.
  const folds = [...groupBy(iris, (p) => p.front).entries()].map(([front, sets], i) => {
    const means = sets.map((p) => `${h(p.point)} ${fmt(p.residuals.mean)}`).join(", ");
    return (
      `<details${i === 0 ? " open" : ""}><summary><strong>${h(front)}</strong> ` +
      `<span class="muted">(mean relative residual: ${means})</span></summary>\n` +
      `<div class="sets">\n${sets.map(irisFigure).join("\n")}\n</div></details>`
    );
  });
  return (
    "<p>Rows: the original image x, its IRI x′, and |x − x′|. The relative residual is " +
    "‖A(x′) − A(x)‖ / ‖A(x)‖ at the stitch point; an IRI set whose residuals are large is not an IRI set. " +
    `One fold per front model; ${iris.length} IRI set${iris.length === 1 ? "" : "s"} in ${folds.length}, the first open.</p>\n` +
    (iris.some((p) => p.previewResiduals?.length)
      ? `<p class="iri-legend">Numbers under a grid: each image's own relative residual ‖A(x′) − A(x)‖ / ‖A(x)‖, ` +
        `in the column of its picture; <span class="loose">red</span> when above ${GOOD_IRI_RESIDUAL} ` +
        "(not a good IRI).</p>\n"
      : "") +
    `<div class="iris">\n${folds.join("\n")}\n</div>`
  );
}

function environmentSection(env: ReportInput["environment"]): string {
  const entries = Object.entries(env);
  if (entries.length === 0) return '<p class="muted">Not recorded.</p>';
  return table(
    ["key", "value"],
    entries.map(([k, v]) => [cell(k), cell(String(v))]),
  );
}

/**
 * The whole page. `figures` are in the order they appear; their SVGs are inlined. `summaryRows`:
 * summarize(input.rows), made once for the whole report (report/write.ts).
 */
export function reportHtml(input: ReportInput, figures: PageFigure[], summaryRows: SummaryRow[]): string {
  const read = readingSection(input);
  const sections: [string, string, string][] = [
    ...(read ? ([["reading", "Reading", read]] as [string, string, string][]) : []),
    ["figures", "Figures", chartsSection(figures)],
    ["summary", "Summary over replicates", summarySection(input.rows, summaryRows, input.warnings ?? [])],
    ["results", "Every run", resultsSection(input.rows)],
    ["models", "Base models", modelsSection(input.models)],
    ["iris", "IRIs", irisSection(input.iris)],
    ["environment", "Environment", environmentSection(input.environment)],
  ];
  const notes = (input.notes ?? []).map((n) => `<p>${h(n)}</p>`).join("\n");
  const summary = `${input.rows.length} stitched run${input.rows.length === 1 ? "" : "s"}, ${input.models.length} base model${input.models.length === 1 ? "" : "s"}, ${input.iris.length} IRI preview${input.iris.length === 1 ? "" : "s"}.`;
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${h(input.title)}</title>
<style>${CSS}</style>
</head>
<body>
<header>
<h1>${h(input.title)}</h1>
<p class="lead">${h(summary)}</p>
<nav>${sections.map(([id, name]) => `<a href="#${id}">${h(name)}</a>`).join("")}</nav>
${notes ? `<section id="notes">\n${notes}\n</section>` : ""}
</header>
<main>
${sections.map(([id, name, body]) => `<section id="${id}">\n<h2>${h(name)}</h2>\n${body}\n</section>`).join("\n")}
</main>
</body>
</html>
`;
}
