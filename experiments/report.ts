// Reporting a run: from the cache to the experiment's folder (results.csv, summary.csv,
// report.html, plan.json, run.json, env.json: experiments/results.ts), and the text a person reads
// after it (the agreement table, the IRI residuals, the reading, where the files are). `stitchlab
// run`, `demo` and `report` print that text; a Slurm run's report job (experiments/worker.ts
// --report) writes the same into its log.
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import type { IriPreview, StitchRow, SummaryRow } from "../findings/index.js";
import { agreementTable, IRI_VERDICT_MAX_RESIDUAL, residualTable } from "../findings/reading.js";
import { GOOD_IRI_RESIDUAL } from "../stitch/residuals.js";
import type { Device } from "../torch/index.js";
import { isDone, readFailure } from "./cache.js";
import { formatLocalStatus, localStatus, readLocalRun } from "./local.js";
import { withOutLock } from "./outdir.js";
import type { Plan } from "./plan.js";
import { writeResults } from "./results.js";
import type { RunSummary } from "./runner.js";
import { formatStatus, readSlurmRun, slurmRunPath, slurmStatus } from "./slurm.js";

/** A summary read from the cache alone (a run made by Slurm jobs, or reported again): done, failed, or not run. */
export function summaryFromCache(plan: Plan, cache: string): RunSummary {
  const states: RunSummary["states"] = {};
  const errors: RunSummary["errors"] = {};
  for (const t of plan.tasks) {
    if (isDone(cache, t.key)) states[t.key] = "ran";
    else {
      const f = readFailure(cache, t.key);
      states[t.key] = f ? "failed" : "skipped";
      errors[t.key] = f ? f.error : "not run";
    }
  }
  return { states, errors, seconds: 0 };
}

/** A run's report, as written into its folder. */
export interface RunReport {
  out: string;
  rows: StitchRow[];
  /** The replicate summary of `rows` (summarize), made once for the whole report. */
  summary: SummaryRow[];
  iris: (IriPreview & { key: string })[];
  reading: string[];
  /** True when no stitch finished and an earlier report in `out` was left as it was. */
  kept: boolean;
  /** Tasks that failed or were not run. */
  failed: number;
  seconds: number;
}

/**
 * Writes the experiment's folder from the cache. `device`: where the tasks ran (not where this
 * report is written: a Slurm report job has no GPU).
 */
export async function reportRun(
  plan: Plan,
  summary: RunSummary,
  cache: string,
  out: string,
  o: { scale: string; device: Device },
): Promise<RunReport> {
  const written = await writeResults(plan, summary, cache, out, { scale: o.scale, device: o.device });
  return {
    out,
    rows: written.rows,
    summary: written.summary,
    iris: written.iris,
    reading: written.reading,
    kept: written.kept,
    failed: Object.keys(summary.errors).length,
    seconds: summary.seconds,
  };
}

/**
 * What a person reads once a run is reported: the agreement table, the IRI residuals, the reading
 * and where the files are (stdout); or, when nothing finished, why the folder keeps an earlier
 * report (stderr).
 */
export function reportText(r: RunReport): { text: string; stream: "stdout" | "stderr" } {
  if (r.kept)
    return {
      stream: "stderr",
      text: `no stitch finished: ${r.out} keeps the report of an earlier run (report.html, results.csv); fix what failed above and run again`,
    };
  // The reading's own verdict lines (reading.ts verdictLines, made with the run's recipe, which a
  // failed control's line names): printed first, and not again below.
  const verdicts = r.reading.filter((l) => l.startsWith("Verdict, "));
  const parts = [
    ...(verdicts.length ? [verdicts.join("\n"), ""] : []),
    `agreement probability (larger = more similar; mean ± 95% half-width over replicates):\n${agreementTable(r.rows, r.summary)}`,
  ];
  if (r.iris.length)
    parts.push(
      `\nIRI residuals (relative; ${GOOD_IRI_RESIDUAL} or less is a good IRI; a set's mean above ${IRI_VERDICT_MAX_RESIDUAL} is too loose to judge):\n${residualTable(r.iris)}`,
    );
  // The verdict lines open the reading too (the report's); here they were printed first.
  const details = r.reading.filter((l) => !verdicts.includes(l));
  parts.push(`\nReading:\n${details.map((l) => `- ${l}`).join("\n")}`);
  parts.push(
    `\n${r.out}: report.html, results.csv (${r.rows.length} runs); ${r.seconds.toFixed(0)} s` +
      (r.failed ? `; ${r.failed} task(s) failed or not run, see run.json` : ""),
  );
  return { stream: "stdout", text: parts.join("\n") };
}

/** A folder that holds neither a local run's record nor a Slurm run's: one clear error. */
export function requireRun(out: string): void {
  if (!readLocalRun(out) && !existsSync(slurmRunPath(out)))
    throw new Error(
      `${out} holds no stitchlab run (neither local/run.json nor slurm/run.json): start one with stitchlab run FILE --out ${out}`,
    );
}

/**
 * Reports the run recorded in folder `out` (local or Slurm) from what the cache holds now
 * (`stitchlab report DIR`, and a Slurm run's report job). Resolves whether tasks failed or not:
 * the report is written either way, and `stitchlab status` shows the failures.
 */
export async function reportFolder(dir: string): Promise<RunReport> {
  const out = resolve(dir);
  requireRun(out);
  // Written under the folder's lock, as a run writes it: never into a run still under way.
  return withOutLock(out, async () => {
    const local = readLocalRun(out);
    if (local && !existsSync(slurmRunPath(out)))
      return reportRun(local.plan, summaryFromCache(local.plan, local.cache), local.cache, out, {
        scale: local.scale,
        device: local.device,
      });
    const run = readSlurmRun(out);
    return reportRun(run.plan, summaryFromCache(run.plan, run.cache), run.cache, out, {
      scale: run.scale,
      device: run.options.device,
    });
  });
}

/**
 * The status of the run recorded in folder `dir` (`stitchlab status DIR`), local or Slurm, decided
 * here as reportFolder decides it: as JSON (`json`) and as the text printed on a terminal.
 */
export function folderStatus(dir: string): { json: object; text: string } {
  const out = resolve(dir);
  const local = readLocalRun(out);
  if (local && !existsSync(slurmRunPath(out))) {
    const tasks = localStatus(local);
    return {
      json: { experiment: local.plan.experiment.name, cache: local.cache, executor: "local", tasks },
      text: formatLocalStatus(local, tasks, out),
    };
  }
  requireRun(out);
  const s = slurmStatus(out);
  return {
    json: { experiment: s.run.plan.experiment.name, cache: s.run.cache, tasks: s.tasks, report: s.report },
    text: formatStatus(s),
  };
}
