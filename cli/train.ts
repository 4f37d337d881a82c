// `stitchlab train`: trains a base model (clean, with a pixel shortcut, or adversarially).
import { existsSync, readdirSync } from "node:fs";
import type { Command } from "commander";
import { SHORTCUT_KINDS } from "../data/index.js";
import { AUTOCAST_MODES } from "../torch/index.js";
import { ROBUST_EVAL_ATTACKS } from "../train/evaluate.js";
import {
  adversarialSchema,
  defaultLr,
  simclrSchema,
  TRAIN_DEFAULTS,
  TRAIN_METHODS,
  type TrainConfig,
  trainModel,
  trainSettingsSchema,
} from "../train/trainer.js";
import { computeOptions, requireDevice } from "./device.js";
import { printDone, score } from "./output.js";
import { checkedFlags, int, num, oneOf, optional, pixelOption } from "./parse.js";
import { progressSink } from "./progress.js";

export function registerTrainCommand(program: Command): void {
  const d = TRAIN_DEFAULTS;
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
    .option("--image-size <px>", "image folders: the side images are resized to (default 32; ImageNet-100: 224)", int)
    .option("--limit <n>", "train on the first n images only", int)
    .option("--test-limit <n>", "evaluate on the first n test images only", int)
    .option("--shortcut <kind>", `pixel shortcut in the training images: ${SHORTCUT_KINDS.join(", ")}`)
    .option("--adversarial", "Madry adversarial training (PGD, L-inf)")
    .addOption(pixelOption("--eps <e>", "PGD radius in pixel units", 8))
    .addOption(pixelOption("--pgd-step <s>", "PGD step in pixel units", 2))
    .option("--pgd-steps <n>", "PGD iterations in training", int, 10)
    .option("--adv-fraction <f>", "share of each batch made adversarial", num, 0.5)
    .option(
      "--random-start",
      "start each training attack from a random point in the ball (default: from the image, as the reference)",
    )
    .option(
      "--robust-eval-attack <name>",
      `robust evaluation: ${ROBUST_EVAL_ATTACKS.join(" or ")} (apgd: APGD-CE and APGD-DLR, worst case per image)`,
      d.robustEvalAttack,
    )
    .option(
      "--robust-eval-steps <n>",
      `iterations of each robust-evaluation attack (default ${d.robustEvalSteps} for adversarial models; clean models: 0, none)`,
      int,
    )
    .option("--seed <n>", "seed of initialisation, order and augmentation", int, d.seed)
    .option("--epochs <n>", "epochs", int, d.epochs)
    .option("--batch-size <n>", "batch size", int, d.batchSize)
    .option("--lr <lr>", "learning rate (default: 0.1; 0.01 for VGG and ViTs)", num)
    .option("--width <w>", "width multiplier (CNNs)", num)
    .option(
      "--method <m>",
      "supervised, or simclr: SimCLR pre-training (two augmented views, NT-Xent), then the classifier alone on the frozen backbone for --epochs",
      "supervised",
    )
    .option("--simclr-epochs <n>", "SimCLR pre-training epochs (default: --epochs, as the reference)", int)
    .option("--temperature <t>", "SimCLR's NT-Xent temperature", num, 0.5);
  computeOptions(cmd, d.device).action(async (o) => {
    requireDevice(o.device);
    // Checked by the training layer's schemas, as an experiment file's model entry is.
    const settings = checkedFlags(trainSettingsSchema, {
      epochs: o.epochs,
      lr: o.lr ?? defaultLr(o.model),
      batchSize: o.batchSize,
      seed: o.seed,
      ...optional("width", o.width),
    });
    const adversarial = o.adversarial
      ? checkedFlags(
          adversarialSchema,
          {
            eps: o.eps,
            step: o.pgdStep,
            steps: o.pgdSteps,
            fraction: o.advFraction,
            randomStart: Boolean(o.randomStart),
          },
          { step: "--pgd-step", steps: "--pgd-steps", fraction: "--adv-fraction" },
        )
      : null;
    const method = oneOf("--method", TRAIN_METHODS, o.method);
    const simclr =
      method === "simclr"
        ? checkedFlags(
            simclrSchema,
            { epochs: o.simclrEpochs ?? settings.epochs, temperature: o.temperature },
            { epochs: "--simclr-epochs" },
          )
        : null;
    const cfg: TrainConfig = {
      ...d,
      model: o.model,
      dataset: o.dataset,
      root: o.root,
      ...(o.imageSize !== undefined ? { imageSize: o.imageSize } : {}),
      limit: o.limit,
      testLimit: o.testLimit,
      modelOptions: settings.width !== undefined ? { width: settings.width } : {},
      shortcut: oneOf("--shortcut", SHORTCUT_KINDS, o.shortcut) ?? null,
      adversarial,
      robustEvalSteps: o.robustEvalSteps ?? (o.adversarial ? d.robustEvalSteps : 0),
      robustEvalAttack: oneOf("--robust-eval-attack", ROBUST_EVAL_ATTACKS, o.robustEvalAttack) ?? d.robustEvalAttack,
      seed: settings.seed,
      epochs: settings.epochs,
      batchSize: settings.batchSize,
      lr: settings.lr,
      device: o.device,
      ...optional("autocast", oneOf("--autocast", AUTOCAST_MODES, o.autocast)),
      ...(simclr ? { simclr: { epochs: simclr.epochs ?? settings.epochs, temperature: simclr.temperature } } : {}),
    };
    // A finished model is never overwritten by accident.
    if (!o.force && existsSync(o.out) && readdirSync(o.out).length > 0)
      throw new Error(
        `--out ${o.out} is not empty (a model trained before?): give a new folder, or --force to overwrite it`,
      );
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
