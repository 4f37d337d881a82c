// `stitchlab stitch`: train a stitching layer between two checkpoints and score it (stitch/jobs.ts).
// The flags are the stitching layer's settings (stitch/config.ts) under their CLI names: they parse
// through its schema and resolve through resolveStitchConfig, as an experiment file's stitch: does.
import type { Command } from "commander";
import { SHORTCUT_KINDS } from "../data/index.js";
import { PGD_DEFAULTS, ROBUST_EVAL_ATTACKS, ROBUST_EVAL_DEFAULTS } from "../eval/config.js";
import { ensureWritableDir, refuseNonEmptyDir } from "../io/files.js";
import { checkpointDataset } from "../models/checkpoint.js";
import {
  BN_MODES,
  resolveStitchConfig,
  STITCH_ADVERSARIAL_DEFAULTS,
  STITCH_MODES,
  type StitchConfig,
  type StitchMode,
  stitchModeOf,
  stitchSettingsSchema,
} from "../stitch/config.js";
import { runStitch } from "../stitch/jobs.js";
import { parseObjective } from "../stitch/objectives.js";
import type { Device } from "../torch/index.js";
import { deviceArg, requireDevice } from "./device.js";
import { printDone, score } from "./output.js";
import {
  checkedFlags,
  dataFlags,
  fraction,
  IMAGE_SIZE_HELP,
  int,
  MARKER_SCALE_HELP,
  num,
  oneOf,
  optional,
  over255,
  ROBUST_EVAL_SETTINGS_HELP,
  ROBUST_EVAL_STEP_HELP,
} from "./parse.js";
import { progressSink } from "./progress.js";
import { addModelSourceOptions, modelSourceFrom } from "./source.js";

/** Flags that mean something only with --adversarial, and only with --robust-eval. */
const PGD_FLAGS = { pgdStep: "--pgd-step", pgdSteps: "--pgd-steps", advFraction: "--adv-fraction" } as const;
const ROBUST_FLAGS = {
  robustEvalSettings: "--robust-eval-settings",
  robustEvalAttack: "--robust-eval-attack",
  robustEvalSteps: "--robust-eval-steps",
  robustEvalStepSize: "--robust-eval-step-size",
} as const;

/** Throws when flags of a feature are given without the flag that turns it on. */
function needs(o: Record<string, unknown>, on: string, flags: Record<string, string>, what: string): void {
  const stray = Object.entries(flags).filter(([k]) => o[k] !== undefined);
  if (!o[on] && stray.length) throw new Error(`${stray.map(([, f]) => f).join(", ")}: ${what}`);
}

/**
 * `stitch`'s parsed flags to the resolved config: through the same schema and resolver as an
 * experiment file's stitch: section (tested: the same settings give the same task key). The
 * dataset defaults to the one the back checkpoint was trained on.
 */
export function stitchConfigFromFlags(o: Record<string, unknown>): StitchConfig {
  needs(o, "adversarial", PGD_FLAGS, "these are for adversarial stitching: add --adversarial");
  needs(o, "robustEval", ROBUST_FLAGS, "these are for the robust evaluation: add --robust-eval");
  if (o.eps !== undefined && !o.adversarial && !o.robustEval)
    throw new Error("--eps is the radius of --adversarial stitching and of --robust-eval: add one of them");
  // Named by its flag, and before any model file is read.
  try {
    parseObjective(o.objective as string);
  } catch (e) {
    throw new Error(`--objective: ${(e as Error).message}`);
  }
  const mode = oneOf("--mode", STITCH_MODES, stitchModeOf(o.mode as string)) as StitchMode;
  const bnMode = oneOf("--bn-mode", BN_MODES, o.bnMode as string | undefined);
  const settings = checkedFlags(
    stitchSettingsSchema,
    {
      ...optional("epochs", o.epochs),
      ...optional("batchSize", o.batchSize),
      ...optional("lr", o.lr),
      ...optional("weightDecay", o.weightDecay),
      ...optional("init", o.init),
      ...optional("initImages", o.initImages),
      ...optional("ckaImages", o.ckaImages),
      ...optional("seed", o.seed),
      limit: o.limit ?? null,
      ...(bnMode ? { bnMode: { [mode]: bnMode } } : {}),
      ...(o.adversarial
        ? {
            adversarial: {
              ...optional("eps", o.eps),
              ...optional("step", o.pgdStep),
              ...optional("steps", o.pgdSteps),
              ...optional("fraction", o.advFraction),
            },
          }
        : {}),
      ...(o.robustEval
        ? {
            robustEval: {
              ...optional("settings", o.robustEvalSettings),
              ...optional("attack", o.robustEvalAttack),
              ...optional("eps", o.eps),
              ...optional("steps", o.robustEvalSteps),
              ...optional("stepSize", o.robustEvalStepSize),
            },
          }
        : {}),
    },
    {
      "adversarial.step": "--pgd-step",
      "adversarial.steps": "--pgd-steps",
      "adversarial.fraction": "--adv-fraction",
      "robustEval.settings": "--robust-eval-settings",
      "robustEval.attack": "--robust-eval-attack",
      "robustEval.steps": "--robust-eval-steps",
      "robustEval.stepSize": "--robust-eval-step-size",
    },
  );
  const front = modelSourceFrom(o, "front", o.front as string);
  const back = modelSourceFrom(o, "back", o.back as string);
  const dataset = (o.dataset as string | undefined) ?? checkpointDataset(back);
  if (!dataset) throw new Error("the back checkpoint does not say which dataset it was trained on; pass --dataset");
  return resolveStitchConfig(
    {
      front,
      back,
      frontPoint: o.point as string,
      ...optional("backPoint", o.backPoint as string | undefined),
      objective: o.objective as string,
      mode,
      iris: (o.iris as string | undefined) ?? null,
    },
    settings,
    {
      dataset,
      ...dataFlags(o),
      shortcut: oneOf("--shortcut", SHORTCUT_KINDS, o.shortcut as string | undefined) ?? null,
      testLimit: (o.testLimit as number | undefined) ?? null,
      excess: oneOf("--excess", SHORTCUT_KINDS, o.excess as string | undefined) ?? null,
    },
    (o.device as Device | undefined) ?? "cpu",
  );
}

