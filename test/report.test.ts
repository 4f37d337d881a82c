// report/: results.csv's columns and quoting, the files writeReport leaves, and report.html
// opened in headless Chromium (Debian's `chromium`): charts drawn, IRI grid loaded, no console
// errors and no request leaving the page; and the page as a reader sees it at 1400 px (issue 37,
// section 6): the summary table fits or scrolls in its own box, IRI titles above their grids and
// folded per front, a legend for the red residuals, "invariance-aware" in the figures' legends,
// and "Replicates: n" said once in the reading.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { pathToFileURL } from "node:url";
import sharp from "sharp";
import { planExperiment } from "../experiments/plan.js";
import { settingsLines } from "../experiments/plan-words.js";
import { parseExperiment } from "../experiments/spec.js";
import { type IriPreview, rowKey, type StitchRow, summarize } from "../findings/index.js";
import { reading } from "../findings/reading.js";
import { parseCsv as readCsv } from "../report/csv.js";
import {
  escapeHtml,
  type ReportInput,
  renderSvg,
  reportFigures,
  reportHtml,
  resultsCsv,
  writeReport,
} from "../report/index.js";
import { GOOD_IRI_RESIDUAL } from "../stitch/residuals.js";
import { runTs } from "./helpers/cli.js";
import { REQUIRED_COLUMNS } from "./helpers/csv.js";
import { findChromium, skipUnless } from "./helpers/requirements.js";
import { stitchRow } from "./helpers/rows.js";

/**
 * results.csv's whole header, written out here rather than taken from report/csv.ts's
 * CSV_COLUMNS, so that a column dropped, renamed or moved there fails the tests: the required
 * columns (helpers/csv.ts, from the issue), then the rest in the order README.md lists them, then
 * the robust ones (docs/experiments.md).
 */
const ALL_COLUMNS = [
  ...REQUIRED_COLUMNS,
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
];

function row(over: Partial<StitchRow> = {}): StitchRow {
  return stitchRow({
    back: "clean-s2",
    point: "layer1.0",
    pointIndex: 1,
    mode: "standard",
    back_accuracy: 0.92,
    hard_agreement: 0.95,
    agreement_prob: 0.93,
    hard_error_consistency: 0.6,
    iri_residual: null,
    epochs: 3,
    train_steps: 300,
    front_alone_accuracy: 0.88,
    front_alone_agreement_prob: 0.8,
    agreement_prob_se: 0.01,
    ...over,
  });
}

/** CSV text read by report/csv.ts's RFC 4180 reader (tested on its own below), ending in a newline as written. */
function parseCsv(text: string): string[][] {
  assert.ok(text.endsWith("\n"), "CSV text ends with a newline");
  return readCsv(text);
}

describe("resultsCsv", () => {
  test("header starts with the required columns, in order", () => {
    const [header] = parseCsv(resultsCsv([]));
    assert.deepEqual(header.slice(0, REQUIRED_COLUMNS.length), REQUIRED_COLUMNS);
    assert.deepEqual(header, ALL_COLUMNS);
    assert.equal(new Set(header).size, header.length, "no column twice");
  });

  test("one line per row; quoting, null, unrounded numbers", () => {
    const rows = [
      row({ objective: "hlm:1,fula:0.5", front: 'say "hi"', cka: null, agreement_prob: 0.1 + 0.2 }),
      row({ point: "blocks.1\nx", mode: "iris", iri_residual: 0.123456789, excess_agreement: -0.25 }),
      row(),
    ];
    const text = resultsCsv(rows);
    assert.ok(text.includes('"hlm:1,fula:0.5"') && text.includes('"say ""hi"""'), text);
    const parsed = parseCsv(text);
    assert.equal(parsed.length, 1 + rows.length);
    const col = (name: string) => parsed[0].indexOf(name);
    assert.ok(parsed.every((r) => r.length === ALL_COLUMNS.length));
    assert.equal(parsed[1][col("objective")], "hlm:1,fula:0.5");
    assert.equal(parsed[1][col("front")], 'say "hi"');
    assert.equal(parsed[1][col("cka")], "", "null is an empty field");
    assert.equal(Number(parsed[1][col("agreement_prob")]), 0.1 + 0.2, "numbers round-trip exactly");
    assert.equal(parsed[2][col("point")], "blocks.1\nx");
    assert.equal(parsed[2][col("iri_residual")], "0.123456789");
    assert.equal(parsed[2][col("excess_agreement")], "-0.25");
    assert.equal(parsed[3][col("point_index")], "1");
  });
});

