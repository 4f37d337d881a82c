// `stitchlab train`: trains a base model (clean, with a pixel shortcut, or adversarially).
// The flags are the training layer's settings (train/config.ts) under their CLI names: they parse
// through its schema and resolve through resolveTrainConfig, as an experiment file's model entry does.
import type { Command } from "commander";
import { datasetSchema } from "../experiments/spec.js";
import { ensureWritableDir, refuseNonEmptyDir } from "../io/files.js";
import { modelOptionsIssue } from "../models/options.js";
import { DEFAULT_DEVICE, type Device } from "../torch/index.js";
import { resolveTrainConfig, type TrainConfig, trainSettingsSchema } from "../train/config.js";
import { checkTrainingMemory } from "../train/memory.js";
import { trainModel } from "../train/trainer.js";
import { deviceOption, requireDevice } from "./device.js";
import { printDone, score } from "./output.js";
import { dataFromFlags, dataTable } from "./parse.js";
import { progressSink } from "./progress.js";
import { addSchemaFlags, type FlagTable, PGD_FLAG_NAMES, schemaFlags, settingsFromFlags } from "./schema-flags.js";

/**
 * Where `train`'s flags differ from the training schema's keys (the rest are the keys in kebab
 * case): the architecture is --model; the PGD recipe keeps stitch's names (--pgd-eps, --pgd-step,
 * ...), with --eps the shorthand for the command's radius, as stitch's; SimCLR's temperature is
 * --temperature.
 */
export const TRAIN_FLAGS: FlagTable = {
  keys: {
    arch: { flag: "--model", required: true },
    ...PGD_FLAG_NAMES,
    "simclr.temperature": { flag: "--temperature" },
  },
  sections: {
    adversarial: { switch: "--adversarial", what: "adversarial training" },
    robustEval: { what: "the robust evaluation" },
    simclr: { what: "SimCLR pre-training" },
  },
  shorthands: [
    {
      flag: "--eps <x>",
      sets: ["adversarial.eps"],
      help: "shorthand for --pgd-eps: the L-inf radius in pixel units of the training attacks, and so of the robust evaluation (as stitch's --eps)",
      unused: "--eps is the radius of --adversarial training: add --adversarial",
    },
  ],
};

/** `train`'s data flags: the dataset section's, --dataset required (a model's data are its own). */
const TRAIN_DATA = dataTable(["root", "imageSize", "markerScale", "limit", "testLimit"], { required: true });

/**
 * `train`'s parsed flags to the resolved config: through the same schema and resolver as an
 * experiment file's model entry (tested: the same settings give the same task key).
 */
export function trainConfigFromFlags(o: Record<string, unknown>): TrainConfig {
  if (o.method !== "simclr") {
    const simclr = schemaFlags(trainSettingsSchema, TRAIN_FLAGS).filter(
      (f) => f.path[0] === "simclr" && o[f.attribute] !== undefined,
    );
    if (simclr.length) throw new Error(`${simclr.map((f) => f.flag).join(" and ")} are for --method simclr`);
  }
  const settings = settingsFromFlags(o, trainSettingsSchema, TRAIN_FLAGS);
  // As an experiment file's model entry is checked (experiments/spec.ts): an option the architecture does not take.
  const issue = settings.options ? modelOptionsIssue(settings.arch, settings.options) : null;
  if (issue) throw new Error(`--options: ${issue.key}: ${issue.message}`);
  return resolveTrainConfig(
    settings,
    { dataset: o.dataset as string, ...dataFromFlags(o, TRAIN_DATA) },
    (o.device as Device | undefined) ?? DEFAULT_DEVICE,
  );
}

export function registerTrainCommand(program: Command): void {
  const cmd = program
    .command("train")
    .description(
      "train a base model (docs/method.md's recipe: SGD Nesterov, lr x0.1 at 1/3 and 2/3 of the epochs, crop+flip; each flag's help gives its default)",
    )
    .requiredOption("--out <dir>", "run folder: model.safetensors + model.json, config.json, metrics.jsonl")
    .option("--force", "train into --out even when it holds files (they are overwritten)")
    .option("--json", "print the result as one JSON line (the default when the output is not a terminal)");
  // The data flags and the training settings: from their schemas (cli/schema-flags.ts).
  addSchemaFlags(cmd, datasetSchema, TRAIN_DATA);
  addSchemaFlags(cmd, trainSettingsSchema, TRAIN_FLAGS);
  deviceOption(cmd).action(async (o) => {
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
