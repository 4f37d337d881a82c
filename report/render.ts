// Draws a vega-lite spec without a browser: vega-lite compiles it to vega, vega renders it to
// SVG headlessly (renderer "none": no canvas needed), sharp rasterises the SVG (librsvg) to PNG.
// Warnings from vega-lite and vega are collected, not printed: a science module never prints.
import sharp from "sharp";
import * as vega from "vega";
import * as vl from "vega-lite";

export interface Rendered {
  svg: string;
  png: Buffer;
  /** What vega-lite and vega warned about while compiling and rendering (normally nothing). */
  warnings: string[];
}

function collectingLogger(warnings: string[]): vega.LoggerInterface {
  return vega.logger(vega.Warn, undefined, (_method, level, args) => {
    warnings.push(`${level} ${args.map(String).join(" ")}`);
  });
}

/** The SVG text of a vega-lite spec; warnings are appended to `warnings`. */
export async function renderSvg(spec: vl.TopLevelSpec, warnings: string[] = []): Promise<string> {
  const logger = collectingLogger(warnings);
  const view = new vega.View(vega.parse(vl.compile(spec, { logger }).spec), { renderer: "none", logger });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

/** The SVG and a PNG at `scale` times its size (2 by default, for sharp text on high-density screens). */
export async function renderFigure(spec: vl.TopLevelSpec, scale = 2): Promise<Rendered> {
  const warnings: string[] = [];
  const svg = await renderSvg(spec, warnings);
  const png = await sharp(Buffer.from(svg), { density: 72 * scale })
    .png()
    .toBuffer();
  return { svg, png, warnings };
}