export function registerStitchCommand(program: Command): void {
  // The defaults --help shows are the schema's own.
  const d = stitchSettingsSchema.parse({});
  const cmd = program
    .command("stitch")
    .description(
      "train the stitching layer T between front and back at a point (docs/method.md defaults: least-squares start, " +
        "Adam 1e-3, wd 1e-4, 30 epochs, lr x0.1 at 1/3 and 2/3) and score the stitched model on the clean test set",
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
    .option("--dataset <name>", "dataset (default: the back model's)")
    .option("--root <path>", "dataset location")
    .option("--limit <n>", "only the first n training images (standard mode's training set, init pool)", int)
    .option("--test-limit <n>", "only the first n test images", int)
    .option(
      "--shortcut <kind>",
      `mark the real training and init images and the test set (the IRI set must come from the same marked images): ${SHORTCUT_KINDS.join(", ")}`,
    )
    .option(
      "--excess <kind>",
      `also score on marked and rolled test sets (excess agreement): ${SHORTCUT_KINDS.join(", ")}`,
    )
    .option("--image-size <px>", IMAGE_SIZE_HELP, int)
    .option("--marker-scale <k>", MARKER_SCALE_HELP, int)
    .option("--epochs <n>", "epochs (default 30; 12 for image folders)", int)
    .option("--batch-size <n>", `batch size (default ${d.batchSize})`, int)
    .option("--lr <lr>", `Adam learning rate (default ${d.lr})`, num)
    .option("--weight-decay <wd>", `Adam weight decay (default ${d.weightDecay})`, num)
    .option("--init <how>", `lstsq, random or identity (default ${d.init})`)
    .option("--init-images <k>", `real images for the least-squares start (default ${d.initImages})`, int)
    .option(
      "--bn-mode <m>",
      `frozen networks' batch norm while T trains: ${BN_MODES.join(", ")} (default: adapt standard, eval iris)`,
    )
    .option("--cka-images <n>", `test images for linear CKA at the point (0: skip; default ${d.ckaImages})`, int)
    .option("--seed <n>", `seed of the batch order (default ${d.seed})`, int)
    .option("--device <d>", "cpu, cuda or cuda:N", deviceArg, "cpu")
    .option("--adversarial", "adversarial stitching (standard mode): T trained on PGD examples of the stitched model")
    .option(
      "--eps <e>",
      `L-inf radius in pixel units, of training attacks and the robust evaluation (default: ${over255(PGD_DEFAULTS.eps)})`,
      fraction,
    )
    .option("--pgd-step <s>", `PGD step in pixel units (training) (default: ${over255(PGD_DEFAULTS.step)})`, fraction)
    .option("--pgd-steps <n>", `PGD iterations (training; default ${PGD_DEFAULTS.steps})`, int)
    .option(
      "--adv-fraction <f>",
      `share of each batch made adversarial (the reference's attack_ratio; default ${STITCH_ADVERSARIAL_DEFAULTS.fraction})`,
      num,
    )
    .option("--robust-eval", "also score on adversarial test images made against the stitched model")
    .option("--robust-eval-settings <name>", ROBUST_EVAL_SETTINGS_HELP)
    .option(
      "--robust-eval-attack <name>",
      `${ROBUST_EVAL_ATTACKS.join(" or ")} (default ${ROBUST_EVAL_DEFAULTS.attack}: APGD-CE and APGD-DLR)`,
    )
    .option(
      "--robust-eval-steps <n>",
      `iterations of each robust-evaluation attack (default ${ROBUST_EVAL_DEFAULTS.steps}; the reference's settings: 20)`,
      int,
    )
    .option("--robust-eval-step-size <s>", ROBUST_EVAL_STEP_HELP, fraction)
    .option("--json", "print the result as one JSON line (the default when the output is not a terminal)");
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
      `stitched ${o.point}${r.config.backPoint !== o.point ? ` -> ${r.config.backPoint}` : ""}, ${o.objective}, ${r.config.mode === "iris" ? "invariance-aware" : "standard"} (batch norm ${r.config.bnMode}; test data ${r.testData})`,
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
