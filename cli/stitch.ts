// `stitchlab stitch`: train a stitching layer between two checkpoints and score it (stitch/jobs.ts).
// The flags are the stitching layer's settings (stitch/config.ts) under their CLI names: they parse
// through its schema and resolve through resolveStitchConfig, as an experiment file's stitch: does.
import type { Command } from "commander";
import { SHORTCUT_KINDS } from "../data/index.js";
import { datasetSchema } from "../experiments/spec.js";
import { ensureWritableDir, refuseNonEmptyDir } from "../io/files.js";
import { checkpointDataset } from "../models/checkpoint.js";
import {
  BN_MODES,
  parseObjective,
  resolveStitchConfig,
  STITCH_MODES,
  type StitchConfig,
  type StitchMode,
  stitchModeOf,
  stitchModeWords,
  stitchSettingsSchema,
} from "../stitch/config.js";
import { runStitch } from "../stitch/jobs.js";
import { DEFAULT_DEVICE, type Device } from "../torch/index.js";
import { deviceOption, requireDevice } from "./device.js";
import { printDone, score } from "./output.js";
import { dataFromFlags, dataTable, oneOf } from "./parse.js";
import { progressSink } from "./progress.js";
import { addSchemaFlags, type FlagTable, PGD_FLAG_NAMES, settingsFromFlags } from "./schema-flags.js";
import { addBothModelOptions, addModelSourceOptions, bothModels, modelSourceFrom } from "./source.js";

/**
 * Where `stitch`'s flags differ from the stitching schema's keys (the rest are the keys in kebab
 * case): the adversarial recipe's flags keep their PGD names, --bn-mode sets the batch norm of the
 * command's one --mode, and --eps is a shorthand for both radii.
 *
 * --bn-mode is one flag, not one per mode as the file's bnMode ({ standard, iris }), by decision:
 * a stitch command runs one mode, so a setting for the other would never be read; an experiment
 * file holds both because an experiment runs both modes. The flag fills the entry of --mode.
 */
export const STITCH_FLAGS: FlagTable = {
  keys: {
    ...PGD_FLAG_NAMES,
    bnMode: {
      choices: BN_MODES,
      note: "--bn-mode sets --mode's",
      to: (v, o) => ({ [stitchModeOf(String(o.mode))]: v }),
    },
  },
  sections: {
    adversarial: { switch: "--adversarial", what: "adversarial stitching" },
    robustEval: { switch: "--robust-eval", what: "the robust evaluation" },
  },
  shorthands: [
    {
      flag: "--eps <x>",
      sets: ["adversarial.eps", "robustEval.eps"],
      help: "shorthand for --pgd-eps and --robust-eval-eps: one L-inf radius in pixel units, of the training attacks (with --adversarial) and of the robust evaluation (with --robust-eval)",
      unused: "--eps is the radius of --adversarial stitching and of --robust-eval: add one of them",
    },
  ],
};

/** `stitch`'s data flags: the dataset section's, but its --limit (the stitching schema's own). */
const STITCH_DATA = dataTable(["root", "imageSize", "markerScale", "testLimit"], { note: "default: the back model's" });

/**
 * `stitch`'s parsed flags to the resolved config: through the same schema and resolver as an
 * experiment file's stitch: section (tested: the same settings give the same task key). The
 * dataset defaults to the one the back checkpoint was trained on.
 */
export function stitchConfigFromFlags(given: Record<string, unknown>): StitchConfig {
  // --arch, --options and --normalization give both models' (cli/source.ts bothModels).
  const o = bothModels(given);
  // Named by its flag, and before any model file is read.
  try {
    parseObjective(o.objective as string);
  } catch (e) {
    throw new Error(`--objective: ${(e as Error).message}`);
  }
  const mode = oneOf("--mode", STITCH_MODES, stitchModeOf(o.mode as string)) as StitchMode;
  const settings = settingsFromFlags(o, stitchSettingsSchema, STITCH_FLAGS);
  const front = modelSourceFrom(o, "front", o.front as string);
  const back = modelSourceFrom(o, "back", o.back as string);
  const dataset = (o.dataset as string | undefined) ?? checkpointDataset(back);
  if (!dataset) throw new Error("the back checkpoint does not say which dataset it was trained on; pass --dataset");
  const { limit: _limit, ...data } = dataFromFlags(o, STITCH_DATA);
  return resolveStitchConfig(
    {
      front,
      back,
      frontPoint: o.point as string,
      ...(o.backPoint !== undefined ? { backPoint: o.backPoint as string } : {}),
      objective: o.objective as string,
      mode,
      iris: (o.iris as string | undefined) ?? null,
    },
    settings,
    {
      dataset,
      ...data,
      shortcut: oneOf("--shortcut", SHORTCUT_KINDS, o.shortcut as string | undefined) ?? null,
      excess: oneOf("--excess", SHORTCUT_KINDS, o.excess as string | undefined) ?? null,
    },
    (o.device as Device | undefined) ?? DEFAULT_DEVICE,
  );
}

