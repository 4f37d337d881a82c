// Tensors to and from files: safetensors round trips for every dtype, atomic writes, and
// interchange with Python's PyTorch in both directions (torch.save / torch.load, safetensors).
// And io/ as a layer: its ground floor (io/files.ts: the version, atomic writes) and report/
// load without libtorch.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { loadSafetensors, saveSafetensors } from "../io/safetensors.js";
import { torchLoad, torchSave } from "../io/torchsave.js";
import * as torch from "../torch/index.js";
import { tsxLoader } from "./helpers/cli.js";
import { PYTHON, skipUnlessPytorch } from "./helpers/pytorch.js";

const dir = mkdtempSync(join(tmpdir(), "stitchlab-io-"));
after(() => rmSync(dir, { recursive: true, force: true }));

function python(script: string): string {
  const r = spawnSync(PYTHON, ["-c", script], { encoding: "utf8", timeout: 60_000 });
  if (r.status !== 0) throw new Error(`python failed: ${r.stderr}`);
  return r.stdout;
}

function sample(): Record<string, torch.Tensor> {
  torch.manualSeed(3);
  return {
    "layer1.0.conv1.weight": torch.randn([4, 3, 3, 3]),
    "fc.bias": torch.randn([10], { dtype: "float64" }),
    "bn.num_batches_tracked": torch.tensor([7], { dtype: "int64", shape: [] }),
    idx: torch.tensor(new Int32Array([1, -2, 3])),
    img: torch.tensor(new Uint8Array([0, 127, 255, 9]), { shape: [2, 2] }),
    mask: torch.tensor([true, false, true]),
    small: torch.tensor(new Int8Array([-128, 127])),
    short: torch.tensor(new Int16Array([-300, 300])),
    half: torch.tensor([0.5, -2, 1024], { dtype: "float16" }),
    bf: torch.tensor([0.5, -2, 1024], { dtype: "bfloat16" }),
    empty: torch.zeros([0, 3]),
  };
}

function assertSameTensors(got: Record<string, torch.Tensor>, want: Record<string, torch.Tensor>): void {
  assert.deepEqual(Object.keys(got).sort(), Object.keys(want).sort());
  for (const [k, w] of Object.entries(want)) {
    const g = got[k];
    assert.equal(g.dtype, w.dtype, `${k} dtype`);
    assert.deepEqual(g.shape, w.shape, `${k} shape`);
    assert.deepEqual(g.tolist(), w.tolist(), `${k} values`);
  }
}

test("safetensors round-trips every dtype, shape and the metadata", () => {
  const path = join(dir, "all.safetensors");
  const t = sample();
  saveSafetensors(path, t, { arch: "resnet18", seed: "0" });
  const back = loadSafetensors(path);
  assertSameTensors(back.tensors, t);
  assert.deepEqual(back.metadata, { arch: "resnet18", seed: "0" });
  const n = Number(readFileSync(path).readBigUInt64LE(0));
  assert.equal(n % 8, 0, "data section starts 8-byte aligned");
  assert.deepEqual(
    readdirSync(dir).filter((f) => f.endsWith(".tmp")),
    [],
    "no temporary file left behind",
  );
});

test("a non-contiguous tensor is saved in logical (row-major) order", () => {
  const path = join(dir, "transposed.safetensors");
  const t = torch.arange(6).reshape(2, 3).t();
  saveSafetensors(path, { t });
  assert.deepEqual(loadSafetensors(path).tensors.t.tolist(), [
    [0, 3],
    [1, 4],
    [2, 5],
  ]);
});

