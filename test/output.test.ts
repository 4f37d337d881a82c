// What a person sees: on a terminal (a pty made by util-linux's `script`), a finished command
// prints a summary in words; with --json, or into a pipe, the one JSON line scripts parse.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { cliCommand } from "../experiments/tasks.js";
import { saveCheckpoint } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import { runCli } from "./helpers/cli.js";

const tmp = mkdtempSync(join(tmpdir(), "stitchlab-output-"));
after(() => rmSync(tmp, { recursive: true, force: true }));
const HAVE_SCRIPT = spawnSync("script", ["--version"], { encoding: "utf8" }).status === 0;

/** Runs stitchlab with a terminal as its stdout and stderr; returns what the terminal showed. */
function onTerminal(args: string[]): { status: number | null; screen: string } {
  const command = [process.execPath, ...cliCommand(...args)].map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(" ");
  const r = spawnSync("script", ["-qec", command, "/dev/null"], { encoding: "utf8" });
  return { status: r.status, screen: r.stdout.replaceAll("\r", "") };
}

test("a finished command speaks in words on a terminal and in one JSON line into a pipe or with --json", {
  skip: HAVE_SCRIPT ? false : "util-linux's script is not installed (a pty is needed)",
}, () => {
  const ckpt = join(tmp, "m", "model.safetensors");
  mkdirSync(join(tmp, "m"));
  const m = createModel("resnet18", { width: 0.125 });
  saveCheckpoint(ckpt, m, { dataset: "fashion-mnist" });
  m.dispose();
  const args = (out: string) => [
    "import",
    ckpt,
    "--arch",
    "resnet18",
    "--dataset",
    "fashion-mnist",
    "--out",
    join(tmp, out),
  ];
  const words = onTerminal(args("a"));
  assert.equal(words.status, 0, words.screen);
  assert.match(words.screen, /imported resnet18 from .*model\.safetensors\n {2}options: \{/);
  assert.match(words.screen, /forward check: logits \[2, 10\] finite/);
  assert.doesNotMatch(words.screen, /"event":"done"/);
  const json = onTerminal([...args("b"), "--json"]);
  assert.equal(json.status, 0, json.screen);
  assert.equal(JSON.parse(json.screen.trim()).event, "done");
  const piped = runCli(args("c"));
  assert.equal(piped.status, 0, piped.stderr);
  assert.equal(JSON.parse(piped.stdout).arch, "resnet18");
});
