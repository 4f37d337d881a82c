// The stitchlab command line (bin/stitchlab.js runs the built one). Its commands are registered
// from their modules only when needed (cli/commands.ts), so that `--version`, `schema` or
// `status` do not load the rest.
import { buildProgram } from "./commands.js";

try {
  const program = await buildProgram(process.argv);
  await program.parseAsync(process.argv);
} catch (e) {
  console.error(`stitchlab: ${(e as Error).message}`);
  process.exit(1);
}