/** A safetensors file by hand: the header as given (tensors of float32 [n] at the given offsets) over `dataBytes` bytes. */
function handMadeSafetensors(name: string, tensors: Record<string, [number, number]>, dataBytes: number): string {
  const header: Record<string, unknown> = {};
  for (const [k, [a, b]] of Object.entries(tensors))
    header[k] = { dtype: "F32", shape: [(b - a) / 4], data_offsets: [a, b] };
  const json = Buffer.from(JSON.stringify(header));
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.byteLength));
  const path = join(dir, name);
  writeFileSync(path, Buffer.concat([len, json, Buffer.alloc(dataBytes)]));
  return path;
}

test("a safetensors file whose tensors overlap, leave holes or do not cover the data is refused, naming the tensors", () => {
  // The format (safetensors' validate) wants the tensors' byte ranges, sorted, to tile the data
  // section exactly: each starts where the one before ends, the first at 0, the last at its end.
  const cases: [string, Record<string, [number, number]>, number, RegExp][] = [
    // fc.weight's bytes overlap conv1's (the hostile case of issue 25).
    [
      "overlap",
      { "conv1.weight": [0, 64], "fc.weight": [32, 96] },
      96,
      /'conv1\.weight' \[0, 64\].*'fc\.weight' \[32, 96\].*overlap/,
    ],
    ["same bytes", { a: [0, 16], b: [0, 16] }, 16, /'a' \[0, 16\].*'b' \[0, 16\].*overlap/],
    ["hole between", { a: [0, 16], b: [32, 48] }, 48, /bytes \[16, 32\).*between 'a' and 'b'.*no tensor/],
    ["hole before", { a: [8, 24] }, 24, /bytes \[0, 8\).*before 'a'.*no tensor/],
    ["tail", { a: [0, 16], b: [16, 32] }, 40, /bytes \[32, 40\).*after 'b'.*no tensor/],
  ];
  for (const [what, tensors, size, want] of cases) {
    const path = handMadeSafetensors(`${what.replace(/ /g, "-")}.safetensors`, tensors, size);
    assert.throws(
      () => loadSafetensors(path),
      (e: Error) => {
        assert.ok(e.message.includes(path), `${what}: ${e.message}`);
        assert.match(e.message, want, what);
        return true;
      },
      `${what} was loaded`,
    );
  }
  // Tiled exactly, in any order in the header, with an empty tensor between: loads.
  const ok = handMadeSafetensors("tiled.safetensors", { b: [16, 32], e: [16, 16], a: [0, 16] }, 32);
  const back = loadSafetensors(ok).tensors;
  assert.deepEqual(Object.keys(back).sort(), ["a", "b", "e"]);
  torch.dispose(back);
  // An entry that is not {dtype, shape, data_offsets} says which.
  const bad = join(dir, "no-offsets.safetensors");
  const json = Buffer.from(JSON.stringify({ w: { dtype: "F32", shape: [2] } }));
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.byteLength));
  writeFileSync(bad, Buffer.concat([len, json, Buffer.alloc(8)]));
  assert.throws(() => loadSafetensors(bad), /tensor 'w'.*data_offsets/);
});

/** Where a zip entry's data start in a torch.save archive, and its local header's offset (from the central directory). */
function zipEntryAt(buf: Buffer, name: string): { local: number; data: number; size: number } {
  const eocd = buf.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
  let p = buf.readUInt32LE(eocd + 16);
  for (let i = 0; i < buf.readUInt16LE(eocd + 10); i++) {
    const nameLen = buf.readUInt16LE(p + 28);
    const local = buf.readUInt32LE(p + 42);
    if (buf.toString("utf8", p + 46, p + 46 + nameLen) === name) {
      const data = local + 30 + buf.readUInt16LE(local + 26) + buf.readUInt16LE(local + 28);
      return { local, data, size: buf.readUInt32LE(p + 20) };
    }
    p += 46 + nameLen + buf.readUInt16LE(p + 30) + buf.readUInt16LE(p + 32);
  }
  throw new Error(`no zip entry ${name}`);
}

