// The data layer: readers on files the test writes itself (CIFAR-10 binary as folder and
// .tar.gz, IDX gzipped and raw, an image folder), their errors, the real Fashion-MNIST when
// installed, shortcut markers, transforms, seeded loading, and the preview command.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { gzipSync } from "node:zlib";
import sharp from "sharp";
import {
  applyShortcut,
  batches,
  CIFAR10_NORMALIZATION,
  classLocation,
  cropFlip,
  type Dataset,
  disposeDataset,
  drawResizedCrop,
  epochOrder,
  FASHION_MNIST_CLASSES,
  FASHION_MNIST_ROOT,
  holdOut,
  loadDataset,
  type MarkerPlan,
  markerCell,
  markerColors,
  markerDraws,
  markerSide,
  normalize,
  planDatasetMarkers,
  planMarkers,
  Rng,
  readTar,
  resizedCropFlip,
  standardAugment,
  validRange,
} from "../data/index.js";
import * as torch from "../torch/index.js";
import { runCli } from "./helpers/cli.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

const root = join(import.meta.dirname, "..");
const dir = mkdtempSync(join(tmpdir(), "stitchlab-data-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const RECORD = 3073;
/** A CIFAR-10 batch of 10,000 records with a recognisable pattern: label i % 10, pixel j of record i = (i + 7j) mod 256. */
function cifarBatch(seed: number): Uint8Array {
  const b = new Uint8Array(10000 * RECORD);
  for (let i = 0; i < 10000; i++) {
    b[i * RECORD] = (i + seed) % 10;
    for (let j = 0; j < 3072; j++) b[i * RECORD + 1 + j] = (i + seed + 7 * j) & 255;
  }
  return b;
}

function pixelsOf(ds: Dataset, i: number): number[] {
  return Array.from(ds.images.select(0, i).flatten().toTypedArray() as Uint8Array);
}

function labelsOf(ds: Dataset): number[] {
  return Array.from(ds.labels.toTypedArray() as BigInt64Array, Number);
}

const cifarDir = join(dir, "cifar", "cifar-10-batches-bin");
mkdirSync(cifarDir, { recursive: true });
writeFileSync(join(cifarDir, "test_batch.bin"), cifarBatch(0));
writeFileSync(join(cifarDir, "data_batch_1.bin"), cifarBatch(3));
const classNames = ["a0", "b1", "c2", "d3", "e4", "f5", "g6", "h7", "i8", "j9"];
writeFileSync(join(cifarDir, "batches.meta.txt"), `${classNames.join("\n")}\n\n`);

function checkCifar(ds: Dataset, seed: number, n: number) {
  assert.deepEqual(ds.images.shape, [n, 3, 32, 32]);
  assert.equal(ds.images.dtype, "uint8");
  assert.equal(ds.labels.dtype, "int64");
  assert.deepEqual(ds.classes, classNames);
  for (const i of [0, 1, n - 1]) {
    assert.equal(labelsOf(ds)[i], (i + seed) % 10);
    const px = pixelsOf(ds, i);
    // R plane first, then G, then B: channel c, row y, column x is byte c*1024 + 32y + x.
    for (const j of [0, 1, 1023, 1024, 2048 + 33, 3071]) assert.equal(px[j], (i + seed + 7 * j) & 255);
  }
}

test("CIFAR-10 binary: the extracted folder (and its parent) round-trips, train reads data_batch_1 first", async () => {
  const t0 = await loadDataset("cifar10", { root: cifarDir, split: "test" });
  checkCifar(t0, 0, 10000);
  assert.equal(t0.name, "cifar10/test");
  const t1 = await loadDataset("cifar10", { root: join(dir, "cifar"), split: "train", limit: 25 });
  checkCifar(t1, 3, 25);
  disposeDataset(t0);
  disposeDataset(t1);
});

test("CIFAR-10 binary: cifar-10-binary.tar.gz is read directly, as the archive or from its folder", async () => {
  const adir = join(dir, "cifar-archive");
  mkdirSync(adir);
  const archive = join(adir, "cifar-10-binary.tar.gz");
  const r = spawnSync("tar", ["czf", archive, "-C", join(dir, "cifar"), "cifar-10-batches-bin"]);
  assert.equal(r.status, 0, String(r.stderr));
  for (const where of [archive, adir]) {
    const ds = await loadDataset("cifar10", { root: where, split: "test", limit: 100 });
    checkCifar(ds, 0, 100);
    disposeDataset(ds);
  }
  // The tar reader itself: names and sizes.
  const { gunzipSync } = await import("node:zlib");
  const entries = readTar(gunzipSync(readFileSync(archive)));
  const bin = entries.find((e) => e.name.endsWith("test_batch.bin"));
  assert.equal(bin?.data.length, 10000 * RECORD);
});

test("CIFAR-10: a truncated batch, a missing root and a wrong root give one clear error", async () => {
  const bad = join(dir, "cifar-bad");
  mkdirSync(bad);
  writeFileSync(join(bad, "test_batch.bin"), cifarBatch(0).subarray(0, 5000));
  await assert.rejects(
    loadDataset("cifar10", { root: bad, split: "test" }),
    (e: Error) =>
      e.message.includes(join(bad, "test_batch.bin")) &&
      e.message.includes("expected 30730000 bytes (10000 records of 3073)") &&
      e.message.includes("cifar-10-binary.tar.gz"),
  );
  await assert.rejects(loadDataset("cifar10", { root: join(dir, "nowhere"), split: "test" }), /nowhere: not found/);
  await assert.rejects(loadDataset("cifar10", { split: "test" }), /needs a root \(--root\).*cifar-10-binary\.tar\.gz/);
  const truncatedGz = join(dir, "cut.tar.gz");
  writeFileSync(truncatedGz, gzipSync(Buffer.alloc(100000)).subarray(0, 50));
  await assert.rejects(loadDataset("cifar10", { root: truncatedGz, split: "test" }), /cut\.tar\.gz: corrupt gzip/);
  await assert.rejects(loadDataset("cifar10", { root: cifarDir, split: "val" as "test" }), /unknown split 'val'/);
});

function idx(magic: number, dims: number[], data: Uint8Array): Buffer {
  const h = Buffer.alloc(4 + 4 * dims.length);
  h.writeUInt32BE(magic, 0);
  dims.forEach((d, i) => {
    h.writeUInt32BE(d, 4 + 4 * i);
  });
  return Buffer.concat([h, data]);
}

const idxImages = Uint8Array.from({ length: 5 * 28 * 28 }, (_, j) => 1 + (j % 250));
const idxLabels = Uint8Array.from([3, 1, 4, 1, 5]);
function writeIdx(folder: string, gz: boolean) {
  mkdirSync(folder, { recursive: true });
  const z = (b: Buffer) => (gz ? gzipSync(b) : b);
  const ext = gz ? ".gz" : "";
  writeFileSync(join(folder, `t10k-images-idx3-ubyte${ext}`), z(idx(0x803, [5, 28, 28], idxImages)));
  writeFileSync(join(folder, `t10k-labels-idx1-ubyte${ext}`), z(idx(0x801, [5], idxLabels)));
}

test("IDX files, gzipped and raw, round-trip; padded to 32 px with zeros and replicated to RGB", async () => {
  for (const gz of [true, false]) {
    const folder = join(dir, gz ? "idx-gz" : "idx-raw");
    writeIdx(folder, gz);
    const ds = await loadDataset("mnist", { root: folder, split: "test" });
    assert.deepEqual(ds.images.shape, [5, 3, 32, 32]);
    assert.deepEqual(labelsOf(ds), [3, 1, 4, 1, 5]);
    const img = ds.images.select(0, 2); // third image
    const c0 = img.select(0, 0);
    assert.deepEqual(img.select(0, 1).tolist(), c0.tolist());
    assert.deepEqual(img.select(0, 2).tolist(), c0.tolist());
    const rows = c0.tolist() as number[][];
    for (let y = 0; y < 32; y++)
      for (let x = 0; x < 32; x++) {
        const inside = y >= 2 && y < 30 && x >= 2 && x < 30;
        assert.equal(rows[y][x], inside ? idxImages[2 * 784 + (y - 2) * 28 + (x - 2)] : 0);
      }
    disposeDataset(ds);
    const plain = await loadDataset("mnist", { root: folder, split: "test", pad32: false, rgb: false, limit: 2 });
    assert.deepEqual(plain.images.shape, [2, 1, 28, 28]);
    assert.deepEqual(pixelsOf(plain, 1), Array.from(idxImages.subarray(784, 2 * 784)));
    disposeDataset(plain);
    // imageSize 28 asks for the images as they are (and wins over the usual pad32: true);
    // 32 pads them; any other size is refused, naming the sizes there are.
    const native = await loadDataset("mnist", { root: folder, split: "test", imageSize: 28, pad32: true, limit: 2 });
    assert.deepEqual(native.images.shape, [2, 3, 28, 28]);
    assert.deepEqual(pixelsOf(native, 1).slice(0, 784), Array.from(idxImages.subarray(784, 2 * 784)));
    disposeDataset(native);
    const padded = await loadDataset("mnist", { root: folder, split: "test", imageSize: 32, pad32: false, limit: 1 });
    assert.deepEqual(padded.images.shape, [1, 3, 32, 32]);
    disposeDataset(padded);
    await assert.rejects(
      loadDataset("mnist", { root: folder, split: "test", imageSize: 30 }),
      /mnist images are 28 px, or 32 px padded; imageSize 30 applies to image folders only/,
    );
  }
});

test("IDX: a bad magic, a truncated file and a missing folder name the path and the fix", async () => {
  const folder = join(dir, "idx-bad");
  writeIdx(folder, false);
  const images = join(folder, "t10k-images-idx3-ubyte");
  writeFileSync(images, idx(0x801, [5, 28, 28], idxImages));
  await assert.rejects(
    loadDataset("mnist", { root: folder, split: "test" }),
    (e: Error) => e.message.includes(images) && e.message.includes("bad IDX magic 0x00000801, expected 0x00000803"),
  );
  writeFileSync(images, idx(0x803, [5, 28, 28], idxImages).subarray(0, 1000));
  await assert.rejects(
    loadDataset("mnist", { root: folder, split: "test" }),
    /t10k-images-idx3-ubyte: 1000 bytes, expected 3936 bytes \(5 items of 784 after a 16-byte header\)/,
  );
  await assert.rejects(
    loadDataset("fashion-mnist", { root: join(dir, "no-fmnist"), split: "train" }),
    (e: Error) =>
      e.message.includes(join(dir, "no-fmnist", "train-images-idx3-ubyte.gz")) &&
      e.message.includes("apt-get install dataset-fashion-mnist"),
  );
});

const haveFashion = existsSync(FASHION_MNIST_ROOT);
test("the real Fashion-MNIST loads: 60,000 / 10,000 images of 3x32x32, labels 0..9", {
  skip: skipUnlessFashionMnist(),
}, async () => {
  for (const [split, n] of [
    ["train", 60000],
    ["test", 10000],
  ] as const) {
    const ds = await loadDataset("fashion-mnist", { split });
    assert.deepEqual(ds.images.shape, [n, 3, 32, 32]);
    assert.deepEqual(ds.classes, FASHION_MNIST_CLASSES);
    const counts = torch.tidy(() => ds.labels.toTypedArray() as BigInt64Array);
    const seen = new Set(Array.from(counts, Number));
    assert.deepEqual([...seen].sort(), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    // Fashion-MNIST is balanced: 6,000 / 1,000 per class.
    assert.equal(Array.from(counts).filter((v) => v === 0n).length, n / 10);
    // The padding is zero and the channels agree.
    torch.tidy(() => {
      assert.equal(ds.images.narrow(2, 0, 2).sum().item(), 0);
      assert.equal(ds.images.select(1, 0).ne(ds.images.select(1, 2)).sum().item(), 0);
    });
    disposeDataset(ds);
  }
});

test("image folder: class list order, shorter-side resize and centre crop, PNG and JPEG", async () => {
  const r = join(dir, "imagenet");
  const solid = (rgb: [number, number, number], w: number, h: number) =>
    sharp({ create: { width: w, height: h, channels: 3, background: { r: rgb[0], g: rgb[1], b: rgb[2] } } });
  for (const split of ["train", "val"])
    for (const wnid of ["n001", "n002", "n003"]) mkdirSync(join(r, split, wnid), { recursive: true });
  await solid([255, 0, 0], 30, 20)
    .png()
    .toFile(join(r, "train", "n001", "a.png"));
  await solid([0, 0, 255], 16, 16)
    .jpeg({ quality: 95 })
    .toFile(join(r, "train", "n002", "b.JPEG"));
  await solid([0, 255, 0], 12, 40)
    .png()
    .toFile(join(r, "train", "n002", "c.png"));
  writeFileSync(join(r, "train", "n002", "notes.txt"), "not an image");
  // 20x10: columns 0-4 red, 5-14 green, 15-19 blue; the centre 10x10 crop is all green.
  const stripes = Buffer.alloc(20 * 10 * 3);
  for (let y = 0; y < 10; y++)
    for (let x = 0; x < 20; x++)
      stripes.set(x < 5 ? [255, 0, 0] : x < 15 ? [0, 255, 0] : [0, 0, 255], (y * 20 + x) * 3);
  await sharp(stripes, { raw: { width: 20, height: 10, channels: 3 } })
    .png()
    .toFile(join(r, "val", "n003", "s.png"));
  // Class list order (n002 first) is the label order; n003 is not in it.
  const list = join(r, "ten.txt");
  writeFileSync(list, "# two classes\nn002 blue thing\nn001\n");
  const train = await loadDataset("imagefolder", { root: r, split: "train", imageSize: 8, classList: list });
  assert.deepEqual(train.images.shape, [3, 3, 8, 8]);
  assert.deepEqual(train.classes, ["blue thing", "n001"]);
  assert.deepEqual(labelsOf(train), [0, 0, 1]); // n002/b.JPEG, n002/c.png, n001/a.png
  const mean = (i: number) =>
    (torch.tidy(() => train.images.select(0, i).float().mean([1, 2]).tolist()) as number[]).map(Math.round);
  assert.ok(mean(0)[2] > 240 && mean(0)[0] < 15, `blue ${mean(0)}`);
  assert.deepEqual(mean(1), [0, 255, 0]);
  assert.deepEqual(mean(2), [255, 0, 0]);
  disposeDataset(train);
  // Without a list: every folder, sorted; test reads val/. `size` is imageSize's old name.
  const val = await loadDataset("imagefolder", { root: r, split: "test", size: 10 });
  assert.deepEqual(val.images.shape, [1, 3, 10, 10]);
  assert.deepEqual(val.classes, ["n001", "n002", "n003"]);
  assert.deepEqual(labelsOf(val), [2]);
  const crop = torch.tidy(() => val.images.select(0, 0).float());
  for (const [c, want] of [
    [0, 0],
    [1, 255],
    [2, 0],
  ])
    assert.ok(torch.tidy(() => crop.select(0, c).sub(want).abs().max().item()) <= 2, `channel ${c}`);
  disposeDataset(val);
  await assert.rejects(
    loadDataset("imagefolder", { root: r, split: "train", classList: join(r, "missing.txt") }),
    /missing\.txt: class-list file not found/,
  );
  writeFileSync(join(r, "train", "n001", "broken.png"), "not a png");
  await assert.rejects(
    loadDataset("imagefolder", { root: r, split: "train", classList: list }),
    /broken\.png: cannot decode image/,
  );
});

test("image folder at 224 px: shorter side to 256 then the centre 224 crop (the reference's test transform); 32 px as before", async () => {
  const r = join(dir, "imagenet224");
  for (const wnid of ["n001", "n002"]) mkdirSync(join(r, "val", wnid), { recursive: true });
  // 256x256 PNG: a 16 px red frame around green. Resize(256) keeps it, CenterCrop(224) cuts the frame away.
  const framed = Buffer.alloc(256 * 256 * 3);
  for (let y = 0; y < 256; y++)
    for (let x = 0; x < 256; x++) {
      const frame = y < 16 || y >= 240 || x < 16 || x >= 240;
      framed.set(frame ? [255, 0, 0] : [0, 255, 0], (y * 256 + x) * 3);
    }
  await sharp(framed, { raw: { width: 256, height: 256, channels: 3 } })
    .png()
    .toFile(join(r, "val", "n001", "framed.png"));
  // 280x560 JPEG (portrait): Resize(256) makes it 256x512, CenterCrop(224) keeps rows 144..367 and
  // columns 16..239 of that, i.e. x in [17.5, 262.5) and y in [157.5, 402.5) of the original:
  // blue there (with 3.5 px to spare for the filter), red around.
  const portrait = Buffer.alloc(280 * 560 * 3);
  for (let y = 0; y < 560; y++)
    for (let x = 0; x < 280; x++) {
      const inside = x >= 14 && x < 266 && y >= 154 && y < 406;
      portrait.set(inside ? [0, 0, 255] : [255, 0, 0], (y * 280 + x) * 3);
    }
  await sharp(portrait, { raw: { width: 280, height: 560, channels: 3 } })
    .jpeg({ quality: 95 })
    .toFile(join(r, "val", "n002", "portrait.jpg"));
  const big = await loadDataset("imagefolder", { root: r, split: "test", imageSize: 224 });
  assert.deepEqual(big.images.shape, [2, 3, 224, 224]);
  assert.deepEqual(labelsOf(big), [0, 1]);
  // The PNG is exact: all green.
  const green = torch.tidy(() => big.images.select(0, 0).float().mean([1, 2]).tolist() as number[]);
  assert.deepEqual(green, [0, 255, 0]);
  // The JPEG: blue everywhere, to JPEG accuracy, up to the crop's borders.
  for (const [y, x] of [
    [0, 0],
    [0, 223],
    [223, 0],
    [223, 223],
    [112, 112],
  ]) {
    const [cr, cg, cb] = rgbAt(big, 1, y, x);
    assert.ok(cr < 40 && cg < 40 && cb > 215, `(${y}, ${x}) is ${[cr, cg, cb]}`);
  }
  disposeDataset(big);
  // Without the 256 margin (resize 224: the whole shorter side) the red shows at the borders.
  const tight = await loadDataset("imagefolder", { root: r, split: "test", imageSize: 224, resize: 224, limit: 1 });
  assert.deepEqual(rgbAt(tight, 0, 0, 0), [255, 0, 0]);
  disposeDataset(tight);
  // 32 px (the default): the shorter side to 32 and the centre crop, no margin: the frame is 2 px.
  const small = await loadDataset("imagefolder", { root: r, split: "test" });
  assert.deepEqual(small.images.shape, [2, 3, 32, 32]);
  assert.deepEqual(rgbAt(small, 0, 0, 0), [255, 0, 0]);
  assert.deepEqual(rgbAt(small, 0, 16, 16), [0, 255, 0]);
  disposeDataset(small);
  // Memory: a split over maxBytes is refused before decoding, saying what fits.
  await assert.rejects(
    loadDataset("imagefolder", { root: r, split: "test", imageSize: 224, maxBytes: 200000 }),
    /2 images at 224 px need 0\.3 MB in memory as uint8, over the 0\.2 MB limit.*at most 1 images fit/,
  );
  // Other datasets have their own size.
  await assert.rejects(
    loadDataset("cifar10", { root: cifarDir, split: "test", imageSize: 224 }),
    /cifar10 images are 32 px; imageSize 224 applies to image folders only/,
  );
  const c32 = await loadDataset("cifar10", { root: cifarDir, split: "test", imageSize: 32, limit: 2 });
  assert.deepEqual(c32.images.shape, [2, 3, 32, 32]);
  disposeDataset(c32);
});

function fakeDataset(n: number, k: number, size = 32): Dataset {
  torch.manualSeed(1);
  return {
    images: torch.randint(0, 256, [n, 3, size, size], { dtype: "uint8" }),
    labels: torch.call("remainder.Scalar", torch.arange(0, n, 1), k),
    classes: Array.from({ length: k }, (_, i) => `c${i}`),
    name: "fake",
  };
}

test("marker colours: K distinct colours, pairwise far apart, never black, fixed", () => {
  for (const [k, minDist] of [
    [10, 140],
    [100, 50],
  ]) {
    const cs = markerColors(k);
    assert.equal(new Set(cs.map((c) => c.join())).size, k);
    for (let i = 0; i < k; i++) {
      assert.notDeepEqual(cs[i], [0, 0, 0]);
      for (let j = 0; j < i; j++)
        assert.ok(Math.hypot(cs[i][0] - cs[j][0], cs[i][1] - cs[j][1], cs[i][2] - cs[j][2]) >= minDist);
    }
    assert.deepEqual(markerColors(k), cs);
  }
  assert.equal(markerSide(32, 32), 4);
  assert.equal(markerSide(224, 224), 28);
  assert.equal(markerSide(28, 28), 4);
});

function checkMarkers(src: Dataset, out: Dataset, plan: ReturnType<typeof planMarkers>) {
  const n = src.labels.shape[0];
  const a = src.images.toTypedArray() as Uint8Array;
  const b = out.images.toTypedArray() as Uint8Array;
  for (let i = 0; i < n; i++)
    for (let c = 0; c < 3; c++)
      for (let y = 0; y < 32; y++)
        for (let x = 0; x < 32; x++) {
          const j = ((i * 3 + c) * 32 + y) * 32 + x;
          const inside = y >= plan.ys[i] && y < plan.ys[i] + 4 && x >= plan.xs[i] && x < plan.xs[i] + 4;
          assert.equal(b[j], inside ? plan.colors[3 * i + c] : a[j], `image ${i} channel ${c} (${y}, ${x})`);
        }
}

test("pixel markers: class colour, in place, nothing else changed, input untouched, seeded locations", () => {
  const ds = fakeDataset(40, 10);
  const before = ds.images.clone();
  const out = applyShortcut(ds, { kind: "pixel", seed: 5 });
  const plan = planMarkers(labelsOf(ds), 10, 32, 32, { kind: "pixel", seed: 5 });
  checkMarkers(ds, out, plan);
  const colors = markerColors(10);
  for (const [i, k] of labelsOf(ds).entries())
    assert.deepEqual(Array.from(plan.colors.subarray(3 * i, 3 * i + 3)), colors[k]);
  assert.equal(
    torch.tidy(() => ds.images.ne(before).sum().item()),
    0,
  );
  assert.deepEqual(labelsOf(out), labelsOf(ds));
  assert.equal(out.name, "fake+pixel");
  // Locations vary across images and depend on the seed only.
  assert.ok(new Set(Array.from(plan.ys, (y, i) => `${y},${plan.xs[i]}`)).size > 10);
  const again = planMarkers(labelsOf(ds), 10, 32, 32, { kind: "pixel", seed: 5 });
  assert.deepEqual(again.ys, plan.ys);
  assert.notDeepEqual(planMarkers(labelsOf(ds), 10, 32, 32, { kind: "pixel", seed: 6 }).ys, plan.ys);
  disposeDataset(out);
  disposeDataset(ds);
  before.dispose();
});

test("training markers are drawn anew every epoch, as the reference's loader draws a place per read; seeded by (seed, epoch)", () => {
  const ds = fakeDataset(40, 10);
  const draws = markerDraws(ds, { kind: "pixel", seed: 5 });
  const [e0, e1] = [draws(0), draws(1)];
  const places = (p: ReturnType<typeof planMarkers>) => Array.from(p.ys, (y, i) => `${y},${p.xs[i]}`);
  // Another epoch, other places; the same epoch, the same places; the colour is always the class's.
  const moved = places(e0).filter((p, i) => p !== places(e1)[i]).length;
  assert.ok(moved > 30, `${moved} of 40 markers moved between epochs`);
  assert.deepEqual(places(draws(1)), places(e1));
  assert.deepEqual(e0.colors, e1.colors);
  assert.deepEqual(e0.colors, planMarkers(labelsOf(ds), 10, 32, 32, { kind: "pixel", seed: 5 }).colors);
  // The loader paints epoch e's draw on epoch e's batches.
  const batchOf = (epoch: number) => {
    const [b] = [...batches(ds, { batchSize: 40, epoch, markers: draws })];
    const x = b.x.clone();
    torch.dispose(b);
    return x;
  };
  const [x0, x1] = [batchOf(0), batchOf(1)];
  const want0 = applyShortcut(ds, { kind: "pixel", seed: 5, draw: 0 });
  assert.equal(
    torch.tidy(() => x0.ne(want0.images).sum().item()),
    0,
  );
  assert.ok(torch.tidy(() => x0.ne(x1).sum().item()) > 0);
  torch.dispose([x0, x1]);
  disposeDataset(want0);
  disposeDataset(ds);
});

test("pixel-loc markers sit at one fixed place per class; rand colours vary; rolled plans take class c-1's marker", () => {
  const ds = fakeDataset(30, 10);
  const labels = labelsOf(ds);
  const loc = planMarkers(labels, 10, 32, 32, { kind: "pixel-loc" });
  const out = applyShortcut(ds, { kind: "pixel-loc" });
  checkMarkers(ds, out, loc);
  const places = new Set<string>();
  labels.forEach((k, i) => {
    assert.deepEqual([loc.ys[i], loc.xs[i]], classLocation(k, 10, 32, 32));
    places.add(`${loc.ys[i]},${loc.xs[i]}`);
  });
  assert.equal(places.size, 10);
  const colors = markerColors(10);
  const prev = (k: number) => (k + 9) % 10;
  // pixel: the same seeded locations, the previous class's colour.
  const plain = planMarkers(labels, 10, 32, 32, { kind: "pixel", seed: 2 });
  const rolled = planMarkers(labels, 10, 32, 32, { kind: "pixel", seed: 2, rolled: true });
  assert.deepEqual(rolled.ys, plain.ys);
  assert.deepEqual(rolled.xs, plain.xs);
  for (const [i, k] of labels.entries())
    assert.deepEqual(Array.from(rolled.colors.subarray(3 * i, 3 * i + 3)), colors[prev(k)]);
  // pixel-loc: the previous class's location and colour.
  const rolledLoc = planMarkers(labels, 10, 32, 32, { kind: "pixel-loc", rolled: true });
  for (const [i, k] of labels.entries()) {
    assert.deepEqual([rolledLoc.ys[i], rolledLoc.xs[i]], classLocation(prev(k), 10, 32, 32));
    assert.deepEqual(Array.from(rolledLoc.colors.subarray(3 * i, 3 * i + 3)), colors[prev(k)]);
  }
  const rolledSet = applyShortcut(ds, { kind: "pixel-loc", rolled: true });
  checkMarkers(ds, rolledSet, rolledLoc);
  assert.equal(rolledSet.name, "fake+pixel-loc-rolled");
  const rand = planMarkers(labels, 10, 32, 32, { kind: "rand", seed: 2 });
  const randColors = new Set(Array.from({ length: 30 }, (_, i) => rand.colors.subarray(3 * i, 3 * i + 3).join()));
  assert.ok(randColors.size >= 28, `rand colours ${randColors.size}`);
  const sameClass = labels.flatMap((k, i) => (k === 0 ? [rand.colors.subarray(3 * i, 3 * i + 3).join()] : []));
  assert.ok(new Set(sameClass).size > 1);
  assert.throws(
    () => planMarkers(labels, 10, 32, 32, { kind: "rand", rolled: true }),
    /rand markers have none to roll/,
  );
  for (const d of [ds, out, rolledSet]) disposeDataset(d);
});

/** Image i's pixel (y, x) as [r, g, b]. */
function rgbAt(ds: Dataset | torch.Tensor, i: number, y: number, x: number): number[] {
  const t = "images" in ds ? ds.images : ds;
  return torch.tidy(() => Array.from(t.select(0, i).select(2, x).select(1, y).toTypedArray() as Uint8Array));
}

/** The [y, x] of every pixel of image i where a and b differ in any channel. */
function changedPixels(a: Dataset, b: Dataset, i: number): string[] {
  const mask = torch.tidy(() => a.images.select(0, i).ne(b.images.select(0, i)).sum(0).toTypedArray() as BigInt64Array);
  const [, , , w] = a.images.shape;
  const out: string[] = [];
  mask.forEach((v, j) => {
    if (v) out.push(`${Math.floor(j / w)},${j % w}`);
  });
  return out;
}

test("rolled Pixel+Loc image of class c: the marker sits at class c-1's place in class c-1's colour (pixels)", () => {
  // Black images, so every painted pixel shows and nothing else changes.
  const ds: Dataset = {
    images: torch.zeros([10, 3, 32, 32], { dtype: "uint8" }),
    labels: torch.arange(0, 10, 1),
    classes: Array.from({ length: 10 }, (_, i) => `c${i}`),
    name: "black",
  };
  const rolled = applyShortcut(ds, { kind: "pixel-loc", rolled: true });
  const colors = markerColors(10);
  for (let c = 0; c < 10; c++) {
    const p = (c + 9) % 10;
    const [y0, x0] = classLocation(p, 10, 32, 32);
    const want: string[] = [];
    for (let y = y0; y < y0 + 4; y++) for (let x = x0; x < x0 + 4; x++) want.push(`${y},${x}`);
    assert.deepEqual(changedPixels(ds, rolled, c), want, `class ${c}`);
    for (const [y, x] of [
      [y0, x0],
      [y0 + 3, x0 + 3],
    ])
      assert.deepEqual(rgbAt(rolled, c, y, x), colors[p], `class ${c} at (${y}, ${x})`);
    // Class c's own place is empty (10 classes at 32 px never overlap).
    const [oy, ox] = classLocation(c, 10, 32, 32);
    assert.deepEqual(rgbAt(rolled, c, oy, ox), [0, 0, 0]);
  }
  disposeDataset(rolled);
  disposeDataset(ds);
});

test("a rolled pixel image keeps its seeded random place and takes class c-1's colour (pixels)", () => {
  const ds: Dataset = {
    images: torch.zeros([40, 3, 32, 32], { dtype: "uint8" }),
    labels: torch.call("remainder.Scalar", torch.arange(0, 40, 1), 10),
    classes: Array.from({ length: 10 }, (_, i) => `c${i}`),
    name: "black",
  };
  const marked = applyShortcut(ds, { kind: "pixel", seed: 3 });
  const rolled = applyShortcut(ds, { kind: "pixel", seed: 3, rolled: true });
  const colors = markerColors(10);
  for (const [i, c] of labelsOf(ds).entries()) {
    const place = changedPixels(ds, marked, i);
    assert.equal(place.length, 16);
    assert.deepEqual(changedPixels(ds, rolled, i), place, `image ${i}`);
    const [y, x] = place[0].split(",").map(Number);
    assert.deepEqual(rgbAt(marked, i, y, x), colors[c]);
    assert.deepEqual(rgbAt(rolled, i, y, x), colors[(c + 9) % 10]);
  }
  for (const d of [ds, marked, rolled]) disposeDataset(d);
});

/**
 * Checks that every image of a marked batch holds the whole side x side square of its plan's
 * colour at its plan's place, inside the image, and equals the unmarked batch elsewhere.
 */
function checkBatchMarkers(marked: torch.Tensor, clean: torch.Tensor, plan: MarkerPlan, indices: Int32Array) {
  const [b, , h, w] = marked.shape;
  const m = marked.toTypedArray() as Uint8Array;
  const c = clean.toTypedArray() as Uint8Array;
  for (let i = 0; i < b; i++) {
    const j = indices[i];
    const [y0, x0, side] = [plan.ys[j], plan.xs[j], plan.side];
    assert.ok(y0 >= 0 && x0 >= 0 && y0 + side <= h && x0 + side <= w, `image ${j}: marker inside the image`);
    for (let ch = 0; ch < 3; ch++)
      for (let y = 0; y < h; y++)
        for (let x = 0; x < w; x++) {
          const k = ((i * 3 + ch) * h + y) * w + x;
          const inside = y >= y0 && y < y0 + side && x >= x0 && x < x0 + side;
          if (inside) assert.equal(m[k], plan.colors[3 * j + ch], `image ${j} channel ${ch} (${y}, ${x}): marker`);
          else if (m[k] !== c[k]) assert.fail(`image ${j} channel ${ch} (${y}, ${x}): changed outside the marker`);
        }
  }
}

test("augmented batches with markers: each image has its whole, unmirrored class-colour square; the image under it was cropped and flipped", () => {
  const ds = fakeDataset(48, 10);
  const colors = markerColors(10);
  for (const kind of ["pixel", "pixel-loc"] as const) {
    const plan = planDatasetMarkers(ds, { kind, seed: 4 });
    const opts = { batchSize: 16, shuffle: true, seed: 9, epoch: 2, augment: { padding: 4, flip: true } };
    const clean = [...batches(ds, opts)];
    const marked = [...batches(ds, { ...opts, markers: plan })];
    assert.equal(marked.length, 3);
    let moved = 0;
    for (const [bi, mb] of marked.entries()) {
      const cb = clean[bi];
      assert.deepEqual(mb.indices, cb.indices);
      assert.equal(mb.x.dtype, "uint8");
      checkBatchMarkers(mb.x, cb.x, plan, mb.indices);
      for (const [i, j] of mb.indices.entries()) {
        assert.deepEqual(Array.from(plan.colors.subarray(3 * j, 3 * j + 3)), colors[j % 10]);
        // The augmentation happened: the unmarked image is not the stored one.
        if (torch.tidy(() => cb.x.select(0, i).ne(ds.images.select(0, j)).any().item())) moved++;
      }
    }
    assert.ok(moved >= 40, `${moved} of 48 images cropped or flipped`);
    torch.dispose([clean, marked]);
  }
  // Same order of operations on the device path: normalised batches are the marked uint8 ones, normalised.
  const plan = planDatasetMarkers(ds, { kind: "pixel-loc" });
  const base = { batchSize: 48, seed: 1, augment: { padding: 4 }, markers: plan };
  const [u8] = [...batches(ds, base)];
  const [f32] = [...batches(ds, { ...base, normalization: CIFAR10_NORMALIZATION })];
  const want = normalize(u8.x, CIFAR10_NORMALIZATION);
  assert.ok(torch.tidy(() => f32.x.sub(want).abs().max().item()) < 1e-6);
  assert.throws(
    () => [...batches(ds, { batchSize: 8, markers: planMarkers([0, 1], 10, 32, 32, { kind: "pixel" }) })],
    /plan for 2 images, dataset has 48/,
  );
  torch.dispose([u8, f32, want]);
  disposeDataset(ds);
});

test("random resized crop at 224 px: seeded boxes inside the image, identity box unchanged, flips mirror; markers stay whole", () => {
  const rng = () => new Rng(5, 1);
  const p = drawResizedCrop(200, 224, 224, rng());
  assert.deepEqual(drawResizedCrop(200, 224, 224, rng()), p);
  let flips = 0;
  for (let i = 0; i < 200; i++) {
    const [top, left, h, w] = p.boxes.subarray(4 * i, 4 * i + 4);
    assert.ok(top >= 0 && left >= 0 && h >= 1 && w >= 1 && top + h <= 224 && left + w <= 224);
    const area = (h * w) / (224 * 224);
    assert.ok(area >= 0.07 && area <= 1.01, `area share ${area}`);
    flips += p.flips[i];
  }
  assert.ok(flips > 70 && flips < 130, `${flips} flips`);
  const ds = fakeDataset(4, 4, 224);
  const whole = Int32Array.from([0, 0, 224, 224, 0, 0, 224, 224, 0, 0, 224, 224, 0, 0, 224, 224]);
  const same = resizedCropFlip(ds.images, { boxes: whole, flips: Uint8Array.from([0, 1, 0, 0]) });
  assert.equal(
    torch.tidy(() => same.select(0, 0).ne(ds.images.select(0, 0)).sum().item()),
    0,
  );
  const mirrored = cropFlip(ds.images.narrow(0, 1, 1), {
    padding: 0,
    offsets: new Int32Array(2),
    flips: Uint8Array.from([1]),
  });
  assert.equal(
    torch.tidy(() => same.narrow(0, 1, 1).ne(mirrored).sum().item()),
    0,
  );
  // A box of a quarter of the image, upsampled x2: a constant image stays constant.
  const flat = torch.full([1, 3, 224, 224], 77, { dtype: "uint8" });
  const up = resizedCropFlip(flat, { boxes: Int32Array.from([10, 20, 112, 112]), flips: new Uint8Array(1) });
  assert.equal(
    torch.tidy(() => up.ne(77).sum().item()),
    0,
  );
  // Through the loader with the method's 224 px augmentation and Pixel+Loc markers (28 px squares).
  assert.deepEqual(standardAugment(224), { resizedCrop: true, flip: true });
  assert.deepEqual(standardAugment(32), { padding: 4, flip: true });
  const plan = planDatasetMarkers(ds, { kind: "pixel-loc" });
  assert.equal(plan.side, 28);
  const opts = { batchSize: 4, seed: 2, augment: standardAugment(224) };
  const [clean] = [...batches(ds, opts)];
  const [marked] = [...batches(ds, { ...opts, markers: plan })];
  checkBatchMarkers(marked.x, clean.x, plan, marked.indices);
  for (let i = 0; i < 4; i++) assert.ok(torch.tidy(() => clean.x.select(0, i).ne(ds.images.select(0, i)).any().item()));
  torch.dispose([same, mirrored, flat, up, clean, marked]);
  disposeDataset(ds);
});

test("transforms: flip reverses columns, crop with pad 4 is a shifted window with zeros, normalise", () => {
  const x = (torch.call("remainder.Scalar", torch.arange(0, 2 * 3 * 6 * 6, 1), 200) as torch.Tensor)
    .add(1)
    .to("uint8")
    .reshape(2, 3, 6, 6);
  const rows = x.tolist() as number[][][][];
  // Offset (4, 4) is the centre: no shift. Image 1 flipped.
  const centre = cropFlip(x, { padding: 4, offsets: Int32Array.from([4, 4, 4, 4]), flips: Uint8Array.from([0, 1]) });
  const c = centre.tolist() as number[][][][];
  assert.deepEqual(c[0], rows[0]);
  assert.deepEqual(
    c[1],
    rows[1].map((ch) => ch.map((r) => [...r].reverse())),
  );
  // Offset (0, 1): the window starts 4 rows above and 3 columns left of the image.
  const shifted = cropFlip(x, { padding: 4, offsets: Int32Array.from([0, 1, 8, 8]), flips: Uint8Array.from([0, 0]) });
  const s = shifted.tolist() as number[][][][];
  for (let ch = 0; ch < 3; ch++)
    for (let y = 0; y < 6; y++)
      for (let q = 0; q < 6; q++) {
        const [sy, sx] = [y - 4, q - 3];
        assert.equal(s[0][ch][y][q], sy >= 0 && sx >= 0 ? rows[0][ch][sy][sx] : 0);
        const [ty, tx] = [y + 4, q + 4];
        assert.equal(s[1][ch][y][q], ty < 6 && tx < 6 ? rows[1][ch][ty][tx] : 0);
      }
  const norm = normalize(x, CIFAR10_NORMALIZATION);
  assert.equal(norm.dtype, "float32");
  for (const [i, ch, y, q] of [
    [0, 0, 0, 0],
    [1, 2, 5, 3],
    [0, 1, 2, 4],
  ]) {
    const want = (rows[i][ch][y][q] / 255 - CIFAR10_NORMALIZATION.mean[ch]) / CIFAR10_NORMALIZATION.std[ch];
    assert.ok(Math.abs(norm.select(0, i).select(0, ch).select(0, y).select(0, q).item() - want) < 1e-5);
  }
  const { min, max } = validRange(CIFAR10_NORMALIZATION);
  const full = normalize(
    torch.tensor(new Uint8Array([0, 0, 0, 255, 255, 255]), { shape: [2, 3, 1, 1] }),
    CIFAR10_NORMALIZATION,
  );
  assert.ok(torch.tidy(() => full.select(0, 0).sub(min.select(0, 0)).abs().max().item()) < 1e-5);
  assert.ok(torch.tidy(() => full.select(0, 1).sub(max.select(0, 0)).abs().max().item()) < 1e-5);
  torch.dispose([x, centre, shifted, norm, min, max, full]);
});

test("seeded loading: shuffling repeats with the seed, differs with another seed or epoch; every image once", () => {
  const a = epochOrder(1000, { shuffle: true, seed: 7 });
  assert.deepEqual(epochOrder(1000, { shuffle: true, seed: 7 }), a);
  assert.notDeepEqual(epochOrder(1000, { shuffle: true, seed: 8 }), a);
  assert.notDeepEqual(epochOrder(1000, { shuffle: true, seed: 7, epoch: 1 }), a);
  assert.deepEqual(
    [...a].sort((p, q) => p - q),
    Array.from({ length: 1000 }, (_, i) => i),
  );
  const ds = fakeDataset(50, 10);
  // libtorch's generator state must not matter.
  const run = (seedTorch: number) => {
    torch.manualSeed(seedTorch);
    const seen: number[] = [];
    const xs: number[] = [];
    for (const b of batches(ds, {
      batchSize: 16,
      shuffle: true,
      seed: 3,
      augment: { padding: 4 },
      normalization: CIFAR10_NORMALIZATION,
    })) {
      assert.deepEqual(b.x.shape.slice(1), [3, 32, 32]);
      assert.equal(b.x.dtype, "float32");
      assert.deepEqual(
        Array.from(b.y.toTypedArray() as BigInt64Array, Number),
        Array.from(b.indices, (i) => i % 10),
      );
      seen.push(...b.indices);
      xs.push(b.x.sum().item());
      torch.dispose(b);
    }
    return { seen, xs };
  };
  const r1 = run(0);
  const r2 = run(99);
  assert.deepEqual(r1, r2);
  assert.equal(r1.xs.length, 4);
  assert.deepEqual(
    [...r1.seen].sort((p, q) => p - q),
    Array.from({ length: 50 }, (_, i) => i),
  );
  const dropped = [...batches(ds, { batchSize: 16, dropLast: true })];
  assert.equal(dropped.length, 3);
  assert.equal(dropped[0].x.dtype, "uint8");
  torch.dispose(dropped);
  const { train, val } = holdOut(ds, 10, 4);
  assert.equal(val.labels.shape[0], 10);
  assert.equal(train.labels.shape[0], 40);
  const again = holdOut(ds, 10, 4);
  assert.deepEqual(labelsOf(again.val), labelsOf(val));
  assert.deepEqual(pixelsOf(again.val, 3), pixelsOf(val, 3));
  for (const d of [ds, train, val, again.train, again.val]) disposeDataset(d);
});

test("stitchlab data preview writes a PNG grid with markers", async () => {
  const out = join(dir, "g.png");
  const args = haveFashion
    ? ["data", "preview", "fashion-mnist", "--shortcut", "pixel", "--out", out]
    : ["data", "preview", "cifar10", "--root", cifarDir, "--shortcut", "pixel", "--out", out];
  const r = runCli(args, { cwd: root });
  assert.equal(r.status, 0, r.stderr);
  const png = readFileSync(out);
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  const meta = await sharp(png).metadata();
  // 64 images of 32 px upscaled x4 in an 8x8 grid with 2 px gaps.
  assert.equal(meta.width, 8 * 128 + 9 * 2);
  assert.equal(meta.height, 8 * 128 + 9 * 2);
  // Decoded, every pixel is what it should be: in image i's cell, its marker square (the plan's
  // place for it, scaled x4) in its class colour, the image itself around it, grey in the gaps.
  const { data: grid, info } = await sharp(png).raw().toBuffer({ resolveWithObject: true });
  assert.equal(info.channels, 3);
  const ds = haveFashion
    ? await loadDataset("fashion-mnist", { split: "test", limit: 64 })
    : await loadDataset("cifar10", { split: "test", limit: 64, root: cifarDir });
  const labels = labelsOf(ds);
  const plan = planMarkers(labels, ds.classes.length, 32, 32, { kind: "pixel", seed: 0 });
  const colours = markerColors(ds.classes.length);
  const images = ds.images.contiguous().toTypedArray() as Uint8Array;
  disposeDataset(ds);
  const [W, cell, pad] = [info.width, 128, 2];
  let markerPixels = 0;
  let wrong = 0;
  for (let i = 0; i < 64; i++) {
    assert.deepEqual([...plan.colors.subarray(3 * i, 3 * i + 3)], colours[labels[i]], `image ${i}: its class colour`);
    const [ox, oy] = [pad + (i % 8) * (cell + pad), pad + Math.floor(i / 8) * (cell + pad)];
    for (let y = 0; y < cell; y++)
      for (let x = 0; x < cell; x++) {
        const [sy, sx] = [Math.floor(y / 4), Math.floor(x / 4)];
        const inMarker =
          sy >= plan.ys[i] && sy < plan.ys[i] + plan.side && sx >= plan.xs[i] && sx < plan.xs[i] + plan.side;
        markerPixels += Number(inMarker);
        for (let c = 0; c < 3; c++) {
          const want = inMarker ? colours[labels[i]][c] : images[((i * 3 + c) * 32 + sy) * 32 + sx];
          if (grid[((oy + y) * W + ox + x) * 3 + c] !== want) wrong++;
        }
      }
  }
  assert.equal(markerPixels, 64 * (4 * 4) * 16, "a 4x4 marker in every image, 16 output pixels per image pixel");
  assert.equal(wrong, 0, "pixel values that differ from the images with their markers painted where planned");
  assert.equal(grid[(1 * W + 1) * 3], 128, "grey between images");
  assert.ok(new Set(Array.from(plan.xs)).size > 1, "pixel markers sit at random places");
  const bad = runCli(["data", "preview", "cifar10", "--root", join(dir, "x"), "--out", out], { cwd: root });
  assert.equal(bad.status, 1);
  assert.match(bad.stderr, /^stitchlab: .*x: not found\. Download the binary version/);
});

test("image folder: limit draws its images at random (fixed seed) from every class, kept in class order", async () => {
  const r = join(dir, "limited");
  for (const [k, wnid] of ["n001", "n002"].entries()) {
    mkdirSync(join(r, "train", wnid), { recursive: true });
    for (let i = 0; i < 4; i++)
      await sharp({ create: { width: 8, height: 8, channels: 3, background: { r: 200 * k, g: 50 * i, b: 0 } } })
        .png()
        .toFile(join(r, "train", wnid, `${i}.png`));
  }
  const load = async () => {
    const d = await loadDataset("imagefolder", { root: r, split: "train", imageSize: 8, limit: 4 });
    const labels = labelsOf(d);
    disposeDataset(d);
    return labels;
  };
  const labels = await load();
  // The first 4 in class order would all be n001; the draw reaches n002 and keeps class order.
  assert.equal(labels.length, 4);
  assert.ok(labels.includes(1), `labels ${labels}`);
  assert.deepEqual(
    labels,
    [...labels].sort((a, b) => a - b),
  );
  assert.deepEqual(await load(), labels, "the same draw every time");
});

test("marker strength: scale k multiplies the cell, so at 32 px scale 2 paints 8x8 px squares that fit, pixel-loc included", () => {
  const ds = fakeDataset(40, 10);
  assert.equal(markerCell(32, 32), 1);
  assert.equal(markerCell(32, 32, 2), 2);
  assert.equal(markerCell(224, 224, 2), 14);
  assert.throws(() => markerCell(32, 32, 0), /marker scale must be a positive integer, got 0/);
  for (const kind of ["pixel", "pixel-loc"] as const) {
    const plan = planMarkers(labelsOf(ds), 10, 32, 32, { kind, seed: 3, scale: 2 });
    assert.equal(plan.side, 8);
    for (let i = 0; i < 40; i++) assert.ok(plan.ys[i] + 8 <= 32 && plan.xs[i] + 8 <= 32, `${kind} marker ${i} fits`);
    // Painted: each image differs from its clean self in at most the 8x8 square (64 pixels x 3 channels).
    const out = applyShortcut(ds, { kind, seed: 3, scale: 2 });
    const changed = torch.tidy(() => out.images.ne(ds.images).sum([1, 2, 3]).max().item());
    assert.ok(changed > 16 * 3 && changed <= 64 * 3, `${kind}: ${changed} values changed`);
    disposeDataset(out);
  }
  disposeDataset(ds);
});
