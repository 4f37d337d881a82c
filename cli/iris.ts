// `stitchlab iris`: an IRI set (identically represented inputs) for a front model at a stitch
// point (stitch/iriset.ts).
import type { Command } from "commander";
import { SHORTCUT_KINDS } from "../data/index.js";
import { COMPARE_DEFAULTS } from "../experiments/compare.js";
import { datasetSchema } from "../experiments/spec.js";
import { IRI_VERDICT_MAX_RESIDUAL } from "../findings/reading.js";
import { checkpointDataset } from "../models/checkpoint.js";
import { type IrisConfig, irisSettingsSchema, resolveIrisConfig } from "../stitch/config.js";
import { IRI_DEFAULTS } from "../stitch/iri-options.js";
import { runIris } from "../stitch/jobs.js";
import { GOOD_IRI_RESIDUAL } from "../stitch/residuals.js";
import { DEFAULT_DEVICE, type Device } from "../torch/index.js";
import { deviceOption, requireDevice } from "./device.js";
import { printDone, score } from "./output.js";
import { dataFromFlags, dataTable, oneOf } from "./parse.js";
import { progressSink } from "./progress.js";
import { addSchemaFlags, type FlagTable, flagsFor, settingsFromFlags } from "./schema-flags.js";
import { addModelSourceOptions, modelSourceFrom } from "./source.js";

/**
 * `iris`'s flags are the IRI settings' keys as they are; the schema is partial (a file may give any
 * of them), so their defaults are the IRI layer's (IRI_DEFAULTS).
 */
export const IRIS_FLAGS: FlagTable = { defaults: IRI_DEFAULTS };

/** `iris`'s data flags: the dataset section's, but its --limit (the IRI settings' own). */
const IRIS_DATA = dataTable(["root", "imageSize", "markerScale"], {
  note: "default: the dataset the front model was trained on",
});

/** compare's IRI recipe (experiments/compare.ts) in iris's flags, for --help: the same IRIs from either command. */
export function compareRecipeFlags(): string {
  const { limit: _limit, ...recipe } = COMPARE_DEFAULTS.iris;
  return flagsFor(recipe, irisSettingsSchema, IRIS_FLAGS);
}

/**
 * `iris`'s parsed flags to the resolved config: through the same schema and resolver as an
 * experiment file's iris: section. The dataset defaults to the one the front was trained on.
 */
export function irisConfigFromFlags(o: Record<string, unknown>): IrisConfig {
  const settings = settingsFromFlags(o, irisSettingsSchema, IRIS_FLAGS);
  const front = modelSourceFrom(o, "front", o.front as string);
  const dataset = (o.dataset as string | undefined) ?? checkpointDataset(front);
  if (!dataset) throw new Error("the front checkpoint does not say which dataset it was trained on; pass --dataset");
  const { root, imageSize, markerScale } = dataFromFlags(o, IRIS_DATA);
  return resolveIrisConfig(
    { front, point: o.point as string },
    settings,
    {
      dataset,
      root,
      imageSize,
      markerScale,
      shortcut: oneOf("--shortcut", SHORTCUT_KINDS, o.shortcut as string | undefined) ?? null,
    },
    (o.device as Device | undefined) ?? DEFAULT_DEVICE,
  );
}