test("a torch.save file whose bytes disagree with their zip CRC-32 or stored sizes is refused, naming the file and the entry", () => {
  const path = join(dir, "crc.pt");
  torch.manualSeed(0);
  const w = torch.randn([64, 64]);
  const b = torch.randn([10]);
  torchSave(path, { "conv.weight": w, "fc.bias": b });
  torch.dispose([w, b]);
  const good = readFileSync(path);
  const damaged = (name: string, edit: (buf: Buffer) => void) => {
    const buf = Buffer.from(good);
    edit(buf);
    const out = join(dir, name);
    writeFileSync(out, buf);
    return out;
  };
  // Issue 25's file: 4 KB flipped in the middle of a weight's storage loaded as weights up to 7e4.
  const storage = zipEntryAt(good, "archive/data/0");
  assert.ok(storage.size >= 16384);
  const flipped = damaged("flipped.pt", (buf) => {
    for (let i = storage.data + 4096; i < storage.data + 8192; i++) buf[i] ^= 0x5a;
  });
  // One byte of the pickle: read before any storage.
  const pkl = zipEntryAt(good, "archive/data.pkl");
  const pickleByte = damaged("pickle-byte.pt", (buf) => {
    buf[pkl.data + Math.floor(pkl.size / 2)] ^= 1;
  });
  // The data descriptor after a storage (torch.save writes one: flag bit 3) gives another size.
  const small = zipEntryAt(good, "archive/data/1");
  assert.equal(good.readUInt16LE(small.local + 6) & 8, 8, "torch.save writes data descriptors");
  const descriptorSize = damaged("descriptor-size.pt", (buf) => {
    const d = small.data + small.size;
    const at = buf.readUInt32LE(d) === 0x08074b50 ? d + 4 : d;
    buf.writeUInt32LE(small.size + 4, at + 4); // the compressed size
  });
  const descriptorCrc = damaged("descriptor-crc.pt", (buf) => {
    const d = small.data + small.size;
    const at = buf.readUInt32LE(d) === 0x08074b50 ? d + 4 : d;
    buf.writeUInt32LE((buf.readUInt32LE(at) ^ 1) >>> 0, at);
  });
  const cases: [string, RegExp][] = [
    [
      flipped,
      /zip entry archive\/data\/0: its bytes have CRC-32 0x[0-9a-f]{8}, the central directory says 0x[0-9a-f]{8}/,
    ],
    [pickleByte, /zip entry archive\/data\.pkl: its bytes have CRC-32/],
    [descriptorSize, /zip entry archive\/data\/1: its data descriptor says 44 bytes, the central directory 40/],
    [descriptorCrc, /zip entry archive\/data\/1: its data descriptor says CRC-32 0x[0-9a-f]{8}, the central directory/],
  ];
  for (const [file, want] of cases)
    assert.throws(
      () => torch.dispose(torchLoad(file)),
      (e: Error) => {
        assert.ok(e.message.startsWith(`torch.load: cannot read ${file}: damaged zip archive: `), e.message);
        assert.match(e.message, want);
        return true;
      },
      `${file} was loaded`,
    );
  // The intact file still loads.
  torch.dispose(torchLoad(path));
});

const skip = skipUnlessPytorch();

