// `stitchlab stitch`: train a stitching layer between two checkpoints and score it (stitch/jobs.ts).
import type { Command } from "commander";
import { SHORTCUT_KINDS } from "../data/index.js";
import {
  runStitch,
  STITCH_CONFIG_DEFAULTS,
  STITCH_MODES,
  type StitchConfig,
  stitchModeOf,
  stitchRobustEvalSchema,
  stitchSettingsSchema,
} from "../stitch/jobs.js";
import { BN_MODES } from "../stitch/train.js";
import { ensureWritableDir } from "../torch/files.js";
import { adversarialSchema } from "../train/trainer.js";
import { deviceArg, requireDevice } from "./device.js";
import { printDone, score } from "./output.js";
import { checkedFlags, int, num, oneOf, optional, pixelOption } from "./parse.js";
import { progressSink } from "./progress.js";
import { addModelSourceOptions, modelSourceFrom } from "./source.js";

export function registerStitchCommand(program: Command): void {
  const d = STITCH_CONFIG_DEFAULTS;
  const cmd = program
    .command("stitch")
    .description(
      "train the stitching layer T between front and back at a point (docs/method.md defaults: least-squares start, " +
        "Adam 1e-3, wd 1e-4, 30 epochs, lr x0.1 at 1/3 and 2/3) and score the stitched model on the clean test set",
    )
    .requiredOption(
      "--front <file>",
      "front model A: a stitchlab checkpoint, or weights made elsewhere with --front-arch",
    )
    .requiredOption("--back <file>", "back model B: a stitchlab checkpoint, or weights made elsewhere with --back-arch")
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
    .option("--image-size <px>", "image folders: the side images are resized to (default 32; ImageNet-100: 224)", int)
    .option("--epochs <n>", "epochs (default 30; 12 for image folders)", int)
    .option("--batch-size <n>", "batch size", int, d.batchSize)
    .option("--lr <lr>", "Adam learning rate", num, d.lr)
    .option("--weight-decay <wd>", "Adam weight decay", num, d.weightDecay)
    .option("--init <how>", "lstsq, random or identity", d.init)
    .option("--init-images <k>", "real images for the least-squares start", int, d.initImages)
    .option(
      "--bn-mode <m>",
      `frozen networks' batch norm while T trains: ${BN_MODES.join(", ")} (default: adapt standard, eval iris)`,
    )
    .option("--cka-images <n>", "test images for linear CKA at the point (0: skip)", int, d.ckaImages)
    .option("--seed <n>", "seed of the batch order", int, d.seed)
    .option("--device <d>", "cpu, cuda or cuda:N", deviceArg, d.device)
    .option("--adversarial", "adversarial stitching (standard mode): T trained on PGD examples of the stitched model")
    .addOption(
      pixelOption("--eps <e>", "L-inf radius in pixel units, of training attacks and the robust evaluation", 8),
    )
    .addOption(pixelOption("--pgd-step <s>", "PGD step in pixel units (training)", 2))
    .option("--pgd-steps <n>", "PGD iterations (training)", int, 10)
    .option("--adv-fraction <f>", "share of each batch made adversarial (the reference's attack_ratio)", num, 1)
    .option("--robust-eval", "also score on adversarial test images made against the stitched model")
    .option("--robust-eval-attack <name>", "apgd (APGD-CE and APGD-DLR, averaged) or pgd", "apgd")
    .option("--robust-eval-steps <n>", "iterations of each robust-evaluation attack", int, 100)
    .option("--json", "print the result as one JSON line (the default when the output is not a terminal)");
  addModelSourceOptions(cmd, "front");
  addModelSourceOptions(cmd, "back");
  cmd.action(async (o) => {
    requireDevice(o.device);
    const sink = progressSink("stitch", (f) => `epoch ${f.epoch}/${f.epochs} loss ${f.loss}`);
    const cfg: StitchConfig = {
      ...d,
      front: modelSourceFrom(o, "front", o.front),
      back: modelSourceFrom(o, "back", o.back),
      frontPoint: o.point,
      backPoint: o.backPoint,
      objective: o.objective,
      mode: oneOf("--mode", STITCH_MODES, stitchModeOf(o.mode as string)) as (typeof STITCH_MODES)[number],
      iris: o.iris,
      dataset: o.dataset,
      root: o.root,
      imageSize: o.imageSize,
      limit: o.limit ?? null,
      testLimit: o.testLimit ?? null,
      shortcut: oneOf("--shortcut", SHORTCUT_KINDS, o.shortcut) ?? null,
      excess: oneOf("--excess", SHORTCUT_KINDS, o.excess) ?? null,
      // Checked by the stitching layer's schema, as an experiment file's stitch: section is.
      ...checkedFlags(stitchSettingsSchema, {
        ...optional("epochs", o.epochs),
        batchSize: o.batchSize,
        lr: o.lr,
        weightDecay: o.weightDecay,
        init: o.init,
        initImages: o.initImages,
        ckaImages: o.ckaImages,
        seed: o.seed,
      }),
      bnMode: oneOf("--bn-mode", BN_MODES, o.bnMode),
      // Checked by the schemas an experiment file's stitch: section uses.
      ...(o.adversarial
        ? {
            adversarial: checkedFlags(
              adversarialSchema,
              { eps: o.eps, step: o.pgdStep, steps: o.pgdSteps, fraction: o.advFraction },
              { step: "--pgd-step", steps: "--pgd-steps", fraction: "--adv-fraction" },
            ),
          }
        : {}),
      ...(o.robustEval
        ? {
            robustEval: checkedFlags(
              stitchRobustEvalSchema,
              { attack: o.robustEvalAttack, eps: o.eps, steps: o.robustEvalSteps },
              { attack: "--robust-eval-attack", steps: "--robust-eval-steps" },
            ),
          }
        : {}),
      device: o.device,
    };
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
