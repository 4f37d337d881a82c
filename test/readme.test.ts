// The README's "Compare your own two models" commands, run as a newcomer runs them, in a fresh
// folder: weights saved by torchvision (mine.pt, theirs.pt) and CIFAR-10 where the README says
// (data/cifar-10-binary.tar.gz: here a synthetic archive in the official format). `import` and
// the study's `run ... --dry-run` run as written; `compare` runs at small size in
// test/compare.test.ts; the study itself is the one command left to users.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { runCli } from "./helpers/cli.js";
import { commandLines } from "./helpers/markdown.js";
import { saveCifarArchive, saveTorchvisionPair } from "./helpers/newcomer.js";
import { skipUnlessTorchvision } from "./helpers/pytorch.js";

const root = join(import.meta.dirname, "..");
const skip = skipUnlessTorchvision();
const dir = mkdtempSync(join(tmpdir(), "stitchlab-readme-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** The README's section under `heading`, up to the next second-level heading. */
function section(heading: string): string {
  const text = readFileSync(join(root, "README.md"), "utf8");
  const start = text.indexOf(`## ${heading}`);
  assert.ok(start >= 0, `README.md has no section '${heading}'`);
  const end = text.indexOf("\n## ", start + 3);
  return text.slice(start, end < 0 ? undefined : end);
}

/** The fenced blocks of a language in a text. */
function blocks(text: string, lang: string): string[] {
  return [...text.matchAll(new RegExp(`\`\`\`${lang}\\n([\\s\\S]*?)\`\`\``, "g"))].map((m) => m[1]);
}

test("README: 'Compare your own two models', every command as written", {
  skip,
  timeout: 600_000,
}, () => {
  // The newcomer's files: torchvision weights and the CIFAR-10 archive.
  saveTorchvisionPair(dir);
  saveCifarArchive(dir);

  const text = section("Compare your own two models");
  const ran: string[] = [];
  for (const words of commandLines(text).map((l) => l.split(/\s+/))) {
    const command = words[0] as string;
    // `compare` runs at small size in test/compare.test.ts, on these same files.
    if (command === "compare") continue;
    // The study's full run is left to users; its dry run checks the file, the data and the checkpoints.
    if (command === "run" && !words.includes("--dry-run")) continue;
    if (command === "run") writeFileSync(join(dir, "mine.yaml"), blocks(text, "yaml")[0] as string);
    const r = runCli([...words, ...(command === "run" ? [] : ["--json"])], { cwd: dir });
    assert.equal(r.status, 0, `stitchlab ${words.join(" ")}:\n${r.stderr}`);
    const out = words[words.indexOf("--out") + 1] as string;
    const expected = { import: "model.safetensors", stitch: "scores.json", iris: "iris.json" }[command];
    if (expected) assert.ok(existsSync(join(dir, out, expected)), `${command} wrote ${out}/${expected}`);
    if (command === "run") assert.match(r.stdout, /stitch\s+\d+ tasks: 0 cached, \d+ to run/);
    ran.push(command);
  }
  // import and the study's dry run (compare: test/compare.test.ts).
  assert.deepEqual(ran, ["import", "run"]);
});