export function registerIrisCommand(program: Command): void {
  const cmd = program
    .command("iris")
    .description(
      "identically represented inputs: for each training image x, an x' the front model represents as x at the point. " +
        "The defaults are the protocol's signed steps from noise (docs/method.md; each flag's help gives its default). " +
        `compare makes its IRIs by a tight recipe instead, Adam from noise; the same from iris: ${compareRecipeFlags()}. ` +
        "Resumes an interrupted run in the same --out.",
    )
    .requiredOption(
      "--front <file>",
      "front model: a stitchlab checkpoint, weights made elsewhere with --front-arch, or a model by hub (hf-hub:ORG/NAME, torchvision:ARCH; docs/models-and-data.md)",
    )
    .requiredOption("--point <name>", "stitch point (see `stitchlab layers MODEL`)")
    .requiredOption("--out <dir>", "IRI set folder: iris.safetensors, iris.json, preview.png")
    .option("--shortcut <kind>", `mark the source images with a shortcut: ${SHORTCUT_KINDS.join(", ")}`)
    .option("--json", "print the result as one JSON line (the default when the output is not a terminal)");
  // The data flags and the IRI settings: from their schemas (cli/schema-flags.ts).
  addSchemaFlags(cmd, datasetSchema, IRIS_DATA);
  addSchemaFlags(cmd, irisSettingsSchema, IRIS_FLAGS);
  addModelSourceOptions(cmd, "front");
  deviceOption(cmd).action(async (o) => {
    requireDevice(o.device);
    const cfg = irisConfigFromFlags(o);
    const sink = progressSink(
      "iris",
      (f) =>
        `batch ${f.batch}/${f.batches} step ${f.step}/${f.steps}` +
        (f.residual !== undefined ? ` residual ${f.residual}` : "") +
        (f.meanResidual !== undefined ? ` mean ${f.meanResidual}` : ""),
    );
    // After the first batch, a run that will take more than 10 minutes says so, once, with the
    // way to a smaller one (60,000 Fashion-MNIST images take hours on a CPU).
    const started = Date.now();
    let told = false;
    const foretell = (done: number, total: number, images: number) => {
      if (told || done < 1) return;
      const seconds = ((Date.now() - started) / 1000 / done) * total;
      told = true;
      // STITCHLAB_IRIS_FORETELL_S moves the 10 minutes (a test sets it to 0).
      if (seconds > Number(process.env.STITCHLAB_IRIS_FORETELL_S ?? 600))
        console.error(
          `iris: ${images} images will take about ${Math.round(seconds / 60)} minutes${o.limit === undefined ? "; --limit N makes IRIs of the first N images only" : ""}`,
        );
    };
    const info = await runIris(cfg, o.out, (p) => {
      if (p.batch === 2 && p.step === 1 && !p.resumed) foretell(1, p.batches, p.images * p.batches);
      sink.update((p.batch - 1) * p.steps + p.step, p.batches * p.steps, {
        batch: p.batch,
        batches: p.batches,
        step: p.step,
        steps: p.steps,
        images: p.images,
        resumed: p.resumed,
        // Values not known (no mean before the first batch, no current iterate at the end) are
        // left out rather than NaN (null in JSON).
        ...(Number.isFinite(p.residual) ? { residual: Number(p.residual.toFixed(4)) } : {}),
        ...(Number.isFinite(p.meanResidual) ? { meanResidual: Number(p.meanResidual.toFixed(4)) } : {}),
      });
    });
    sink.stop();
    const res = info.residuals;
    printDone(o, { out: o.out, count: info.count, residuals: res, descent: info.descent, seconds: info.seconds }, [
      `${info.count} IRIs of the front model at ${o.point}, in ${Math.round(info.seconds)} s`,
      `  relative residual ||A(x') - A(x)|| / ||A(x)||: mean ${score(res.mean)}, median ${score(res.median)}, 90th percentile ${score(res.p90)}`,
      `  ${(100 * res.below01).toFixed(0)}% at most ${GOOD_IRI_RESIDUAL} (a good IRI)${res.mean > IRI_VERDICT_MAX_RESIDUAL ? `; a mean above ${IRI_VERDICT_MAX_RESIDUAL} is too loose to judge invariance-aware agreement (docs/method.md)` : ""}`,
      ...(info.descent && info.options.target !== undefined
        ? [
            `  descent: ${info.descent.meanSteps.toFixed(0)} steps per image on average, ${info.descent.maxSteps} at most; ${info.descent.capped} image${info.descent.capped === 1 ? "" : "s"} still above the target ${info.options.target} at the cap`,
          ]
        : []),
      `wrote ${o.out}/iris.safetensors, iris.json and preview.png (--json for the JSON line)`,
    ]);
  });
}
