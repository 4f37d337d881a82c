// `stitchlab status DIR` and `stitchlab report DIR`: a run's folder, local or Slurm
// (experiments/report.ts decides which, for both).
import type { Command } from "commander";
import { folderStatus, reportFolder } from "../experiments/report.js";
import { printReport } from "./run.js";

export function registerStatusCommands(program: Command): void {
  program
    .command("status <dir>")
    .description(
      "a run's tasks: done, running, failed (with the error), missing (and on Slurm pending, cancelled); local or Slurm",
    )
    .option("--json", "print the status as JSON")
    .action((dir: string, o: { json?: boolean }) => {
      const s = folderStatus(dir);
      console.log(o.json ? JSON.stringify(s.json, null, 2) : s.text);
    });

  program
    .command("report <dir>")
    .description("write a run's results (report.html, results.csv, ...) from what the cache holds now; local or Slurm")
    // Exits 0 when the report is written, failed tasks or not (the report job's own state
    // should say whether the report was made); `stitchlab status` shows the failures.
    .action(async (dir: string) => printReport(await reportFolder(dir)));
}
