// Image-folder labels are fixed per root, not per split: without a class list they come from
// train/'s class folders, a split lacking a class keeps the other labels right, a split with a
// class train/ lacks is refused before decoding; a class list selects classes as before.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import sharp from "sharp";
import { readImageFolder } from "../data/imagefolder.js";
import { type Dataset, disposeDataset } from "../data/index.js";
import * as torch from "../torch/index.js";

const dir = mkdtempSync(join(tmpdir(), "stitchlab-imagefolder-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Class k's images are solid grey 40 * (k + 1), so the label of an image can be checked against its pixels. */
const shade = (wnid: string) => 40 * Number(wnid.slice(1));

/** Writes root/<split>/<wnid>/<i>.png (and one JPEG per class) for each split's classes. */
async function makeRoot(name: string, splits: Record<string, string[]>): Promise<string> {
  const r = join(dir, name);
  for (const [split, wnids] of Object.entries(splits))
    for (const wnid of wnids) {
      const cdir = join(r, split, wnid);
      mkdirSync(cdir, { recursive: true });
      const v = shade(wnid);
      const img = () => sharp({ create: { width: 8, height: 8, channels: 3, background: { r: v, g: v, b: v } } });
      await img().png().toFile(join(cdir, "a.png"));
      await img().jpeg({ quality: 95 }).toFile(join(cdir, "b.JPEG"));
    }
  return r;
}

function labelsOf(ds: Dataset): number[] {
  return Array.from(ds.labels.toTypedArray() as BigInt64Array, Number);
}

/** Each image's mean grey level, rounded. */
function greysOf(ds: Dataset): number[] {
  return (torch.tidy(() => ds.images.float().mean([1, 2, 3]).tolist()) as number[]).map(Math.round);
}

test("without a class list, val's labels are train's: a class missing from val does not shift the others", async () => {
  const r = await makeRoot("missing", { train: ["n01", "n02", "n03"], val: ["n01", "n03"] });
  const train = await readImageFolder(r, "train", { size: 8 });
  assert.deepEqual(train.classes, ["n01", "n02", "n03"]);
  assert.deepEqual(labelsOf(train), [0, 0, 1, 1, 2, 2]);
  disposeDataset(train);
  const val = await readImageFolder(r, "test", { size: 8 });
  // The label space is train's (3 classes), and n03's images keep n03's label 2, not 1.
  assert.deepEqual(val.classes, ["n01", "n02", "n03"]);
  assert.deepEqual(labelsOf(val), [0, 0, 2, 2]);
  const greys = greysOf(val);
  for (const [i, g] of greys.entries())
    assert.ok(Math.abs(g - shade(val.classes[labelsOf(val)[i]])) <= 2, `image ${i}: grey ${g}`);
  disposeDataset(val);
});

test("without a class list, a val class folder that train lacks is refused before any image is decoded", async () => {
  const r = await makeRoot("extra", { train: ["n01", "n02", "n03"], val: ["n01", "n02", "n03", "n04"] });
  // A broken image: decoding anything would fail with "cannot decode" instead.
  writeFileSync(join(r, "val", "n01", "broken.png"), "not a png");
  await assert.rejects(readImageFolder(r, "test", { size: 8 }), (e: Error) => {
    assert.equal(e.name, "DataError");
    assert.ok(e.message.startsWith(`${join(r, "val")}: `), e.message);
    assert.match(e.message, /class folder 'n04' not among the 3 classes of .*train/);
    assert.doesNotMatch(e.message, /cannot decode/);
    return true;
  });
  // Several extras are all named; a splitDir is checked the same way.
  mkdirSync(join(r, "val", "n05"));
  await assert.rejects(readImageFolder(r, "test", { size: 8 }), /class folders 'n04', 'n05' not among/);
  await assert.rejects(
    readImageFolder(r, "train", { size: 8, splitDir: "val" }),
    /val: class folders 'n04', 'n05' not among/,
  );
  // Train itself reads as before.
  const train = await readImageFolder(r, "train", { size: 8 });
  assert.deepEqual(labelsOf(train), [0, 0, 1, 1, 2, 2]);
  disposeDataset(train);
});

test("without a train folder, the label space is the union of the root's evaluation splits", async () => {
  const r = await makeRoot("evalonly", { val: ["n01", "n03"], test: ["n02", "n03"] });
  const val = await readImageFolder(r, "test", { size: 8 });
  assert.deepEqual(val.classes, ["n01", "n02", "n03"]);
  assert.deepEqual(labelsOf(val), [0, 0, 2, 2]);
  disposeDataset(val);
  const test_ = await readImageFolder(r, "test", { size: 8, splitDir: "test" });
  assert.deepEqual(test_.classes, ["n01", "n02", "n03"]);
  assert.deepEqual(labelsOf(test_), [1, 1, 2, 2]);
  disposeDataset(test_);
});

test("with a class list, the list selects the classes and fixes their order, as before", async () => {
  const r = await makeRoot("listed", { train: ["n01", "n02", "n03"], val: ["n01", "n02", "n03", "n04"] });
  writeFileSync(join(r, "classes.txt"), "# picked\nn03 third\nn01 first\n");
  // root/classes.txt is read by default: val's n02 and n04 (unlisted) are ignored, not refused.
  const val = await readImageFolder(r, "test", { size: 8 });
  assert.deepEqual(val.classes, ["third", "first"]);
  assert.deepEqual(labelsOf(val), [0, 0, 1, 1]);
  assert.deepEqual(
    greysOf(val).map((g) => Math.round(g / 40)),
    [3, 3, 1, 1],
  );
  disposeDataset(val);
  const train = await readImageFolder(r, "train", { size: 8 });
  assert.deepEqual(labelsOf(train), [0, 0, 1, 1]);
  disposeDataset(train);
  // An explicit list naming a class the split lacks is still an error.
  const list = join(r, "other.txt");
  writeFileSync(list, "n04\nn01\n");
  await assert.rejects(
    readImageFolder(r, "train", { size: 8, classList: list }),
    /train[/\\]n04: folder of class 'n04' not found/,
  );
  const v = await readImageFolder(r, "test", { size: 8, classList: list });
  assert.deepEqual(v.classes, ["n04", "n01"]);
  assert.deepEqual(labelsOf(v), [0, 0, 1, 1]);
  disposeDataset(v);
});

test("a class folder that holds no images is refused, naming it, before any image is decoded", async () => {
  // Issue 25: train/n04 empty gave a model one output no image trains, without a word.
  const r = await makeRoot("empty", { train: ["n01", "n02", "n03"], val: ["n01", "n02", "n03", "n04"] });
  mkdirSync(join(r, "train", "n04"));
  // A broken image: decoding anything would fail with "cannot decode" instead.
  writeFileSync(join(r, "train", "n01", "broken.png"), "not a png");
  const refused = async (split: "train" | "test", opts: object, folders: string[], why: RegExp) =>
    assert.rejects(readImageFolder(r, split, { size: 8, ...opts }), (e: Error) => {
      assert.equal(e.name, "DataError");
      for (const f of folders) assert.ok(e.message.includes(join(r, f)), `${f} not named: ${e.message}`);
      assert.match(e.message, why);
      assert.doesNotMatch(e.message, /cannot decode/);
      return true;
    });
  await refused("train", {}, ["train/n04"], /class folder 'n04' holds no images \(\.jpeg, \.jpg, \.png/);
  // A folder of other files only is as empty; every such folder is named, and a limit changes nothing.
  mkdirSync(join(r, "train", "n05"));
  writeFileSync(join(r, "train", "n05", "README.txt"), "to do: copy the images");
  await refused("train", { limit: 2 }, ["train/n04", "train/n05"], /class folders .*n04, .*n05 hold no images/);
  // An evaluation split may lack a class of train's, and an empty folder there is the same as none.
  mkdirSync(join(r, "val", "n05"));
  const val = await readImageFolder(r, "test", { size: 8 });
  assert.deepEqual(val.classes, ["n01", "n02", "n03", "n04", "n05"]);
  assert.deepEqual(labelsOf(val), [0, 0, 1, 1, 2, 2, 3, 3]);
  disposeDataset(val);
  // A class list that names an empty folder is refused in every split, as one naming a missing
  // folder is; one that leaves it out reads the rest.
  const list = join(r, "list.txt");
  writeFileSync(list, "n01\nn04\n");
  await refused("train", { classList: list }, ["train/n04"], /holds no images/);
  writeFileSync(list, "n01\nn05\n");
  await refused("test", { classList: list }, ["val/n05"], /holds no images/);
  writeFileSync(list, "n02\nn03\n");
  const ok = await readImageFolder(r, "train", { size: 8, classList: list });
  assert.deepEqual(labelsOf(ok), [0, 0, 1, 1]);
  disposeDataset(ok);
});
