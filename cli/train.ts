// `stitchlab train`: trains a base model (clean, with a pixel shortcut, or adversarially).
// The flags are the training layer's settings (train/config.ts) under their CLI names: they parse
// through its schema and resolve through resolveTrainConfig, as an experiment file's model entry does.
import type { Command } from "commander";
import { SHORTCUT_KINDS } from "../data/index.js";
import { PGD_DEFAULTS, ROBUST_EVAL_ATTACKS, ROBUST_EVAL_DEFAULTS } from "../eval/config.js";
import { ensureWritableDir, refuseNonEmptyDir } from "../io/files.js";
import type { Device } from "../torch/index.js";
import {
  resolveTrainConfig,
  simclrSchema,
  TRAIN_METHODS,
  type TrainConfig,
  trainSettingsSchema,
} from "../train/config.js";
import { checkTrainingMemory } from "../train/memory.js";
import { trainModel } from "../train/trainer.js";
import { computeOptions, requireDevice } from "./device.js";
import { printDone, score } from "./output.js";
import {
  checkedFlags,
  dataFlags,
  fraction,
  IMAGE_SIZE_HELP,
  int,
  MARKER_SCALE_HELP,
  num,
  optional,
  over255,
  ROBUST_EVAL_SETTINGS_HELP,
  ROBUST_EVAL_STEP_HELP,
} from "./parse.js";
import { progressSink } from "./progress.js";

/** The PGD flags, which mean something only with --adversarial. */
const PGD_FLAGS = {
  eps: "--eps",
  pgdStep: "--pgd-step",
  pgdSteps: "--pgd-steps",
  advFraction: "--adv-fraction",
} as const;

/** The robust-evaluation flags (any of them asks for a robust evaluation's settings). */
const ROBUST_FLAGS = ["robustEvalSettings", "robustEvalAttack", "robustEvalSteps", "robustEvalStepSize"];

/**
 * `train`'s parsed flags to the resolved config: through the same schema and resolver as an
 * experiment file's model entry (tested: the same settings give the same task key).
 */
export function trainConfigFromFlags(o: Record<string, unknown>): TrainConfig {
  const given = (k: string) => o[k] !== undefined;
  if (!o.adversarial) {
    const stray = Object.entries(PGD_FLAGS).filter(([k]) => given(k));
    if (stray.length || o.randomStart)
      throw new Error(
        `${[...stray.map(([, f]) => f), ...(o.randomStart ? ["--random-start"] : [])].join(", ")} ${stray.length + (o.randomStart ? 1 : 0) > 1 ? "are" : "is"} for adversarial training: add --adversarial`,
      );
  }
  if (o.method !== "simclr" && (given("simclrEpochs") || given("temperature")))
    throw new Error("--simclr-epochs and --temperature are for --method simclr");
  const settings = checkedFlags(
    trainSettingsSchema,
    {
      arch: o.model,
      seed: o.seed,
      epochs: o.epochs,
      batchSize: o.batchSize,
      ...optional("lr", o.lr),
      ...optional("width", o.width),
      ...optional("autocast", o.autocast),
      ...optional("greyStem", o.greyStem),
      shortcut: o.shortcut ?? null,
      adversarial: o.adversarial
        ? {
            ...optional("eps", o.eps),
            ...optional("step", o.pgdStep),
            ...optional("steps", o.pgdSteps),
            ...optional("fraction", o.advFraction),
            randomStart: Boolean(o.randomStart),
          }
        : null,
      ...(ROBUST_FLAGS.some(given)
        ? {
            robustEval: {
              ...optional("settings", o.robustEvalSettings),
              ...optional("attack", o.robustEvalAttack),
              ...optional("steps", o.robustEvalSteps),
              ...optional("stepSize", o.robustEvalStepSize),
            },
          }
        : {}),
      ...optional("method", o.method),
      ...(o.method === "simclr"
        ? { simclr: { ...optional("epochs", o.simclrEpochs), ...optional("temperature", o.temperature) } }
        : {}),
    },
    {
      arch: "--model",
      "adversarial.step": "--pgd-step",
      "adversarial.steps": "--pgd-steps",
      "adversarial.fraction": "--adv-fraction",
      "robustEval.settings": "--robust-eval-settings",
      "robustEval.attack": "--robust-eval-attack",
      "robustEval.steps": "--robust-eval-steps",
      "robustEval.stepSize": "--robust-eval-step-size",
      "simclr.epochs": "--simclr-epochs",
    },
  );
  return resolveTrainConfig(
    settings,
    {
      dataset: o.dataset as string,
      ...dataFlags(o),
      limit: (o.limit as number | undefined) ?? null,
      testLimit: (o.testLimit as number | undefined) ?? null,
    },
    (o.device as Device | undefined) ?? "cpu",
  );
}

