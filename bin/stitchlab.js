#!/usr/bin/env node
// The `stitchlab` command: runs the compiled CLI (dist/), built by scripts/setup.sh or `npm run build`.
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const main = join(dirname(fileURLToPath(import.meta.url)), "..", "dist", "cli", "main.js");
if (!existsSync(main)) {
  console.error(`stitchlab is not built (${main} is missing). Run scripts/setup.sh or \`npm run build\`.`);
  process.exit(1);
}
await import(main);