test("torch.save / torch.load between stitchlab and Python's PyTorch, both directions", { skip }, () => {
  // Python -> stitchlab: a state dict as torch.save writes it (an OrderedDict of tensors).
  const fromPy = join(dir, "from_python.pt");
  python(`
import torch, collections
torch.manual_seed(0)
sd = collections.OrderedDict()
sd["conv.weight"] = torch.arange(24, dtype=torch.float32).reshape(2, 3, 2, 2) / 7
sd["conv.bias"] = torch.tensor([1.5, -2.0], dtype=torch.float64)
sd["bn.num_batches_tracked"] = torch.tensor(5)
sd["view"] = torch.arange(10.0)[2:8:2]
torch.save(sd, ${JSON.stringify(fromPy)})
`);
  const sd = torchLoad(fromPy) as Record<string, torch.Tensor>;
  assert.deepEqual(Object.keys(sd), ["conv.weight", "conv.bias", "bn.num_batches_tracked", "view"]);
  assert.deepEqual(sd["conv.weight"].shape, [2, 3, 2, 2]);
  assert.ok(Math.abs(sd["conv.weight"].sum().item() - 276 / 7) < 1e-4);
  assert.equal(sd["conv.bias"].dtype, "float64");
  assert.deepEqual(sd["conv.bias"].tolist(), [1.5, -2]);
  assert.equal(sd["bn.num_batches_tracked"].item(), 5);
  assert.deepEqual(sd.view.tolist(), [2, 4, 6]);

  // stitchlab -> Python: our torch.save is read by torch.load, and a safetensors file by hand.
  const toPy = join(dir, "to_python.pt");
  const st = join(dir, "to_python.safetensors");
  const ours = sample();
  torchSave(toPy, { state_dict: ours, epoch: 3, name: "resnet18" });
  saveSafetensors(st, ours);
  const out = python(`
import torch, json, struct, numpy as np
obj = torch.load(${JSON.stringify(toPy)})
sd = obj["state_dict"]
buf = open(${JSON.stringify(st)}, "rb").read()
n = struct.unpack("<Q", buf[:8])[0]
header = json.loads(buf[8:8 + n])
res = {"epoch": obj["epoch"], "name": obj["name"], "tensors": {}}
for k, v in sd.items():
    e = header[k]
    a, b = e["data_offsets"]
    raw = bytes(buf[8 + n + a:8 + n + b])
    same = raw == v.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes() if v.numel() else raw == b""
    res["tensors"][k] = {"dtype": str(v.dtype), "shape": list(v.shape), "sum": float(v.double().sum()), "st_same_bytes": same, "st_dtype": e["dtype"]}
print(json.dumps(res))
`);
  const res = JSON.parse(out);
  assert.equal(res.epoch, 3);
  assert.equal(res.name, "resnet18");
  const pyDtype: Record<string, string> = {
    float32: "torch.float32",
    float64: "torch.float64",
    float16: "torch.float16",
    bfloat16: "torch.bfloat16",
    int64: "torch.int64",
    int32: "torch.int32",
    int16: "torch.int16",
    int8: "torch.int8",
    uint8: "torch.uint8",
    bool: "torch.bool",
  };
  for (const [k, v] of Object.entries(ours)) {
    const r = res.tensors[k];
    assert.ok(r, `${k} reached Python`);
    assert.equal(r.dtype, pyDtype[v.dtype], `${k} dtype`);
    assert.deepEqual(r.shape, v.shape, `${k} shape`);
    assert.ok(Math.abs(r.sum - v.double().sum().item()) < 1e-6 * (1 + Math.abs(r.sum)), `${k} sum`);
    assert.equal(r.st_same_bytes, true, `${k}: safetensors bytes equal PyTorch's own bytes`);
  }
});

test("torch.load reads a real nn.Module checkpoint: nested dicts, tuples, parameters, other classes", { skip }, () => {
  const path = join(dir, "checkpoint.pt");
  python(`
import torch, argparse
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Linear(2, 2))
torch.save({"state_dict": m.state_dict(), "epoch": 3, "lr": 0.1, "big": 2**40, "neg": -7, "hist": [1.5, (2, "x")],
            "param": torch.nn.Parameter(torch.ones(2)), "args": argparse.Namespace(width=8), "flag": None},
           ${JSON.stringify(path)})
`);
  const ck = torchLoad(path) as Record<string, unknown>;
  const sd = ck.state_dict as Record<string, torch.Tensor>;
  assert.deepEqual(Object.keys(sd), [
    "0.weight",
    "0.bias",
    "1.weight",
    "1.bias",
    "1.running_mean",
    "1.running_var",
    "1.num_batches_tracked",
    "2.weight",
    "2.bias",
  ]);
  assert.deepEqual(sd["0.weight"].shape, [4, 3, 3, 3]);
  assert.equal(sd["1.num_batches_tracked"].dtype, "int64");
  assert.equal(ck.epoch, 3);
  assert.equal(ck.lr, 0.1);
  assert.equal(ck.big, 2 ** 40);
  assert.equal(ck.neg, -7);
  assert.deepEqual(ck.hist, [1.5, [2, "x"]]);
  assert.equal(ck.flag, null);
  const param = ck.param as torch.Tensor;
  assert.deepEqual(param.tolist(), [1, 1]);
  assert.equal(param.requiresGrad, true);
  assert.equal((ck.args as { __class__: string }).__class__, "argparse.Namespace");
});