export function registerTrainCommand(program: Command): void {
  // The defaults --help shows are the schema's own.
  const defaults = trainSettingsSchema.parse({ arch: "resnet18" });
  const cmd = program
    .command("train")
    .description(
      "train a base model (defaults from docs/method.md: SGD Nesterov, lr 0.1 (0.01 for VGG and ViTs) x0.1 at 1/3 and 2/3, wd 1e-4, crop+flip)",
    )
    .requiredOption("--model <name>", "zoo model (see `stitchlab layers`)")
    .requiredOption("--dataset <name>", "fashion-mnist, mnist, cifar10 or imagefolder")
    .requiredOption("--out <dir>", "run folder: model.safetensors + model.json, config.json, metrics.jsonl")
    .option("--force", "train into --out even when it holds files (they are overwritten)")
    .option("--json", "print the result as one JSON line (the default when the output is not a terminal)")
    .option("--root <path>", "dataset location (Fashion-MNIST defaults to Debian's)")
    .option("--image-size <px>", IMAGE_SIZE_HELP, int)
    .option("--marker-scale <k>", MARKER_SCALE_HELP, int)
    .option("--limit <n>", "train on the first n images only", int)
    .option("--test-limit <n>", "evaluate on the first n test images only", int)
    .option("--shortcut <kind>", `pixel shortcut in the training images: ${SHORTCUT_KINDS.join(", ")}`)
    .option("--adversarial", "Madry adversarial training (PGD, L-inf)")
    .option("--eps <e>", `PGD radius in pixel units (default: ${over255(PGD_DEFAULTS.eps)})`, fraction)
    .option("--pgd-step <s>", `PGD step in pixel units (default: ${over255(PGD_DEFAULTS.step)})`, fraction)
    .option("--pgd-steps <n>", `PGD iterations in training (default ${PGD_DEFAULTS.steps})`, int)
    .option("--adv-fraction <f>", `share of each batch made adversarial (default ${PGD_DEFAULTS.fraction})`, num)
    .option(
      "--random-start",
      "start each training attack from a random point in the ball (default: from the image, as the reference)",
    )
    .option(
      "--robust-eval-attack <name>",
      `robust evaluation: ${ROBUST_EVAL_ATTACKS.join(" or ")} (default ${ROBUST_EVAL_DEFAULTS.attack}: APGD-CE and APGD-DLR, worst case per image)`,
    )
    .option(
      "--robust-eval-steps <n>",
      `iterations of each robust-evaluation attack (default ${ROBUST_EVAL_DEFAULTS.steps} for adversarial models; the reference's settings: 20; clean models: 0, none, unless settings are named)`,
      int,
    )
    .option("--robust-eval-settings <name>", ROBUST_EVAL_SETTINGS_HELP)
    .option("--robust-eval-step-size <s>", ROBUST_EVAL_STEP_HELP, fraction)
    .option("--seed <n>", `seed of initialisation, order and augmentation (default ${defaults.seed})`, int)
    .option("--epochs <n>", `epochs (default ${defaults.epochs})`, int)
    .option("--batch-size <n>", `batch size (default ${defaults.batchSize})`, int)
    .option("--lr <lr>", "learning rate (default: the architecture's, 0.1 for ResNets, 0.01 for VGG and ViTs)", num)
    .option("--width <w>", "width multiplier (CNNs)", num)
    .option(
      "--grey-stem",
      "start the stem's kernels equal across colour channels: no untrained colour response (default on grey datasets, Fashion-MNIST and MNIST; docs/method.md)",
    )
    .option("--no-grey-stem", "keep PyTorch's initialisation of the stem on a grey dataset")
    .option(
      "--method <m>",
      `${TRAIN_METHODS.join(" or ")} (default ${defaults.method}); simclr: SimCLR pre-training (two augmented views, NT-Xent), then the classifier alone on the frozen backbone for --epochs`,
    )
    .option("--simclr-epochs <n>", "SimCLR pre-training epochs (default: --epochs, as the reference)", int)
    .option("--temperature <t>", `SimCLR's NT-Xent temperature (default ${simclrSchema.parse({}).temperature})`, num);
  computeOptions(cmd, "cpu").action(async (o) => {
    requireDevice(o.device);
    const cfg = trainConfigFromFlags(o);
    // A model too large for this machine is refused before it is built (issue 25).
    checkTrainingMemory(cfg, `--model ${cfg.model}`, "--width or --batch-size");
    // A finished model is never overwritten by accident.
    refuseNonEmptyDir(o.out, "--out", Boolean(o.force), "a model trained before");
    // Before the data are read: a read-only --out said only `ENOENT ... mkdir` (issue 36).
    ensureWritableDir(o.out, "--out");
    const sink = progressSink("train", (f) =>
      f.phase === "simclr"
        ? `simclr epoch ${f.epoch}/${f.epochs} loss ${f.loss} ${f.imagesPerSecond} img/s`
        : `epoch ${f.epoch}/${f.epochs} loss ${f.loss} acc ${f.accuracy} ${f.imagesPerSecond} img/s`,
    );
    const result = await trainModel(cfg, o.out, (p) =>
      sink.update((p.epoch - 1) * p.steps + p.step, p.epochs * p.steps, {
        epoch: p.epoch,
        epochs: p.epochs,
        loss: Number(p.loss.toFixed(4)),
        accuracy: Number(p.accuracy.toFixed(4)),
        imagesPerSecond: Math.round(p.imagesPerSecond),
        etaSeconds: Math.round(p.etaSeconds),
        lr: p.lr,
        ...(p.phase ? { phase: p.phase } : {}),
      }),
    );
    sink.stop();
    printDone(o, { ...result }, [
      `trained ${cfg.model}${cfg.simclr ? " (SimCLR, then its classifier)" : ""} on ${cfg.dataset} in ${Math.round(result.seconds)} s`,
      ...Object.entries(result.accuracies).map(([k, v]) => `  ${`${k} accuracy`.padEnd(22)} ${score(v)}`),
      `wrote ${result.checkpoint} and its sidecar (--json for the JSON line)`,
    ]);
  });
}
