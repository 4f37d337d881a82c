// The README's "Compare your own two models" commands, run as a newcomer runs them, in a fresh
// folder: weights saved by torchvision (mine.pt, theirs.pt), CIFAR-10 where the README says
// (data/cifar-10-binary.tar.gz: here a synthetic archive in the official format), and the two
// checkpoints the "one point" block names, trained here on Fashion-MNIST. Each command is run as
// written, with size limits appended (later flags win) so the suite stays short: T for 1 epoch on
// 64 images, IRIs of 3 steps on 32 images. The study's `run ... --dry-run` runs as written; the
// study itself (96 stitches) is the one command left to users.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { runCli } from "./helpers/cli.js";
import { commandLines } from "./helpers/markdown.js";
import { PYTHON, skipUnlessTorchvision } from "./helpers/pytorch.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

const root = join(import.meta.dirname, "..");
const skip = skipUnlessTorchvision() || skipUnlessFashionMnist();
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

/** A CIFAR-10 batch file: 10,000 records of a label byte and 3,072 pixel bytes, in a pattern. */
function cifarBatch(seed: number): Buffer {
  const record = 3073;
  const b = Buffer.alloc(10000 * record);
  for (let i = 0; i < 10000; i++) {
    b[i * record] = (i + seed) % 10;
    for (let j = 0; j < 3072; j += 64) b.fill((i * 7 + j + seed) & 255, i * record + 1 + j, i * record + 1 + j + 64);
  }
  return b;
}

/** Size limits per command, appended to the README's own words (commander: the last one wins). */
const LIMITS: Record<string, string[]> = {
  stitch: [
    "--limit",
    "64",
    "--test-limit",
    "64",
    "--epochs",
    "1",
    "--batch-size",
    "32",
    "--init-images",
    "32",
    "--cka-images",
    "0",
  ],
  iris: ["--limit", "32", "--steps", "3", "--batch-size", "32"],
};

test("README: 'Compare your own two models', every command as written (with size limits)", {
  skip,
  timeout: 600_000,
}, () => {
  // The newcomer's files: torchvision weights, the CIFAR-10 archive, two trained checkpoints.
  const made = spawnSync(
    PYTHON,
    [
      "-c",
      [
        "import torch, torchvision",
        "for seed, name in [(0, 'theirs.pt'), (1, 'mine.pt')]:",
        "    torch.manual_seed(seed)",
        "    torch.save(torchvision.models.resnet18(num_classes=10).state_dict(), name)",
      ].join("\n"),
    ],
    { cwd: dir, encoding: "utf8" },
  );
  assert.equal(made.status, 0, made.stderr);
  const src = join(dir, "src", "cifar-10-batches-bin");
  mkdirSync(src, { recursive: true });
  for (let i = 1; i <= 5; i++) writeFileSync(join(src, `data_batch_${i}.bin`), cifarBatch(i));
  writeFileSync(join(src, "test_batch.bin"), cifarBatch(0));
  mkdirSync(join(dir, "data"));
  const tar = spawnSync("tar", [
    "-czf",
    join(dir, "data", "cifar-10-binary.tar.gz"),
    "-C",
    join(dir, "src"),
    "cifar-10-batches-bin",
  ]);
  assert.equal(tar.status, 0, String(tar.stderr));
  rmSync(join(dir, "src"), { recursive: true });
  for (const seed of [0, 1]) {
    const r = runCli(
      [
        "train",
        "--model",
        "resnet18",
        "--width",
        "0.0625",
        "--dataset",
        "fashion-mnist",
        "--epochs",
        "1",
        "--limit",
        "256",
        "--test-limit",
        "64",
        "--seed",
        String(seed),
        "--out",
        `runs/clean-s${seed}`,
      ],
      { cwd: dir },
    );
    assert.equal(r.status, 0, r.stderr);
  }

  const text = section("Compare your own two models");
  const ran: string[] = [];
  for (const words of commandLines(text).map((l) => l.split(/\s+/))) {
    const command = words[0] as string;
    // The study's full run is left to users; its dry run checks the file, the data and the checkpoints.
    if (command === "run" && !words.includes("--dry-run")) continue;
    if (command === "run") writeFileSync(join(dir, "mine.yaml"), blocks(text, "yaml")[0] as string);
    const r = runCli([...words, ...(LIMITS[command] ?? []), ...(command === "run" ? [] : ["--json"])], { cwd: dir });
    assert.equal(r.status, 0, `stitchlab ${words.join(" ")}:\n${r.stderr}`);
    const out = words[words.indexOf("--out") + 1] as string;
    const expected = { import: "model.safetensors", stitch: "scores.json", iris: "iris.json" }[command];
    if (expected) assert.ok(existsSync(join(dir, out, expected)), `${command} wrote ${out}/${expected}`);
    if (command === "run") assert.match(r.stdout, /stitch\s+\d+ tasks: 0 cached, \d+ to run/);
    ran.push(command);
  }
  // import, the two-model stitch, iris, the two stitches of one point, and the study's dry run.
  assert.deepEqual(ran, ["import", "stitch", "iris", "stitch", "stitch", "run"]);
  const iris = JSON.parse(readFileSync(join(dir, "runs/stitch/iris/scores.json"), "utf8"));
  assert.equal(iris.config.mode, "iris");
});