const POINTS = ["stem", "layer2.0", "layer4.1"];

/** 2 pairs x 3 points x 2 objectives x 2 modes; excess agreement only for the cross-bias pair. */
function syntheticRows(): StitchRow[] {
  const rows: StitchRow[] = [];
  for (const [pair, front, back] of [
    ["cross-seed", "clean-s1", "clean-s2"],
    ["cross-bias", "pixel-s1", "clean-s1"],
  ])
    for (const objective of ["hlm", "fula"])
      for (const mode of ["standard", "iris"] as const)
        POINTS.forEach((point, i) => {
          const drop = mode === "iris" && objective === "fula" ? 0.3 * i : 0.02 * i;
          rows.push(
            row({
              pair,
              front,
              back,
              point,
              pointIndex: i,
              objective,
              mode,
              agreement_prob: 0.97 - drop,
              accuracy: 0.9 - drop / 2,
              excess_agreement: pair === "cross-bias" ? 0.8 - drop : null,
              iri_residual: mode === "iris" ? 0.08 : null,
            }),
          );
        });
  return rows;
}

/** A 3-row grid (x, x', |x - x'|) of two 8x8 RGB images, as a PNG. */
async function previewPng(): Promise<Buffer> {
  const [w, h] = [16, 24];
  const raw = Buffer.alloc(w * h * 3);
  for (let i = 0; i < raw.length; i++) raw[i] = (i * 37) % 256;
  return sharp(raw, { raw: { width: w, height: h, channels: 3 } })
    .png()
    .toBuffer();
}

async function syntheticInput(): Promise<ReportInput> {
  const iri: IriPreview = {
    front: "clean-s1",
    point: "layer2.0",
    residuals: { mean: 0.12, median: 0.1, p90: 0.2, below01: 0.5 },
    previewResiduals: [0.05, 0.19],
    png: await previewPng(),
  };
  return {
    title: "Synthetic <report> & test",
    rows: syntheticRows(),
    models: [
      {
        name: "clean-s1",
        arch: "resnet18",
        dataset: "fashion-mnist",
        shortcut: null,
        adversarial: false,
        seed: 1,
        accuracies: { clean: 0.92 },
      },
      {
        name: "pixel-s1",
        arch: "resnet18",
        dataset: "fashion-mnist",
        shortcut: "pixel",
        adversarial: false,
        seed: 1,
        accuracies: { clean: 0.91, rolled: 0.35 },
      },
    ],
    iris: [iri],
    environment: { node: process.version, threads: 2, cuda: false, "git commit": "<none>" },
    notes: ["Synthetic numbers: <b>not</b> a result."],
  };
}

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "stitchlab-report-"));
  dirs.push(d);
  return d;
}

/** One report, written once and shared by the file checks and the browser check. */
let written: Promise<{ dir: string; figures: string[]; html: string }> | undefined;
function writtenReport() {
  written ??= (async () => {
    const dir = join(tempDir(), "out");
    const r = await writeReport(await syntheticInput(), dir);
    return { dir, figures: r.figures, html: r.html };
  })();
  return written;
}

