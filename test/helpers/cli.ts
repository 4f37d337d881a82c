// Starting stitchlab (or any TypeScript entry point) in a child process, as the tests do.
// The tsx loader is resolved to an absolute path here, never left to Node's resolution from the
// child's working directory: a bare `--import tsx` finds tsx only when some node_modules above
// that directory holds it, which made the suite pass on a machine with scratch left in /tmp and
// fail on a fresh one (issue 17).
import { type SpawnSyncOptionsWithStringEncoding, spawnSync } from "node:child_process";
import { cliCommand } from "../../experiments/tasks.js";

/** The tsx loader as an absolute file URL, for `node --import`. */
export const tsxLoader = import.meta.resolve("tsx");

type Options = Omit<SpawnSyncOptionsWithStringEncoding, "encoding">;

/** `node --import <tsx> script ...args`, synchronously, with text output. */
export function runTs(script: string, args: string[], options: Options = {}) {
  return spawnSync(process.execPath, ["--import", tsxLoader, script, ...args], { encoding: "utf8", ...options });
}

/** `stitchlab ...args` from the sources, synchronously, with text output. */
export function runCli(args: string[], options: Options = {}) {
  return spawnSync(process.execPath, cliCommand(...args), { encoding: "utf8", ...options });
}
