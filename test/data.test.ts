// The data layer: readers on files the test writes itself (CIFAR-10 binary as folder and
// .tar.gz, IDX gzipped and raw, an image folder), their errors, the real Fashion-MNIST when
// installed, shortcut markers, transforms, seeded loading, and the preview command.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
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
  epochOrder,
  FASHION_MNIST_CLASSES,
  FASHION_MNIST_ROOT,
  holdOut,
  loadDataset,
  markerColors,
  markerSide,
  normalize,
  planMarkers,
  readTar,
  validRange,
} from "../data/index.js";
import * as torch from "../torch/index.js";
import { runCli } from "./helpers/cli.js";

const root = join(import.meta.dirname, "..");
const dir = mkdtempSync(join(tmpdir(), "stitchlab-data-"));

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
  skip: !haveFashion && !process.env.CI ? `${FASHION_MNIST_ROOT} not installed` : false,
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
  const train = await loadDataset("imagefolder", { root: r, split: "train", size: 8, classList: list });
  assert.deepEqual(train.images.shape, [3, 3, 8, 8]);
  assert.deepEqual(train.classes, ["blue thing", "n001"]);
  assert.deepEqual(labelsOf(train), [0, 0, 1]); // n002/b.JPEG, n002/c.png, n001/a.png
  const mean = (i: number) =>
    (torch.tidy(() => train.images.select(0, i).float().mean([1, 2]).tolist()) as number[]).map(Math.round);
  assert.ok(mean(0)[2] > 240 && mean(0)[0] < 15, `blue ${mean(0)}`);
  assert.deepEqual(mean(1), [0, 255, 0]);
  assert.deepEqual(mean(2), [255, 0, 0]);
  disposeDataset(train);
  // Without a list: every folder, sorted; test reads val/.
  const val = await loadDataset("imagefolder", { root: r, split: "test", size: 10 });
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

test("pixel-loc markers sit at one fixed place per class; rand colours vary; rolled gives class k+1's colour", () => {
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
  for (const kind of ["pixel", "pixel-loc"] as const) {
    const plain = planMarkers(labels, 10, 32, 32, { kind, seed: 2 });
    const rolled = planMarkers(labels, 10, 32, 32, { kind, seed: 2, rolled: true });
    assert.deepEqual(rolled.ys, plain.ys);
    assert.deepEqual(rolled.xs, plain.xs);
    for (const [i, k] of labels.entries())
      assert.deepEqual(Array.from(rolled.colors.subarray(3 * i, 3 * i + 3)), colors[(k + 1) % 10]);
  }
  const rolledSet = applyShortcut(ds, { kind: "pixel-loc", rolled: true });
  checkMarkers(ds, rolledSet, planMarkers(labels, 10, 32, 32, { kind: "pixel-loc", rolled: true }));
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
  const bad = runCli(["data", "preview", "cifar10", "--root", join(dir, "x"), "--out", out], { cwd: root });
  assert.equal(bad.status, 1);
  assert.match(bad.stderr, /^stitchlab: .*x: not found\. Download the binary version/);
});