describe("writeReport", () => {
  test("writes results.csv, report.html and each figure as .vl.json, .svg and .png", async () => {
    const { dir, figures, html } = await writtenReport();
    assert.equal(html, join(dir, "report.html"));
    assert.deepEqual(figures, ["agreement", "accuracy", "excess_agreement"]);
    const csv = readFileSync(join(dir, "results.csv"), "utf8");
    assert.equal(csv.trimEnd().split("\n").length, 1 + 24);
    for (const name of figures) {
      const svg = readFileSync(join(dir, "figures", `${name}.svg`), "utf8");
      assert.ok(svg.startsWith("<svg"), `${name}.svg starts with <svg`);
      assert.ok(svg.trimEnd().endsWith("</svg>"), `${name}.svg ends with </svg>`);
      assert.ok((svg.match(/<path/g) ?? []).length > 10, `${name}.svg has marks`);
      assert.match(svg, /role-mark/, `${name}.svg has mark groups`);
      const png = readFileSync(join(dir, "figures", `${name}.png`));
      assert.ok(png.subarray(0, 8).equals(PNG_SIGNATURE), `${name}.png is a PNG`);
      const meta = await sharp(png).metadata();
      const width = Number(/width="(\d+)"/.exec(svg)![1]);
      assert.equal(meta.width, 2 * width, `${name}.png is drawn at twice the SVG's size`);
      const spec = JSON.parse(readFileSync(join(dir, "figures", `${name}.vl.json`), "utf8"));
      assert.match(spec.$schema, /vega-lite/);
      assert.ok(spec.data.values.length > 0);
    }
    const page = readFileSync(html, "utf8");
    assert.ok(page.includes(escapeHtml("Synthetic <report> & test")) && !page.includes("<report>"));
    assert.ok(page.includes("&lt;b&gt;not&lt;/b&gt;"), "notes are escaped");
    // The IRI grid's rows are labelled beside the picture.
    assert.match(
      page,
      /<div class="rows"[^>]*><span>x<\/span><span>x′ \(IRI\)<\/span><span>\|x − x′\|, amplified<\/span><\/div><img/,
    );
    assert.ok(!/(src|href)="(https?:)?\/\//.test(page), "nothing loaded from the network");
  });

  test("a report with no runs has no figures and still writes its page", async () => {
    const dir = tempDir();
    const r = await writeReport({ ...(await syntheticInput()), rows: [], iris: [] }, dir);
    assert.deepEqual(r.figures, []);
    assert.ok(existsSync(r.html));
    assert.equal(readFileSync(r.csv, "utf8"), `${ALL_COLUMNS.join(",")}\n`);
  });

  test("one replicate summary, made by the caller, serves summary.csv, the summary table and the figures' bands", async () => {
    const input = await syntheticInput();
    const summary = summarize(input.rows);
    // One interval marked, so that where each part took its numbers from shows.
    const marked = {
      ...summary[0].scores.agreement_prob,
      mean: 0.123456,
      halfWidth: 0.012345,
      lo: 0.111111,
      hi: 0.135801,
    };
    summary[0] = { ...summary[0], scores: { ...summary[0].scores, agreement_prob: marked } };
    const dir = tempDir();
    await writeReport({ ...input, summary }, dir);
    assert.match(readFileSync(join(dir, "summary.csv"), "utf8"), /,0\.123456,/);
    assert.match(readFileSync(join(dir, "report.html"), "utf8"), /0\.123 ± 0\.012/);
    const spec = JSON.parse(readFileSync(join(dir, "figures", "agreement.vl.json"), "utf8"));
    const banded = spec.data.values.filter((v: { lo?: number; hi?: number }) => v.lo === 0.111111 && v.hi === 0.135801);
    assert.ok(banded.length > 0, "the band drawn is the summary's");
  });

  test("a figure's bands over the rows where its score is finite equal the summary of all rows", () => {
    // Two replicates; in one, a row's excess agreement is not known (null) or not finite.
    const rows = [0, 1].flatMap((replicate) =>
      [0, 1].map((seed) =>
        row({
          pair: "cross-bias",
          replicate,
          seed,
          agreement_prob: 0.5 + 0.1 * replicate + 0.01 * seed,
          excess_agreement: replicate === 1 && seed === 1 ? null : 0.2 + 0.1 * replicate + 0.01 * seed,
        }),
      ),
    );
    const bandsOf = (figures: ReturnType<typeof reportFigures>) =>
      figures.map((f) => JSON.stringify((f.spec as { data: { values: unknown[] } }).data.values));
    const used = rows.filter((r) => r.excess_agreement !== null);
    const excess = reportFigures(rows).find((f) => f.name === "excess_agreement");
    const alone = reportFigures(used, summarize(used)).find((f) => f.name === "excess_agreement");
    assert.ok(excess && alone);
    assert.deepEqual(bandsOf([excess]), bandsOf([alone]));
    assert.match(bandsOf([excess])[0], /"lo":/, "with a band");
  });

  test("a figure without data is left out; a bad mode is named", async () => {
    const dir = tempDir();
    const r = await writeReport({ ...(await syntheticInput()), rows: syntheticRows().slice(0, 12) }, dir);
    assert.deepEqual(r.figures, ["agreement", "accuracy"], "no excess agreement in the cross-seed rows");
    await assert.rejects(
      writeReport({ ...(await syntheticInput()), rows: [row({ mode: "IRIs" as "iris" })] }, tempDir()),
      /mode must be "standard" or "iris", got "IRIs"/,
    );
  });
});

const CHROMIUM = findChromium();

/** Headless Chromium for the report's layout checks (puppeteer-core drives the system's browser). */
async function launchChromium() {
  const { launch } = await import("puppeteer-core");
  return launch({
    executablePath: CHROMIUM as string,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
}
/**
 * The skip option for the browser test (helpers/requirements.ts); in CI (where setup.sh installs
 * chromium) a missing one is an error.
 */
const skipUnlessChromium = (): string | false => skipUnless("chromium");

test("report.html renders in headless Chromium: charts drawn, IRI grid loaded, no errors", {
  skip: skipUnlessChromium(),
  timeout: 60_000,
}, async () => {
  const { html, figures } = await writtenReport();
  const browser = await launchChromium();
  try {
    const page = await browser.newPage();
    const errors: string[] = [];
    const requests: string[] = [];
    page.on("console", (m) => {
      if (m.type() === "error") errors.push(`console: ${m.text()}`);
    });
    page.on("pageerror", (e) => errors.push(`page: ${e instanceof Error ? e.message : String(e)}`));
    page.on("requestfailed", (r) => errors.push(`request failed: ${r.url()}`));
    page.on("request", (r) => requests.push(r.url()));
    await page.setViewport({ width: 1280, height: 900 });
    await page.goto(pathToFileURL(html).href, { waitUntil: "load" });

    const charts = await page.$$eval("figure.chart > svg", (svgs) =>
      svgs.map((s) => {
        const r = s.getBoundingClientRect();
        return { width: r.width, height: r.height, marks: s.querySelectorAll("path").length };
      }),
    );
    assert.equal(charts.length, figures.length, "one inline SVG per figure");
    for (const c of charts) assert.ok(c.width > 100 && c.height > 100 && c.marks > 10, JSON.stringify(c));

    const images = await page.$$eval(".iris img", (imgs) =>
      (imgs as HTMLImageElement[]).map((i) => ({ complete: i.complete, naturalWidth: i.naturalWidth })),
    );
    assert.deepEqual(images, [{ complete: true, naturalWidth: 16 }]);
    // Each previewed image's residual under its column, as wide as the picture; a loose one in red.
    const perImage = await page.$$eval(".iris .per-image span", (spans) =>
      spans.map((s) => ({ text: s.textContent, loose: s.classList.contains("loose"), x: s.getBoundingClientRect().x })),
    );
    assert.deepEqual(
      perImage.map((p) => [p.text, p.loose]),
      [
        ["0.050", false],
        ["0.190", true],
      ],
    );
    const [imgBox, rowBox] = await page.$$eval([".iris img", ".iris .per-image"].join(","), (els) =>
      els.map((e) => {
        const r = e.getBoundingClientRect();
        return { x: r.x, width: r.width };
      }),
    );
    assert.ok(
      Math.abs(imgBox.x - rowBox.x) < 1 && Math.abs(imgBox.width - rowBox.width) < 1,
      `residuals aligned with the picture: ${JSON.stringify([imgBox, rowBox])}`,
    );

    assert.deepEqual(errors, []);
    const outside = requests.filter((u) => !u.startsWith("file:") && !u.startsWith("data:"));
    assert.deepEqual(outside, [], "the page loads nothing from outside itself");
    const tables = await page.$$eval("table", (t) => t.length);
    assert.equal(tables, 5, "summary over replicates, every run (compact, and all columns), base models, environment");
    // Every figure has a legend (vega's legend group), so a colour or a dash is never a guess.
    const legends = await page.$$eval("figure.chart > svg", (svgs) =>
      svgs.map((s) => s.querySelectorAll(".role-legend").length),
    );
    assert.ok(legends.length > 0 && legends.every((n) => n > 0), `legends per figure: ${legends}`);
    // The table of runs fits the page; its other columns are there on demand, closed at first.
    const fit = await page.$eval(".compact table", (t) => ({
      table: t.getBoundingClientRect().width,
      page: document.documentElement.clientWidth,
    }));
    assert.ok(fit.table <= fit.page, `the compact table is ${fit.table} px wide on a ${fit.page} px page`);
    const closed = await page.$eval("details.all-columns", (d) => ({
      open: (d as HTMLDetailsElement).open,
      visible: (d.querySelector("table") as HTMLElement).checkVisibility(),
    }));
    assert.deepEqual(closed, { open: false, visible: false }, "all columns are hidden until asked for");
    await page.click("details.all-columns > summary");
    const opened = await page.$eval("details.all-columns table", (t) => (t as HTMLElement).checkVisibility());
    assert.ok(opened, "a click shows every column");
  } finally {
    await browser.close();
  }
});

test("the report is written without loading libtorch (the ground floor: io/files.ts)", (t) => {
  if (!existsSync("/proc/self/maps")) return t.skip("no /proc/self/maps here to see what a process loaded");
  const d = mkdtempSync(join(tmpdir(), "stitchlab-floor-"));
  t.after(() => rmSync(d, { recursive: true, force: true }));
  const script = join(d, "probe.mts");
  writeFileSync(
    script,
    [
      'import { readFileSync } from "node:fs";',
      `await import(${JSON.stringify(pathToFileURL(join(import.meta.dirname, "..", "report", "index.ts")).href)});`,
      'const maps = readFileSync("/proc/self/maps", "utf8");',
      'console.log(JSON.stringify({ addon: maps.includes("stitchlab.node"), libtorch: /libtorch/.test(maps) }));',
    ].join("\n"),
  );
  const r = runTs(script, []);
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), { addon: false, libtorch: false });
});

test("objectives keep one colour-blind-safe colour each in every figure (Okabe and Ito's: SLM orange, FuLA reddish purple)", () => {
  const rows = ["hlm", "slm", "dm", "fula"].flatMap((objective) =>
    ["layer1.0", "layer2.1"].map((point, i) => row({ objective, point, pointIndex: i + 1 })),
  );
  const spec = JSON.stringify(reportFigures(rows)[0]?.spec);
  assert.ok(spec.includes('"range":["#0072B2","#E69F00","#009E73","#CC79A7"]'), spec.slice(0, 400));
});

test("the agreement and accuracy figures end as the reference's curves do: B alone before the first point, A alone after the last", () => {
  const rows = [
    row({ point: "layer1.0", pointIndex: 1, front_alone_agreement_prob: 0.7, front_alone_accuracy: 0.85 }),
    row({
      point: "layer4.1",
      pointIndex: 4,
      front_alone_agreement_prob: 0.8,
      front_alone_accuracy: 0.87,
      replicate: 1,
    }),
    row({
      pair: "other",
      point: "layer1.0",
      pointIndex: 1,
      front_alone_agreement_prob: null,
      front_alone_accuracy: null,
    }),
  ];
  const figures = reportFigures(rows);
  type Datum = { panel: string; point: string; pointIndex: number; end?: boolean } & Record<string, number | string>;
  const endsOf = (name: string, field: string) => {
    const spec = figures.find((f) => f.name === name)?.spec as unknown as { data: { values: Datum[] } } | undefined;
    if (!spec) return [];
    return spec.data.values.filter((v) => v.end).map((v) => [v.panel.split(":")[0], v.point, v.pointIndex, v[field]]);
  };
  // End: B agrees with itself (1) and has its own accuracy; Front: the mean over the panel's rows.
  const near = (a: unknown[][], b: unknown[][]) =>
    a.length === b.length &&
    a.every((r, i) =>
      r.every((v, j) => (typeof v === "number" ? Math.abs(v - (b[i][j] as number)) < 1e-9 : v === b[i][j])),
    );
  const agreement = endsOf("agreement", "agreement_prob");
  assert.ok(
    near(agreement, [
      ["cross-seed", "End: B alone", 0, 1],
      ["cross-seed", "Front: A alone", 5, 0.75],
      ["other", "End: B alone", 0, 1],
    ]),
    JSON.stringify(agreement),
  );
  const accuracy = endsOf("accuracy", "accuracy");
  assert.ok(
    near(accuracy, [
      ["cross-seed", "End: B alone", 0, 0.92],
      ["cross-seed", "Front: A alone", 5, 0.86],
      ["other", "End: B alone", 0, 0.92],
    ]),
    JSON.stringify(accuracy),
  );
  const spec = JSON.stringify(figures.find((f) => f.name === "agreement")?.spec);
  assert.match(spec, /"shape":"cross"/, "the ends are drawn as crosses");
  assert.match(spec, /"filter":"datum.end !== true"/, "the curves leave the ends out");
  assert.equal(endsOf("excess_agreement", "excess_agreement").length, 0);
});

// Issue 37, section 6: the report as a reader sees it at 1400 px.

/** A small PNG preview grid whose column count is `columns` (8x8 images, three rows). */
async function gridPng(columns: number): Promise<Buffer> {
  const [w, h] = [8 * columns, 24];
  const raw = Buffer.alloc(w * h * 3, 128);
  return sharp(raw, { raw: { width: w, height: h, channels: 3 } })
    .png()
    .toBuffer();
}

/** IRI previews as a run with replicates makes them: each front (and replicate) at two points. */
async function manyPreviews(): Promise<IriPreview[]> {
  const png = await gridPng(3);
  return ["clean-s1", "clean-s1 (replicate 1)", "pixel-s1"].flatMap((front) =>
    ["layer2.1", "layer4.1"].map((point) => ({
      front,
      point,
      residuals: { mean: 0.08, median: 0.07, p90: 0.15, below01: 0.7 },
      // At the threshold itself: not red; just above it: red.
      previewResiduals: [0.05, GOOD_IRI_RESIDUAL, GOOD_IRI_RESIDUAL + 0.001],
      png,
    })),
  );
}

/** The page's section with this id. */
function sectionOf(page: string, id: string): string {
  const start = page.indexOf(`<section id="${id}">`);
  assert.ok(start >= 0, `the page has a section #${id}`);
  return page.slice(start, page.indexOf("</section>", start));
}

test("IRIs: each grid's title above its grid, one fold per front (the first open), and a legend for the red residuals", async () => {
  const input = { ...(await syntheticInput()), iris: await manyPreviews() };
  const iris = sectionOf(reportHtml(input, [], summarize(input.rows)), "iris");
  const folds = [...iris.matchAll(/<details( open)?><summary>(.*?)<\/summary>/g)];
  assert.deepEqual(
    folds.map((m) => [Boolean(m[1]), /<strong>(.*?)<\/strong>/.exec(m[2])?.[1]]),
    [
      [true, "clean-s1"],
      [false, "clean-s1 (replicate 1)"],
      [false, "pixel-s1"],
    ],
  );
  const figures = [...iris.matchAll(/<figure>([\s\S]*?)<\/figure>/g)].map((m) => m[1]);
  assert.equal(figures.length, 6);
  for (const f of figures) {
    assert.ok(f.startsWith("<figcaption>"), `the title comes first: ${f.slice(0, 80)}`);
    assert.ok(f.indexOf("</figcaption>") < f.indexOf("<img"), "the title precedes its grid");
  }
  assert.match(figures[1], /^<figcaption><strong>clean-s1<\/strong> at <strong>layer4\.1<\/strong>/);
  // The legend names what the numbers are and the threshold that makes them red; red is that threshold.
  assert.match(
    iris,
    new RegExp(
      `each image's own relative residual ‖A\\(x′\\) − A\\(x\\)‖ / ‖A\\(x\\)‖, in the column of its picture; <span class="loose">red</span> when above ${GOOD_IRI_RESIDUAL} `,
    ),
  );
  assert.match(figures[0], /<span>0\.050<\/span><span>0\.100<\/span><span class="loose">0\.101<\/span>/);
  // No per-image residuals (sets made before they were recorded): no legend for them.
  const old = input.iris.map(({ previewResiduals: _, ...p }) => p);
  assert.ok(!sectionOf(reportHtml({ ...input, iris: old }, [], summarize(input.rows)), "iris").includes("iri-legend"));
});

test("figure legends say 'invariance-aware' where the data (and files) keep the mode's name 'iris'", async () => {
  const figures = reportFigures(syntheticRows());
  const agreement = figures.find((f) => f.name === "agreement")!;
  const values = (agreement.spec as unknown as { data: { values: { mode?: string }[] } }).data.values;
  assert.ok(
    values.some((v) => v.mode === "iris"),
    "the data keep 'iris'",
  );
  const svg = await renderSvg(agreement.spec);
  const texts = [...svg.matchAll(/<text[^>]*>([^<]*)<\/text>/g)].map((m) => m[1]);
  assert.ok(texts.includes("invariance-aware"), `legend texts: ${texts.join(" | ")}`);
  assert.ok(texts.includes("standard"));
  assert.ok(!texts.includes("iris"), "no legend entry says 'iris'");
});

test("the summary table leaves out columns with no value in any row, and sits in its own scrolling box", async () => {
  const input = await syntheticInput();
  const headersOf = (page: string) =>
    [...sectionOf(page, "summary").matchAll(/<th>(.*?)<\/th>/g)].map((m) => m[1].replace("&gt;", ">"));
  const clean = input.rows.filter((r) => r.pair === "cross-seed");
  const plain = reportHtml({ ...input, rows: clean }, [], summarize(clean));
  assert.ok(!headersOf(plain).includes("excess agr.") && !headersOf(plain).includes("warnings"));
  assert.match(sectionOf(plain, "summary"), /Left out, with no value in any row: excess agr\., warnings \(none\)\./);
  assert.match(sectionOf(plain, "summary"), /<div class="summary"><div class="scroll"><table>/);
  const key = rowKey(summarize(input.rows)[0]);
  const warned = reportHtml(
    { ...input, warnings: [{ text: "a warning", tag: "loose IRIs", rows: [key] }] },
    [],
    summarize(input.rows),
  );
  assert.deepEqual(headersOf(warned).slice(-2), ["excess agr.", "warnings"]);
});

test("the reading says 'Replicates: n' once: in the settings when given, else on its own", () => {
  const dir = tempDir();
  const yaml = `
name: reps
dataset: { name: fashion-mnist, limit: 300, testLimit: 100 }
models:
  clean-s0: { arch: resnet18, width: 0.0625, seed: 0, epochs: 1 }
  clean-s1: { arch: resnet18, width: 0.0625, seed: 1, epochs: 1 }
pairs:
  - { front: clean-s1, back: clean-s0, relation: cross-seed }
points: [layer1.0]
objectives: [slm]
modes: [standard, iris]
replicates: 2
iris: { limit: 64, steps: 3, batchSize: 32 }
stitch: { limit: 64, epochs: 1, batchSize: 32 }
`;
  const plan = planExperiment(parseExperiment(yaml, "reps.yaml"), join(dir, "reps.yaml"));
  const rows = [0, 1].flatMap((replicate) =>
    (["standard", "iris"] as const).map((mode) => row({ replicate, mode, agreement_prob: 0.9 - 0.1 * replicate })),
  );
  const count = (lines: string[]) => lines.join("\n").match(/Replicates: 2\b/g)?.length ?? 0;
  const withSettings = reading(rows, { settings: settingsLines(plan) });
  assert.equal(count(withSettings), 1, withSettings.join("\n"));
  assert.ok(withSettings.some((l) => l.startsWith("Values are means ± the half-width")));
  assert.equal(count(reading(rows)), 1, "without the settings, the reading says it itself");
});

test("at 1400 px: the page never scrolls sideways, a wide summary table scrolls in its box with its first column kept, IRI titles above their grids, folds closed but the first", {
  skip: skipUnlessChromium(),
  timeout: 60_000,
}, async () => {
  const input = { ...(await syntheticInput()), iris: await manyPreviews() };
  const summary = summarize(input.rows);
  // Long warning tags on every row: a summary table wider than any page.
  const tags = [
    "loose IRIs",
    "T trained for fewer than 100 steps",
    "back model near chance",
    "front model near chance",
  ];
  const warnings = tags.map((tag) => ({ text: tag, tag, rows: summary.map(rowKey) }));
  const dir = tempDir();
  const narrowFile = join(dir, "fits.html");
  const wideFile = join(dir, "wide.html");
  writeFileSync(narrowFile, reportHtml(input, [], summary));
  writeFileSync(wideFile, reportHtml({ ...input, warnings }, [], summary));
  const browser = await launchChromium();
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1400, height: 900 });
    for (const [file, wide] of [
      [narrowFile, false],
      [wideFile, true],
    ] as const) {
      await page.goto(pathToFileURL(file).href, { waitUntil: "load" });
      const m = await page.$eval("#summary .scroll", (box) => {
        // No helper functions in here: tsx would wrap them in a __name the page does not have.
        const table = box.querySelector("table")!;
        return {
          pageScroll: document.documentElement.scrollWidth,
          page: document.documentElement.clientWidth,
          overflowX: getComputedStyle(box).overflowX,
          boxRight: box.getBoundingClientRect().right,
          client: box.clientWidth,
          scroll: box.scrollWidth,
          table: table.getBoundingClientRect().width,
        };
      });
      assert.ok(m.pageScroll <= m.page, `the page is ${m.pageScroll} px wide at ${m.page} px: ${JSON.stringify(m)}`);
      assert.ok(m.boxRight <= m.page, "the table's box ends inside the page");
      assert.equal(m.overflowX, "auto", "what does not fit scrolls inside its box");
      if (!wide) assert.ok(m.table <= m.client, `the table fits its box: ${JSON.stringify(m)}`);
      else {
        assert.ok(m.scroll > m.client, `the wide table scrolls: ${JSON.stringify(m)}`);
        // Scrolled to its end: the last column in view, the first still at the box's left edge.
        const end = await page.$eval("#summary .scroll", (box) => {
          box.scrollLeft = box.scrollWidth;
          const row = box.querySelector("tbody tr")!;
          const cells = row.querySelectorAll("td");
          const b = box.getBoundingClientRect();
          return {
            box: { left: b.left, right: b.right },
            first: { left: cells[0].getBoundingClientRect().left, text: cells[0].textContent },
            last: { right: cells[cells.length - 1].getBoundingClientRect().right },
          };
        });
        assert.ok(Math.abs(end.first.left - end.box.left) < 1, `the first column stays: ${JSON.stringify(end)}`);
        assert.ok(end.last.right <= end.box.right + 1, `the last column comes into view: ${JSON.stringify(end)}`);
      }
    }
    // Each grid's title sits above its own grid, below the grid before it.
    const boxes = await page.$$eval("#iris details[open] figure", (figs) =>
      figs.map((f) => {
        const cap = f.querySelector("figcaption")!.getBoundingClientRect();
        const img = f.querySelector("img")!.getBoundingClientRect();
        return { capBottom: cap.bottom, imgTop: img.top };
      }),
    );
    assert.equal(boxes.length, 2);
    for (const b of boxes) assert.ok(b.capBottom <= b.imgTop, `title above its grid: ${JSON.stringify(b)}`);
    const shown = await page.$$eval("#iris details", (ds) =>
      ds.map((d) => [(d as HTMLDetailsElement).open, (d.querySelector("img") as HTMLElement).checkVisibility()]),
    );
    assert.deepEqual(shown, [
      [true, true],
      [false, false],
      [false, false],
    ]);
  } finally {
    await browser.close();
  }
});

test("report/csv.ts reads back what it writes: fields with commas, quotes and line breaks, an empty field, CRLF lines", async () => {
  const { csvField, csvRecords, parseCsv } = await import("../report/csv.js");
  const values = [["a,b", 'say "x"', "two\nlines", "", "3.5"]];
  const text = `${["c1", "c2", "c3", "c4", "c5"].join(",")}\n${values.map((r) => r.map(csvField).join(",")).join("\n")}\n`;
  assert.deepEqual(parseCsv(text), [["c1", "c2", "c3", "c4", "c5"], ...values]);
  assert.deepEqual(parseCsv("x,y\r\n1,2\r\n"), [
    ["x", "y"],
    ["1", "2"],
  ]);
  assert.deepEqual(
    parseCsv("x,y\n1,2"),
    [
      ["x", "y"],
      ["1", "2"],
    ],
    "a last line without its newline",
  );
  const file = join(mkdtempSync(join(tmpdir(), "stitchlab-csv-")), "r.csv");
  writeFileSync(file, text);
  assert.deepEqual(csvRecords(file), [{ c1: "a,b", c2: 'say "x"', c3: "two\nlines", c4: "", c5: "3.5" }]);
});
