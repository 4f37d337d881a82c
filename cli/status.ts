// `stitchlab status DIR` and `stitchlab report DIR`: a run's folder, local or Slurm
// (experiments/local.ts, experiments/slurm.ts, experiments/report.ts).
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import type { Command } from "commander";
import { formatLocalStatus, localStatus, readLocalRun } from "../experiments/local.js";
import { reportFolder, requireRun } from "../experiments/report.js";
import { formatStatus, slurmRunPath, slurmStatus } from "../experiments/slurm.js";
import { printReport } from "./run.js";

export function registerStatusCommands(program: Command): void {
  program
    .command("status <dir>")
    .description(
      "a run's tasks: done, running, failed (with the error), missing (and on Slurm pending, cancelled); local or Slurm",
    )
    .option("--json", "print the status as JSON")
    .action((dir: string, o: { json?: boolean }) => {
      const local = readLocalRun(resolve(dir));
      if (local && !existsSync(slurmRunPath(resolve(dir)))) {
        const tasks = localStatus(local);
        console.log(
          o.json
            ? JSON.stringify(
                { experiment: local.plan.experiment.name, cache: local.cache, executor: "local", tasks },
                null,
                2,
              )
            : formatLocalStatus(local, tasks, resolve(dir)),
        );
        return;
      }
      requireRun(resolve(dir));
      const s = slurmStatus(resolve(dir));
      if (o.json)
        console.log(
          JSON.stringify(
            { experiment: s.run.plan.experiment.name, cache: s.run.cache, tasks: s.tasks, report: s.report },
            null,
            2,
          ),
        );
      else console.log(formatStatus(s));
    });

  program
    .command("report <dir>")
    .description("write a run's results (report.html, results.csv, ...) from what the cache holds now; local or Slurm")
    // Exits 0 when the report is written, failed tasks or not (the report job's own state
    // should say whether the report was made); `stitchlab status` shows the failures.
    .action(async (dir: string) => printReport(await reportFolder(dir)));
}
