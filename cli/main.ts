import { Command } from "commander";
import { stitchlabVersion } from "../torch/files.js";
import { registerDataCommands } from "./data.js";
import { doctor, formatDoctor } from "./doctor.js";
import { registerImportCommand } from "./import.js";
import { registerIrisCommand } from "./iris.js";
import { registerLayersCommand } from "./layers.js";
import { registerRunCommands } from "./run.js";
import { registerStitchCommand } from "./stitch.js";
import { registerTrainCommand } from "./train.js";

const program = new Command("stitchlab")
  .description("Invariance-aware model stitching: is network A functionally similar to network B?")
  .version(stitchlabVersion);

program
  .command("doctor")
  .description("check the install: libtorch version and build, device, threads, BLAS, and a matmul")
  .option("--json", "print the report as JSON")
  .action((opts: { json?: boolean }) => {
    const r = doctor();
    console.log(opts.json ? JSON.stringify(r, null, 2) : formatDoctor(r));
    if (!r.matmul.ok) process.exitCode = 1;
  });

registerLayersCommand(program);
registerTrainCommand(program);
registerImportCommand(program);
registerDataCommands(program);
registerIrisCommand(program);
registerStitchCommand(program);
registerRunCommands(program);

program.parseAsync(process.argv).catch((e: Error) => {
  console.error(`stitchlab: ${e.message}`);
  process.exit(1);
});
