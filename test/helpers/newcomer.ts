// A newcomer's files, as the README's "Compare your own two models" names them: weights saved by
// torchvision (mine.pt, theirs.pt) and CIFAR-10 where the README says (data/cifar-10-binary.tar.gz:
// a synthetic archive in the official format). test/readme.test.ts and test/compare.test.ts.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PYTHON } from "./pytorch.js";

/**
 * mine.pt (seed 1) and theirs.pt (seed 0) in dir: torchvision's resnet18(num_classes=10) state
 * dicts with the CIFAR stem stitchlab's resnet18 has (3x3 conv1 of stride 1, no max-pool), as
 * test/helpers/foreign_reference.py makes them, written by Python (torch, torchvision).
 */
export function saveTorchvisionPair(dir: string): void {
  const made = spawnSync(
    PYTHON,
    [
      "-c",
      [
        "import torch, torchvision",
        "for seed, name in [(0, 'theirs.pt'), (1, 'mine.pt')]:",
        "    torch.manual_seed(seed)",
        "    m = torchvision.models.resnet18(num_classes=10)",
        "    m.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)",
        "    m.maxpool = torch.nn.Identity()",
        "    torch.save(m.state_dict(), name)",
      ].join("\n"),
    ],
    { cwd: dir, encoding: "utf8" },
  );
  assert.equal(made.status, 0, made.stderr);
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

/** dir/data/cifar-10-binary.tar.gz: a synthetic CIFAR-10 archive in the official binary format. */
export function saveCifarArchive(dir: string): void {
  const src = join(dir, "src", "cifar-10-batches-bin");
  mkdirSync(src, { recursive: true });
  for (let i = 1; i <= 5; i++) writeFileSync(join(src, `data_batch_${i}.bin`), cifarBatch(i));
  writeFileSync(join(src, "test_batch.bin"), cifarBatch(0));
  mkdirSync(join(dir, "data"), { recursive: true });
  const tar = spawnSync("tar", [
    "-czf",
    join(dir, "data", "cifar-10-binary.tar.gz"),
    "-C",
    join(dir, "src"),
    "cifar-10-batches-bin",
  ]);
  assert.equal(tar.status, 0, String(tar.stderr));
  rmSync(join(dir, "src"), { recursive: true });
}