export function registerStitchCommand(program: Command): void {
  const cmd = program
    .command("stitch")
    .description(
      "train the stitching layer T between front and back at a point (docs/method.md's recipe; each flag's help " +
        "gives its default) and score the stitched model on the clean test set",
    )
    .requiredOption(
      "--front <file>",
      "front model A: a stitchlab checkpoint, weights made elsewhere with --front-arch, or a model by hub (hf-hub:ORG/NAME, torchvision:ARCH; docs/models-and-data.md)",
    )
    .requiredOption(
      "--back <file>",
      "back model B: a stitchlab checkpoint, weights made elsewhere with --back-arch, or a model by hub (hf-hub:ORG/NAME, torchvision:ARCH; docs/models-and-data.md)",
    )
    .requiredOption("--point <name>", "stitch point of A (and of B unless --back-point)")
    .requiredOption(
      "--objective <o>",
      "hlm (hard-label matching: cross-entropy with the labels), slm (soft-label matching: with B's softmax), " +
        "dm (direct matching: B's features at the point), fula (functional latent alignment: B's features at the " +
        "point and every later one), or a weighted sum such as hlm:1,fula:0.5",
    )
    .requiredOption(
      "--mode <m>",
      "standard (T trained on real images) or invariance-aware (also written iris: T trained on an IRI set, " +
        "identically represented inputs of the front model)",
    )
    .requiredOption("--out <dir>", "run folder: scores.json and layer.safetensors")
    .option("--force", "stitch into --out even when it holds files (they are overwritten)")
    .option(
      "--iris <dir>",
      "IRI set (identically represented inputs) of the front model at the point, made by stitchlab iris (invariance-aware mode)",
    )
    .option("--back-point <name>", "stitch point of B (cross-depth stitching)")
    .option(
      "--shortcut <kind>",
      `mark the real training and init images and the test set (the IRI set must come from the same marked images): ${SHORTCUT_KINDS.join(", ")}`,
    )
    .option(
      "--excess <kind>",
      `also score on marked and rolled test sets (excess agreement): ${SHORTCUT_KINDS.join(", ")}`,
    )
    .option("--json", "print the result as one JSON line (the default when the output is not a terminal)");
  deviceOption(cmd);
  // The data flags and T's settings: from their schemas (cli/schema-flags.ts).
  addSchemaFlags(cmd, datasetSchema, STITCH_DATA);
  addSchemaFlags(cmd, stitchSettingsSchema, STITCH_FLAGS);
  addBothModelOptions(cmd);
  addModelSourceOptions(cmd, "front");
  addModelSourceOptions(cmd, "back");
  cmd.action(async (o) => {
    requireDevice(o.device);
    const cfg = stitchConfigFromFlags(o);
    // A finished stitch (scores.json, layer.safetensors) is never overwritten by accident.
    refuseNonEmptyDir(o.out, "--out", Boolean(o.force), "a stitch made before");
    const sink = progressSink("stitch", (f) => `epoch ${f.epoch}/${f.epochs} loss ${f.loss}`);
    // Before any training: a trained T that cannot be written is lost work.
    ensureWritableDir(o.out, "--out");
    const r = await runStitch(cfg, o.out, (p) =>
      sink.update((p.epoch - 1) * p.steps + p.step, p.epochs * p.steps, {
        epoch: p.epoch,
        epochs: p.epochs,
        loss: Number(p.loss.toFixed(4)),
      }),
    );
    sink.stop();
    const s = r.scores;
    const result = {
      out: o.out,
      accuracy: s.accuracy,
      backAccuracy: s.backAccuracy,
      agreementProbability: s.agreementProbability,
      hardAgreement: s.hardAgreement,
      softErrorConsistency: s.softErrorConsistency,
      cka: r.cka,
      excessAgreement: r.excess?.excessAgreement ?? null,
      robustAccuracy: r.robust?.scores.accuracy ?? null,
      robustAgreementProbability: r.robust?.scores.agreementProbability ?? null,
      bnMode: r.config.bnMode,
      testData: r.testData,
      seconds: Number(r.training.seconds.toFixed(1)),
    };
    printDone(o, result, [
      `stitched ${o.point}${r.config.backPoint !== o.point ? ` -> ${r.config.backPoint}` : ""}, ${o.objective}, ${stitchModeWords(r.config.mode)} (batch norm ${r.config.bnMode}; test data ${r.testData})`,
      `  agreement probability  ${score(s.agreementProbability)}   (1 = the stitched model answers as B)`,
      `  hard agreement         ${score(s.hardAgreement)}`,
      `  soft error consistency ${score(s.softErrorConsistency)}`,
      `  accuracy               ${score(s.accuracy)}   (B alone: ${score(s.backAccuracy)})`,
      ...(r.cka !== null ? [`  linear CKA             ${score(r.cka)}`] : []),
      ...(r.excess ? [`  excess agreement       ${score(r.excess.excessAgreement)}`] : []),
      ...(r.robust
        ? [
            `  robust accuracy        ${score(r.robust.scores.accuracy)}   (agreement ${score(r.robust.scores.agreementProbability)})`,
          ]
        : []),
      `wrote ${o.out}/scores.json and layer.safetensors in ${r.training.seconds.toFixed(0)} s (--json for the JSON line)`,
    ]);
  });
}