test("report/, findings/ and io/files.ts (the version) load without libtorch and import nothing of torch/", {
  skip: !existsSync("/proc/self/maps") && "no /proc here",
}, () => {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const modules = join(dir, "modules.txt");
  // A resolve hook that lists every ES module the child loads (after tsx has mapped .js to .ts),
  // and the child itself: it imports the two and says what it mapped (the addon is a CommonJS
  // require, which /proc/self/maps sees).
  const hooks = join(dir, "list-modules.mjs");
  writeFileSync(
    hooks,
    [
      'import { appendFileSync } from "node:fs";',
      "export async function resolve(specifier, context, next) {",
      "  const r = await next(specifier, context);",
      '  appendFileSync(process.env.STITCHLAB_TEST_MODULES, r.url + "\\n");',
      "  return r;",
      "}",
    ].join("\n"),
  );
  const register = join(dir, "register.mjs");
  writeFileSync(
    register,
    `import { register } from "node:module";\nregister(${JSON.stringify(pathToFileURL(hooks).href)});\n`,
  );
  const child = join(dir, "load-report.mjs");
  writeFileSync(
    child,
    [
      'import { readFileSync } from "node:fs";',
      `const report = await import(${JSON.stringify(pathToFileURL(join(root, "report", "index.ts")).href)});`,
      `const files = await import(${JSON.stringify(pathToFileURL(join(root, "io", "files.ts")).href)});`,
      `await import(${JSON.stringify(pathToFileURL(join(root, "findings", "index.ts")).href)});`,
      'const maps = readFileSync("/proc/self/maps", "utf8");',
      "console.log(JSON.stringify({",
      "  version: files.stitchlabVersion,",
      "  writeReport: typeof report.writeReport,",
      '  addon: maps.includes("stitchlab.node"),',
      "  libtorch: /libtorch/.test(maps),",
      "}));",
    ].join("\n"),
  );
  const r = spawnSync(process.execPath, ["--import", tsxLoader, "--import", pathToFileURL(register).href, child], {
    encoding: "utf8",
    env: { ...process.env, STITCHLAB_TEST_MODULES: modules },
  });
  assert.equal(r.status, 0, r.stderr);
  const got = JSON.parse(r.stdout.trim().split("\n").at(-1) as string);
  assert.match(got.version, /^\d+\.\d+\.\d+/);
  assert.equal(got.writeReport, "function");
  assert.deepEqual({ addon: got.addon, libtorch: got.libtorch }, { addon: false, libtorch: false });
  const loaded = readFileSync(modules, "utf8").split("\n").filter(Boolean);
  assert.ok(
    loaded.some((u) => u.endsWith("/report/write.ts")) &&
      loaded.some((u) => u.endsWith("/io/files.ts")) &&
      loaded.some((u) => u.endsWith("/findings/verdict.ts")),
    "the hook saw the modules",
  );
  const torchModules = loaded.filter((u) => u.startsWith(pathToFileURL(join(root, "torch")).href));
  assert.deepEqual(torchModules, [], "modules of torch/ loaded by report/, findings/ or io/files.ts");
});
