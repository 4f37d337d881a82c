// `stitchlab compare A B`: the paper's protocol on two models in one command. The study is built
// as an experiment (experiments/compare.ts), written into --out as compare.yaml, and run through
// `stitchlab run`'s own path (runCommand: the planner, the cache, the runner, one progress bar,
// the report); before it starts, what it will run and an estimate of the time from a timed probe
// (experiments/estimate.ts), at the sizes of --protocol (experiments/compare.ts) or those that fit
// --budget (experiments/budget.ts); after it, the verdict, then the report. The flags become the
// study in cli/compare-study.ts.

import { mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { datasetClassCount } from "../data/index.js";
import {
  BUDGET_FLOORS,
  budgetLine,
  budgetRefusal,
  type CompareScale,
  fitBudget,
  longPlanAdvice,
  scaleOf,
} from "../experiments/budget.js";
import {
  COMPARE_DEFAULTS,
  COMPARE_NULLS,
  type CompareProtocolName,
  protocolSizes,
  protocolSummary,
  sameModel,
} from "../experiments/compare.js";
import {
  ALL_TEST_IMAGES,
  type Estimate,
  estimateFrom,
  estimatePlan,
  formatDuration,
  probeFor,
} from "../experiments/estimate.js";
import { nullRelation } from "../experiments/nulls.js";
import { claimOut } from "../experiments/outdir.js";
import { standardRecipe } from "../experiments/plan-words.js";
import { defaultCache } from "../experiments/run.js";
import { checkStandardAdapt, normalizationScores, normalizationWarnings } from "../experiments/sanity.js";
import { experimentSchema } from "../experiments/spec.js";
import { modelSource } from "../experiments/tasks.js";
import { beyondChance } from "../findings/chance.js";
import { compareProtocolLine } from "../findings/protocol-distance.js";
import { CLOSE_RULE, compareControls, compareVerdictLines, compareVerdicts } from "../findings/verdict.js";
import { checkpointDataset } from "../models/checkpoint.js";
import { DEFAULT_DEVICE, requireDevice } from "../torch/index.js";
import { budget, COMPARE_FLAGS, compareStudy, givenSizes, intervalsLine, protocolName } from "./compare-study.js";
import { imageSide, int, renamedFlag } from "./parse.js";
import { planLines } from "./plan-lines.js";
import { addExecutorOptions, executorOptions, runCommand } from "./run.js";
import { addSchemaFlags } from "./schema-flags.js";
import {
  addBothModelOptions,
  addModelSourceOptions,
  bothModels,
  modelSourceFrom,
  requireModelSettings,
} from "./source.js";

export function registerCompareCommand(program: Command): void {
  const d = COMPARE_DEFAULTS;
  // The paper protocol's value of a flag, after the default's: both from experiments/compare.ts.
  const paper = protocolSizes("paper");
  const cmd = program
    .command("compare <a> <b>")
    .description(
      "is A functionally similar to B? Standard and invariance-aware stitching of A into B at the middle and the last of the points they share " +
        `(SLM, ${d.replicates} replicates, intervals over the IRI and stitching seeds and the test images), with B into itself as the control, run as an experiment (cached, resumable); ` +
        "prints the plan and a time estimate, then the verdict and the report, and writes the experiment as compare.yaml",
    )
    .option(
      "--protocol <name>",
      `whose sizes to run at: fast (the default: ${protocolSummary("fast")}) or paper (the paper's sizes: ${protocolSummary("paper")}); both make IRIs tight by construction; flags given override its values`,
      protocolName,
      "fast",
    )
    .option(
      "--budget <time>",
      `fit the run into this time on this machine (e.g. 90s, 30m, 2h): after the probe, the largest settings whose estimate fits, reducing points (to ${BUDGET_FLOORS.points}: the middle and the last), then replicates (to ${BUDGET_FLOORS.replicates}), then IRIs per set and T's images (to ${BUDGET_FLOORS.images}), then test images (to ${BUDGET_FLOORS.test}), never a setting given as a flag; prints what it reduced, or refuses when even the smallest do not fit`,
      budget,
    )
    .option(
      "--out <dir>",
      "experiment folder: the report, results.csv, compare.yaml (the experiment it ran)",
      "runs/compare",
    )
    .option(
      "--json",
      "print the verdict and the scores as one JSON object on stdout (the plan, progress and report go to stderr)",
    )
    .option("--dataset <name>", "the dataset both are scored on (default: B's, from its sidecar)")
    .option("--data <name>", "deprecated: use --dataset")
    .option("--root <path>", "where the dataset's files are")
    .option("--image-size <px>", "the side of the images both were trained on", imageSide)
    .option(
      "--points <list>",
      `stitch points, comma-separated, or all (default: the shared points at the middle and the end of B's, e.g. layer2.1,layer4.1; --protocol paper: ${paper.points})`,
    )
    .option(
      "--objectives <list>",
      `hlm, slm, dm, fula or weighted sums, comma-separated (default ${COMPARE_DEFAULTS.objectives.join(",")})`,
    )
    .option("--seed <s>", "shift the IRI and stitching seeds by s: another draw of the same comparison", int, 0)
    .option("--both-ways", "also stitch B into A (stitching is not symmetric), with A into itself as its control")
    .option(
      "--nulls",
      `also stitch null fronts into B, ${COMPARE_NULLS.replicates} replicates each: A's architecture at its initialisation (a zoo architecture; standard mode), and the labels-only sender, clustered noise at A's point shapes (both modes); and say where A -> B is beyond chance and above the label alone, by a one-sided Welch test over seeds`,
    );
  // The size flags: from the experiment's schema (COMPARE_FLAGS in cli/compare-study.ts).
  addBothModelOptions(addSchemaFlags(cmd, experimentSchema, COMPARE_FLAGS))
    .option("--cache <dir>", "task cache shared by experiments (default $STITCHLAB_CACHE or ~/.cache/stitchlab)")
    .option("--force", "run into an --out that holds another experiment's run (its files are moved aside)")
    .option("--dry-run", "print the plan and the time estimate, and stop");
  addModelSourceOptions(cmd, "front");
  addModelSourceOptions(cmd, "back");
  addExecutorOptions(cmd).action(async (a: string, b: string, raw: Record<string, unknown>) => {
    // --image-size is both models' side here (stitch's is the data's).
    const o = bothModels(raw, ["Arch", "Options", "Normalization", "ImageSize"]);
    o.dataset = renamedFlag(o, "--data", "--dataset");
    // With --json, stdout holds the one JSON object: every line before it goes to stderr.
    if (o.json) console.log = console.error;
    // A budget is fitted by an estimate that assumes one worker (experiments/estimate.ts), so a
    // budgeted run takes one unless --workers says otherwise: two workers cost more on short tasks.
    if (o.budget !== undefined && o.workers === undefined) o.workers = 1;
    const exec = executorOptions(o);
    const front = modelSourceFrom(o, "front", a);
    const back = modelSourceFrom(o, "back", b);
    // What weights made elsewhere do not say, asked for all at once as flags (cli/source.ts).
    requireModelSettings(
      o,
      [
        { role: "front", file: a, name: "A" },
        { role: "back", file: b, name: "B" },
      ],
      { both: true, dataset: { flag: "--dataset", given: o.dataset as string | undefined, from: "back" } },
    );
    const dataset = (o.dataset as string | undefined) ?? checkpointDataset(back);
    if (!dataset)
      throw new Error(
        "B does not say which dataset it was trained on: pass --dataset (e.g. --dataset cifar10 --root ...)",
      );
    const out = resolve(o.out as string);
    const file = join(out, "compare.yaml");
    const protocol = o.protocol as CompareProtocolName;
    // The study from the protocol and the flags; with a scale, at the sizes a budget picked.
    const planned = (scale?: CompareScale) => compareStudy(o, { protocol, front, back, dataset, file }, scale);
    const cache = resolve((o.cache as string | undefined) ?? defaultCache());
    const device = exec.device ?? DEFAULT_DEVICE;
    const slurm = exec.executor === "slurm";
    if (o.budget && slurm)
      throw new Error("--budget needs an estimate on this machine, and Slurm jobs run on other machines");
    if (!slurm && !o.dryRun) requireDevice(device);
    const announce = () =>
      console.log("probing    timing a few IRI and stitching steps and the IRI descent on these models (10-20 s)...");

    let study = planned();
    // B's batch norm under the standard recipe's adapt, before anything is timed or run: a model
    // trained without augmentation fails the control there, so the recipe is changed (and said)
    // now rather than found broken after the run (experiments/sanity.ts adaptCheck).
    const notes: string[] = [];
    if (!slurm) {
      const checked = await checkStandardAdapt(study.plan, cache, device, o.stitchAugment !== undefined);
      if (checked.augment === false) {
        o.stitchAugment = false;
        study = planned();
      }
      notes.push(...checked.lines);
    }
    let est: Estimate | null = null;
    if (o.budget) {
      // One probe, of the protocol's plan (kept: the run after a dry run reads it again); each
      // candidate re-planned and costed from it.
      const { text: asked, seconds } = o.budget as { text: string; seconds: number };
      const kept = await probeFor(study.plan, cache, device, announce);
      if (!kept) console.log(`budget ${asked}: every task is in the cache; nothing reduced`);
      else {
        const cost = (s: CompareScale) => estimateFrom(planned(s).plan, cache, kept.probe, kept.order);
        const start = scaleOf(study.plan);
        const fixed = givenSizes(o);
        const bounds = { trainCount: kept.probe.trainCount, testCount: ALL_TEST_IMAGES, fixed };
        const fit = fitBudget(start, seconds, (s) => cost(s).seconds, bounds);
        if (!fit.fits) throw new Error(budgetRefusal(asked, fit, fixed));
        console.log(budgetLine(asked, start, fit));
        study = planned(fit.scale);
        est = cost(fit.scale);
      }
    }
    const { text, plan } = study;
    // Refused now, before anything is written, when --out holds another experiment's run.
    claimOut(out, plan, Boolean(o.force), false);

    // --nulls on an A stitchlab cannot start (an ONNX graph, an architecture outside the zoo): the noise null alone, said.
    const noUntrained =
      o.nulls && !plan.experiment.pairs.some((p) => p.relation === nullRelation("untrained"))
        ? [
            "  note       --nulls: A is not a zoo architecture stitchlab can start, so it has no untrained null; the noise null stands alone",
          ]
        : [];
    // A and B one model: planned once, as the control (experiments/compare.ts compareExperiment says why), and said.
    const same = sameModel(front, back);
    const oneModel = same
      ? [
          `  note       A and B are ${same}: A -> B is the control, B stitched into itself; it runs once${o.bothWays ? " (--both-ways adds nothing: B -> A is the same stitch)" : ""}`,
        ]
      : [];
    // How far the fast protocol stands from the settled one, where the run is at its sizes (no size
    // flag, no budget): the study's measured distance, or that it is not checked (protocol-distance.ts).
    const fast =
      protocol === "fast" && !o.budget && givenSizes(o).size === 0
        ? [compareProtocolLine({ iris: { ...COMPARE_DEFAULTS.iris }, stitch: { ...COMPARE_DEFAULTS.stitch } })]
        : [];
    console.log(
      planLines("compare", plan, cache, [intervalsLine(plan), ...fast, ...oneModel, ...noUntrained]).join("\n"),
    );
    for (const n of notes) console.log(`  note       ${n}`);
    if (slurm) console.log("estimate: none (Slurm jobs run on other machines)");
    else {
      est ??= await estimatePlan(plan, cache, device, announce);
      const p = est.probe;
      console.log(
        p
          ? `estimate   ${formatDuration(est.seconds)} on this machine (IRI sets ${formatDuration(est.iris.seconds)}, stitches ${formatDuration(est.stitch.seconds)}; from ${p.reused ? "the kept" : `a ${p.seconds.toFixed(1)} s`} timed probe of IRI and stitching steps on these models${(exec.workers ?? 1) > 1 ? `, as if one worker: --workers ${exec.workers} shares the same cores` : ""})`
          : "estimate   every task is in the cache",
      );
      if (!o.budget) for (const line of longPlanAdvice(est.seconds, device, scaleOf(plan))) console.log(line);
    }
    // Each model scored on a few test images with the normalisation it was given, before anything
    // runs: a wrong one makes every score a number that means nothing (experiments/sanity.ts).
    const sane: string[] = [];
    if (!slurm) {
      const d = plan.experiment.dataset;
      const models = Object.entries(plan.models).flatMap(([name, ref]) =>
        "checkpoint" in ref ? [{ name, source: modelSource(cache, ref) }] : [],
      );
      const classes = datasetClassCount(d.name, { root: d.root });
      try {
        const data = { dataset: d.name, root: d.root ?? null, imageSize: d.imageSize ?? null };
        const scores = await normalizationScores(models, data, classes, device);
        sane.push(...normalizationWarnings(scores, classes));
      } catch (e) {
        // A check, not the run: what stops it is said, and the run goes on (it meets the same
        // problem, if it is one, where it has its own error).
        sane.push(`the models' normalization could not be checked: ${(e as Error).message.split("\n")[0]}`);
      }
      for (const w of sane) console.log(`warning    ${w}`);
    }
    if (o.dryRun) return;
    mkdirSync(out, { recursive: true });
    writeFileSync(file, text);
    // The estimate's own cost of each task starts the time left; it is for one worker, and w
    // workers share the same cores, so each task takes about w times as long beside the others.
    const w = exec.workers ?? 1;
    const tasks = est?.probe ? Object.fromEntries(Object.entries(est.tasks).map(([k, v]) => [k, v * w])) : undefined;
    const failed = await runCommand(
      file,
      { out, cache, force: Boolean(o.force), ...exec },
      o.json
        ? {
            json: (r) => ({
              ...((verdicts) => ({
                verdicts,
                // Each control passed or not, its lowest agreement, and where it fails, the likely why.
                controls: compareControls(verdicts, { recipe: standardRecipe(plan) }),
              }))(compareVerdicts(r.summary, r.iris, { recipe: standardRecipe(plan) })),
              ...(o.nulls ? { chance: beyondChance(r.summary) } : {}),
              rule: CLOSE_RULE,
              experiment: file,
              report: join(out, "report.html"),
              results: join(out, "results.csv"),
              failed: r.failed,
              // What the checks before the run said of the models (a normalisation that looks wrong,
              // B's batch norm under the standard recipe).
              warnings: [...notes, ...sane],
            }),
          }
        : (r) => [
            ...compareVerdictLines(compareVerdicts(r.summary, r.iris, { recipe: standardRecipe(plan) }), {
              recipe: standardRecipe(plan),
            }),
            `The experiment this ran: ${file} (go further: edit it, then stitchlab run ${file} --out ${out}).`,
          ],
      { tasks },
    );
    if (failed) process.exitCode = 1;
  });
}
