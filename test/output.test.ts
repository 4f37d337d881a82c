// What a person sees: on a terminal (a pty made by util-linux's `script`), a finished command
// prints a summary in words; with --json, or into a pipe, the one JSON line scripts parse.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { eventPrinter } from "../cli/run-progress.js";
import type { Task } from "../experiments/plan.js";
import type { RunEvent } from "../experiments/runner.js";
import { cliCommand } from "../experiments/tasks.js";
import { saveCheckpoint } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import { runCli } from "./helpers/cli.js";
import { skipUnless, skipUnlessFashionMnist } from "./helpers/requirements.js";

const tmp = mkdtempSync(join(tmpdir(), "stitchlab-output-"));
after(() => rmSync(tmp, { recursive: true, force: true }));
const noScript = skipUnless("script");

/** Runs stitchlab with a terminal as its stdout and stderr; returns what the terminal showed. */
function onTerminal(args: string[]): { status: number | null; screen: string } {
  const command = [process.execPath, ...cliCommand(...args)].map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(" ");
  const r = spawnSync("script", ["-qec", command, "/dev/null"], { encoding: "utf8" });
  return { status: r.status, screen: r.stdout.replaceAll("\r", "") };
}

test("a finished command speaks in words on a terminal and in one JSON line into a pipe or with --json", {
  skip: noScript,
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
  assert.match(words.screen, /forward check on 256 fashion-mnist test images: logits \[256, 10\] finite/);
  assert.match(words.screen, /accuracy 0\.\d{3} \(chance 0\.100\)/);
  assert.doesNotMatch(words.screen, /"event":"done"/);
  const json = onTerminal([...args("b"), "--json"]);
  assert.equal(json.status, 0, json.screen);
  assert.equal(JSON.parse(json.screen.trim()).event, "done");
  const piped = runCli(args("c"));
  assert.equal(piped.status, 0, piped.stderr);
  assert.equal(JSON.parse(piped.stdout).arch, "resnet18");
});

const TINY = `
name: tiny
dataset: { name: fashion-mnist, limit: 200, testLimit: 100 }
models:
  a: { arch: resnet18, width: 0.0625, seed: 0, epochs: 1 }
  b: { arch: resnet18, width: 0.0625, seed: 1, epochs: 1 }
pairs:
  - { front: b, back: a, relation: cross-seed }
points: [layer1.0]
objectives: [slm]
iris: { limit: 32, steps: 2, batchSize: 32 }
stitch: { limit: 64, epochs: 1, batchSize: 32, initImages: 32, ckaImages: 32 }
`;

test("stitchlab run shows one overall bar with an ETA on a terminal, and Ctrl-C says how to go on", {
  skip: noScript || skipUnlessFashionMnist(),
}, async () => {
  const file = join(tmp, "tiny.yaml");
  writeFileSync(file, TINY);
  const shown = onTerminal(["run", file, "--out", join(tmp, "run1"), "--cache", join(tmp, "cache1")]);
  assert.equal(shown.status, 0, shown.screen);
  assert.match(shown.screen, /run \[[^\]]*\] \d+% \| \d+\/5 tasks; .* \| ETA /);
  assert.doesNotMatch(shown.screen, /\[1\/4\] train/, "no per-task lines on a terminal");
  assert.match(shown.screen, /agreement probability/);

  // Interrupted after its first task: a line that says what is kept and how to go on, status 130.
  const child = spawn(
    process.execPath,
    cliCommand("run", file, "--out", join(tmp, "run2"), "--cache", join(tmp, "cache2")),
    {
      stdio: ["ignore", "ignore", "pipe"],
    },
  );
  let seen = "";
  await new Promise<void>((resolve, reject) => {
    child.stderr?.setEncoding("utf8").on("data", (d: string) => {
      seen += d;
      // An IRI set's first line: the models it starts from have ended.
      if (/\] iris: /.test(seen)) resolve();
    });
    child.on("close", () => reject(new Error(`exited first: ${seen}`)));
  });
  child.kill("SIGINT");
  const code = await new Promise<number | null>((resolve) => child.on("close", (c) => resolve(c)));
  assert.equal(code, 130, seen);
  assert.match(
    seen,
    /interrupted: finished tasks are kept in the cache \(.*cache2\); run the same command again to go on/,
  );
  const again = runCli(["status", join(tmp, "run2")]);
  assert.equal(again.status, 0, again.stderr);
  assert.match(again.stdout, /5 tasks: [1-4] done/);
});

test("into a pipe, two tasks running at once are told on one line of their kind, each under its own label with its latest progress", () => {
  let now = 10;
  const lines: string[] = [];
  const print = eventPrinter(
    (l) => lines.push(l),
    undefined,
    () => now,
  );
  const task = (key: string, label: string) => ({ key, label, kind: "train", deps: [] }) as unknown as Task;
  const [a, b] = [task("train-a", "train a"), task("train-b", "train b")];
  const event = (e: Omit<RunEvent, "total">): RunEvent => ({ ...e, total: 88 });
  print(event({ kind: "start", task: a, index: 1 }));
  print(event({ kind: "start", task: b, index: 2 }));
  // The workers speak alternately, each once a second, for a minute and a half.
  for (let s = 0; s < 90; s++) {
    print(event({ kind: "progress", task: a, index: 1, fields: { epoch: 1, step: 10 * s, loss: 2 - s / 100 } }));
    now += 0.5;
    print(event({ kind: "progress", task: b, index: 2, fields: { epoch: 1, step: 10 * s, loss: Number.NaN } }));
    now += 0.5;
  }
  assert.deepEqual(lines, [
    "[88 tasks] train: 0 ended; running train a",
    // 60 s after the first: both tasks, each with its own latest fields; a value not known yet left out.
    "[88 tasks] train: 0 ended; running train a: epoch 1, step 600, loss 1.4; train b: epoch 1, step 590",
  ]);
});
