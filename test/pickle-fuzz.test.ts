// Crafted and corrupt torch.save files: torchLoad returns or throws an Error that names the file,
// promptly, for every one of them (truncations, flipped bytes, inserted runs, hand-made
// malformed pickles and zips), and a pickled dict's "__proto__" key stays an ordinary key.
// A reader that loops forever cannot fail a test from inside the test process, so the files are
// loaded in a child process (this file again, in its loader mode) under a timeout and a heap cap.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import type { PyObject } from "../io/pickle.js";
import { torchLoad, torchSave } from "../io/torchsave.js";
import { readZip } from "../io/zip.js";
import * as torch from "../torch/index.js";
import { runTs } from "./helpers/cli.js";
import { PYTHON, pytorchUnavailable } from "./helpers/pytorch.js";

const LOADER_ENV = "STITCHLAB_PICKLE_FUZZ_DIR";

interface Outcome {
  name: string;
  ms: number;
  ok: boolean;
  isError?: boolean;
  message?: string;
}

/** Loader mode: torchLoad every file of a folder, one JSON line before and after each. */
function loadEach(dir: string): void {
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    // Written before the load, so that a hang names its file in the output the parent gets back.
    process.stdout.write(`${JSON.stringify({ start: name })}\n`);
    const t0 = performance.now();
    let out: Outcome;
    try {
      const v = torchLoad(path);
      out = { name, ms: performance.now() - t0, ok: true };
      torch.dispose(v);
    } catch (e) {
      out = {
        name,
        ms: performance.now() - t0,
        ok: false,
        isError: e instanceof Error,
        message: e instanceof Error ? e.message : String(e),
      };
    }
    process.stdout.write(`${JSON.stringify(out)}\n`);
  }
}

/** Loads every file of dir in a child process; fails with the file it was on if it did not finish. */
function loadInChild(dir: string, timeoutMs: number): Map<string, Outcome> {
  const r = runTs(fileURLToPath(import.meta.url), [], {
    // The heap cap turns a reader that grows without bound into a prompt crash, not a swapped machine.
    env: {
      ...process.env,
      [LOADER_ENV]: dir,
      NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ""} --max-old-space-size=1024`,
    },
    timeout: timeoutMs,
    maxBuffer: 64 * 1024 * 1024,
  });
  const outcomes = new Map<string, Outcome>();
  let last = "";
  for (const line of (r.stdout ?? "").split("\n")) {
    if (!line.startsWith("{")) continue;
    const o = JSON.parse(line) as Outcome & { start?: string };
    if (o.start !== undefined) last = o.start;
    else outcomes.set(o.name, o);
  }
  if (r.status !== 0 || r.signal) {
    const why = r.error?.message ?? `status ${r.status}, signal ${r.signal}`;
    const on = last && !outcomes.has(last) ? `while loading ${last}` : "outside any load";
    assert.fail(`the loader child did not finish (${why}) ${on}\n${(r.stderr ?? "").slice(-2000)}`);
  }
  return outcomes;
}

/** An Error from the reader itself, not one the runtime raised on a read it did not guard. */
const UNGUARDED =
  /ERR_[A-Z_]+|The value of "|Cannot read propert|Cannot set propert|is not a function|is not iterable|Maximum call stack|Invalid array length|Attempt to access memory|undefined/;

/**
 * A clean outcome: loaded, or refused with one torch.load error naming the file. A reader that
 * follows a damaged length or count into a loop or an allocation is caught by the child's heap cap
 * and its overall timeout (loadInChild), not by timing each file: a per-file clock bound failed on
 * a loaded machine (issue 51).
 */
function assertClean(o: Outcome, path: string): void {
  if (o.ok) return;
  assert.equal(o.isError, true, `${o.name}: threw a non-Error: ${o.message}`);
  assert.ok(o.message?.startsWith("torch.load: "), `${o.name}: ${o.message}`);
  assert.ok(o.message?.includes(path), `${o.name}: the message does not name the file: ${o.message}`);
  assert.doesNotMatch(o.message ?? "", UNGUARDED, `${o.name}: an unguarded read`);
}

// ---- building files by hand ----

function crc32(b: Uint8Array): number {
  let c = ~0;
  for (const x of b) {
    c ^= x;
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
  }
  return ~c >>> 0;
}

/** A zip of stored entries, as torch.save lays them out (without its alignment padding). */
function makeZip(entries: [string, Uint8Array][]): Buffer {
  const parts: Buffer[] = [];
  const central: Buffer[] = [];
  let offset = 0;
  for (const [name, data] of entries) {
    const n = Buffer.from(name);
    const crc = crc32(data);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(data.byteLength, 18);
    local.writeUInt32LE(data.byteLength, 22);
    local.writeUInt16LE(n.byteLength, 26);
    const c = Buffer.alloc(46);
    c.writeUInt32LE(0x02014b50, 0);
    c.writeUInt16LE(20, 4);
    c.writeUInt16LE(20, 6);
    c.writeUInt32LE(crc, 16);
    c.writeUInt32LE(data.byteLength, 20);
    c.writeUInt32LE(data.byteLength, 24);
    c.writeUInt16LE(n.byteLength, 28);
    c.writeUInt32LE(offset, 42);
    parts.push(local, n, Buffer.from(data));
    central.push(c, n);
    offset += 30 + n.byteLength + data.byteLength;
  }
  const cd = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(cd.byteLength, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...parts, cd, end]);
}

/** Pickle bytes: numbers are single bytes, strings raw latin1 text, buffers as they are. */
function pk(...parts: (number | string | Uint8Array)[]): Buffer {
  return Buffer.concat(
    parts.map((x) =>
      typeof x === "number" ? Buffer.from([x]) : typeof x === "string" ? Buffer.from(x, "latin1") : Buffer.from(x),
    ),
  );
}
/** SHORT_BINUNICODE */
const str = (s: string) => pk(0x8c, Buffer.byteLength(s), Buffer.from(s));
const u32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return b;
};
const PROTO2 = pk(0x80, 2);

/** A torch.save-like archive around a pickle (and storages, named by key). */
const archive = (pickle: Uint8Array, storages: [string, Uint8Array][] = []) =>
  makeZip([["archive/data.pkl", pickle], ...storages.map(([k, b]): [string, Uint8Array] => [`archive/data/${k}`, b])]);

/** The pickle of _rebuild_tensor_v2 over a float storage "0" of numel elements. */
function tensorPickle(numel: number, size: number[], stride: number[], offset = 0): Buffer {
  const tuple = (xs: number[]) => pk(0x28, ...xs.flatMap((x) => [0x4a, u32(x)]), 0x74);
  return pk(
    PROTO2,
    "ctorch._utils\n_rebuild_tensor_v2\n",
    0x28, // MARK: the arguments
    0x28, // MARK: the persistent id
    str("storage"),
    "ctorch\nFloatStorage\n",
    str("0"),
    str("cpu"),
    0x4a,
    u32(numel),
    0x74, // TUPLE
    0x51, // BINPERSID
    0x4a,
    u32(offset),
    tuple(size),
    tuple(stride),
    0x89, // NEWFALSE
    0x7d, // EMPTY_DICT: backward hooks
    0x74, // TUPLE
    0x52, // REDUCE
    0x2e,
  );
}

/** Deterministic pseudo-random numbers (a 32-bit linear congruential generator). */
function lcg(seed: number) {
  let s = seed >>> 0;
  const next = () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s;
  };
  return {
    next,
    below: (n: number) => next() % Math.max(1, n),
    bytes: (n: number) => Buffer.from(Array.from({ length: n }, () => next() >>> 24)),
  };
}

/** Entries of a stored archive in order, and the name of its data.pkl. */
function layout(buf: Buffer) {
  const entries = [...readZip(buf).values()].map((e): [string, Uint8Array] => [e.name, Buffer.from(e.data())]);
  const pklName = entries.find(([n]) => n.endsWith("data.pkl"))![0];
  return { entries, pklName };
}

/** Seeded variants of one valid archive: truncations, flips, inserted runs, at file and pickle level. */
function variants(name: string, buf: Buffer, seed: number): [string, Buffer][] {
  const rnd = lcg(seed);
  const { entries, pklName } = layout(buf);
  const pickle = entries.find(([n]) => n === pklName)![1];
  const rezip = (p: Uint8Array) => makeZip(entries.map(([n, d]): [string, Uint8Array] => [n, n === pklName ? p : d]));
  const flip = (b: Buffer, from: number, to: number, k: number) => {
    const c = Buffer.from(b);
    for (let i = 0; i < k; i++) c[from + rnd.below(to - from)] = rnd.next() >>> 24;
    return c;
  };
  const insert = (b: Uint8Array, at: number, run: Buffer) => Buffer.concat([b.subarray(0, at), run, b.subarray(at)]);
  const out: [string, Buffer][] = [];
  const add = (kind: string, b: Buffer) => out.push([`${name}-${kind}-${String(out.length).padStart(3, "0")}`, b]);
  add("intact", buf);
  // Truncated files: across the whole file, and densely near its end (the central directory).
  for (let i = 0; i < 20; i++) add("cut", buf.subarray(0, Math.floor((buf.byteLength * i) / 20)));
  for (let i = 1; i <= 20; i++) add("cut-tail", buf.subarray(0, buf.byteLength - i * 3));
  // A truncated pickle inside an intact zip: every reader of the byte stream meets the end.
  for (let i = 0; i < 30; i++) add("pkl-cut", rezip(pickle.subarray(0, Math.floor((pickle.byteLength * i) / 30))));
  // Flipped pickle bytes in a re-made zip, so that they reach the unpickler (in the file as it is,
  // the entry's CRC-32 refuses them first: the "flip" variants).
  for (let i = 0; i < 40; i++)
    add("pkl-flip", rezip(flip(Buffer.from(pickle), 0, pickle.byteLength, 1 + rnd.below(3))));
  for (let i = 0; i < 20; i++) add("flip", flip(buf, 0, buf.byteLength, 1 + rnd.below(4)));
  const tail = Math.max(0, buf.byteLength - 200);
  for (let i = 0; i < 20; i++) add("dir-flip", flip(buf, tail, buf.byteLength, 1 + rnd.below(2)));
  for (let i = 0; i < 15; i++) add("insert", insert(buf, rnd.below(buf.byteLength), rnd.bytes(1 + rnd.below(16))));
  for (let i = 0; i < 15; i++)
    add("pkl-insert", rezip(insert(pickle, rnd.below(pickle.byteLength), rnd.bytes(1 + rnd.below(8)))));
  return out;
}

if (process.env[LOADER_ENV]) {
  loadEach(process.env[LOADER_ENV]);
} else {
  const root = mkdtempSync(join(tmpdir(), "stitchlab-pickle-fuzz-"));
  after(() => rmSync(root, { recursive: true, force: true }));
  let folders = 0;
  /** A fresh folder holding the given files; returns the folder and the path of each file. */
  const folder = (files: [string, Uint8Array][]) => {
    const dir = join(root, `set${folders++}`);
    mkdirSync(dir);
    for (const [n, b] of files) writeFileSync(join(dir, n), b);
    return { dir, path: (n: string) => join(dir, n) };
  };

  test("a GLOBAL whose line has no newline (the 246-byte file) throws promptly", () => {
    const pickle = pk(PROTO2, "ctorch._utils", "x".repeat(100));
    const files: [string, Uint8Array][] = [
      ["no-newline.pt", archive(pickle)],
      ["no-second-newline.pt", archive(pk(PROTO2, "ctorch\nFloatStorage"))],
    ];
    assert.ok(Math.abs(files[0][1].byteLength - 246) < 30, `${files[0][1].byteLength} bytes`);
    const { dir, path } = folder(files);
    const got = loadInChild(dir, 60_000);
    for (const [n] of files) {
      const o = got.get(n)!;
      assertClean(o, path(n));
      assert.equal(o.ok, false);
      assert.match(o.message!, /pickle: truncated at byte \d+ while reading GLOBAL/, n);
    }
  });

  test("malformed pickles and zips give errors that say what is wrong, where", () => {
    const float16 = Buffer.alloc(16);
    const cases: [string, Uint8Array, RegExp][] = [
      ["binint.pt", archive(pk(PROTO2, 0x4a, 1, 2)), /truncated at byte 3 while reading BININT/],
      ["binint1.pt", archive(pk(PROTO2, 0x4b)), /truncated at byte 3 while reading BININT1/],
      ["binfloat.pt", archive(pk(PROTO2, 0x47, 1, 2, 3)), /truncated at byte 3 while reading BINFLOAT/],
      ["binunicode.pt", archive(pk(PROTO2, 0x58, u32(0x7fffffff), "abc")), /truncated .* BINUNICODE/],
      ["short-binbytes.pt", archive(pk(PROTO2, 0x43, 16, "ab")), /truncated .* SHORT_BINBYTES/],
      ["long1.pt", archive(pk(PROTO2, 0x8a, 200, 1, 2)), /truncated .* LONG1/],
      ["frame.pt", archive(pk(0x80, 4, 0x95, 0xff, 0, 0, 0, 0, 0, 0, 0, 0x4e, 0x2e)), /FRAME/],
      ["proto.pt", archive(pk(0x80, 9, 0x4e, 0x2e)), /protocol 9/],
      ["binget.pt", archive(pk(PROTO2, 0x68, 5, 0x2e)), /memo .*5/],
      ["long-binget.pt", archive(pk(PROTO2, 0x6a, u32(1 << 24), 0x2e)), /memo .*16777216/],
      ["underflow.pt", archive(pk(PROTO2, 0x61, 0x2e)), /stack underflow/],
      ["past-mark.pt", archive(pk(PROTO2, 0x5d, 0x28, 0x61, 0x2e)), /stack underflow/],
      ["no-stop.pt", archive(pk(PROTO2, 0x4e)), /without STOP/],
      ["empty-stop.pt", archive(pk(PROTO2, 0x2e)), /stack underflow/],
      ["setitem-list.pt", archive(pk(PROTO2, 0x5d, 0x4b, 1, 0x4b, 2, 0x73, 0x2e)), /SETITEM .*list/],
      ["append-dict.pt", archive(pk(PROTO2, 0x7d, 0x4b, 1, 0x61, 0x2e)), /APPEND .*dict/],
      ["odd-setitems.pt", archive(pk(PROTO2, 0x7d, 0x28, 0x4b, 1, 0x75, 0x2e)), /SETITEMS .*odd/],
      ["reduce-number.pt", archive(pk(PROTO2, 0x4b, 1, 0x29, 0x52, 0x2e)), /REDUCE .*not callable/],
      ["storage-size.pt", archive(tensorPickle(16, [4], [1]), [["0", float16]]), /storage 0\b.*64 bytes.*holds 16/],
      ["view-outside.pt", archive(tensorPickle(4, [5], [1]), [["0", float16]]), /outside its storage/],
      ["view-offset.pt", archive(tensorPickle(4, [2], [1], 3), [["0", float16]]), /outside its storage/],
      ["no-storage.pt", archive(tensorPickle(4, [4], [1])), /storage 0 is missing/],
    ];
    // Zips: one valid archive with one field made nonsense at a time.
    const good = archive(pk(PROTO2, 0x4e, 0x2e));
    const eocd = good.byteLength - 22;
    const cd = good.readUInt32LE(eocd + 16);
    const patched = (edit: (b: Buffer) => void) => {
      const b = Buffer.from(good);
      edit(b);
      return b;
    };
    const zero = Buffer.alloc(22);
    zero.writeUInt32LE(0x06054b50, 0);
    cases.push(
      // The central directory cut short, the end record kept.
      ["cd-cut.pt", Buffer.concat([good.subarray(0, eocd - 10), good.subarray(eocd)]), /central directory/],
      ["cd-offset.pt", patched((b) => b.writeUInt32LE(0xfffffff0, eocd + 16)), /central directory/],
      ["cd-count.pt", patched((b) => b.writeUInt16LE(0xffff, eocd + 10)), /central directory/],
      ["local-offset.pt", patched((b) => b.writeUInt32LE(0x7fffffff, cd + 42)), /archive\/data\.pkl/],
      ["entry-size.pt", patched((b) => b.writeUInt32LE(0x7fffffff, cd + 20)), /archive\/data\.pkl.*past/],
      ["name-length.pt", patched((b) => b.writeUInt16LE(0xffff, cd + 28)), /central directory/],
      ["comment.pt", patched((b) => b.writeUInt16LE(0xffff, eocd + 20)), /comment/],
      ["method.pt", patched((b) => b.writeUInt16LE(99, cd + 10)), /compression method 99/],
      ["empty-zip.pt", zero, /no entries/],
    );
    const { dir, path } = folder(cases.map(([n, b]) => [n, b]));
    const got = loadInChild(dir, 60_000);
    for (const [n, , want] of cases) {
      const o = got.get(n);
      assert.ok(o, `${n}: no outcome`);
      assertClean(o, path(n));
      assert.equal(o.ok, false, `${n} loaded`);
      assert.match(o.message!, want, n);
    }
  });

  test("a few hundred damaged checkpoints each load or throw a clear Error, each within seconds", (t) => {
    const seeds: [string, Buffer][] = [];
    // stitchlab's own writer always; Python's torch.save (protocols 2 and 4) when it is there.
    const ours = join(root, "ours.pt");
    torch.manualSeed(0);
    const w = torch.randn([3, 4]);
    const n = torch.tensor(new Int32Array([1, -2, 3]));
    torchSave(ours, { w, n, meta: { epoch: 3, name: "x", hist: [1.5, 2] } });
    torch.dispose([w, n]);
    seeds.push(["ours", readFileSync(ours)]);
    const noPython = pytorchUnavailable();
    if (noPython) t.diagnostic(`Python's torch.save seeds skipped: ${noPython}`);
    else {
      const p2 = join(root, "py2.pt");
      const p4 = join(root, "py4.pt");
      const r = spawnSync(
        PYTHON,
        [
          "-c",
          `
import sys, torch
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
ck = {"state_dict": m.state_dict(), "epoch": 3, "lr": 0.1, "big": 2**40, "hist": [1.5, (2, "x")],
      "view": torch.arange(10.0)[2:8:2], "param": torch.nn.Parameter(torch.ones(2)), "flag": None}
torch.save(ck, sys.argv[1])
torch.save(ck, sys.argv[2], pickle_protocol=4)
`,
          p2,
          p4,
        ],
        { encoding: "utf8", timeout: 120_000, cwd: root },
      );
      assert.equal(r.status, 0, r.stderr);
      seeds.push(["py2", readFileSync(p2)], ["py4", readFileSync(p4)]);
    }
    const files = seeds.flatMap(([name, buf], i) => variants(name, buf, 12345 + i));
    const { dir, path } = folder(files);
    const got = loadInChild(dir, 240_000);
    let errors = 0;
    for (const [name] of files) {
      const o = got.get(name);
      assert.ok(o, `${name}: no outcome`);
      assertClean(o, path(name));
      if (name.includes("-intact-")) assert.equal(o.ok, true, `${name}: ${o.message}`);
      if (name.includes("-cut-") || name.includes("-pkl-cut-")) assert.equal(o.ok, false, `${name} loaded`);
      if (!o.ok) errors++;
    }
    t.diagnostic(`${files.length} variants of ${seeds.length} seeds: ${errors} errors, ${files.length - errors} loads`);
  });

  test('a pickled dict\'s "__proto__", "constructor" and "prototype" keys are own keys, nothing else changes', () => {
    const inner = pk(0x7d, 0x28, str("polluted"), 0x4b, 1, 0x75); // {"polluted": 1}
    const pickle = pk(
      PROTO2,
      0x7d, // the top-level dict
      0x28,
      str("__proto__"),
      inner,
      str("constructor"),
      0x4b,
      2,
      str("prototype"),
      0x4b,
      3,
      // An OrderedDict, as torch.save writes a state dict, gets its key by SETITEM.
      str("ordered"),
      "ccollections\nOrderedDict\n",
      0x29,
      0x52,
      str("__proto__"),
      inner,
      0x73,
      // A class stitchlab does not rebuild: its state arrives by BUILD, its items by SETITEMS.
      str("record"),
      "ccollections\ndefaultdict\n",
      0x29,
      0x52,
      0x28,
      str("__proto__"),
      inner,
      0x75,
      inner,
      0x28,
      str("__proto__"),
      inner,
      0x75,
      0x62, // BUILD
      // A dict with a "__class__" key is still a dict: BUILD leaves it alone.
      str("classy"),
      0x7d,
      0x28,
      str("__class__"),
      str("x"),
      0x75,
      0x4e,
      0x62,
      0x75, // SETITEMS of the top-level dict
      0x2e,
    );
    const { path } = folder([["proto.pt", archive(pickle)]]);
    const d = torchLoad(path("proto.pt")) as Record<string, unknown>;
    const proto = Object.getOwnPropertyDescriptor(d, "__proto__");
    assert.equal(Object.getPrototypeOf(d), Object.prototype);
    assert.deepEqual(Object.keys(d), ["__proto__", "constructor", "prototype", "ordered", "record", "classy"]);
    assert.ok(proto);
    assert.equal((proto.value as Record<string, unknown>).polluted, 1);
    assert.equal(d.constructor, 2);
    assert.equal(d.prototype, 3);
    const ordered = d.ordered as Record<string, unknown>;
    assert.equal(Object.getPrototypeOf(ordered), Object.prototype);
    assert.ok(Object.hasOwn(ordered, "__proto__"));
    const record = d.record as PyObject;
    assert.equal(Object.getPrototypeOf(record), Object.prototype);
    assert.equal(record.__class__, "collections.defaultdict");
    assert.ok(Object.hasOwn(record.dictitems!, "__proto__"));
    assert.ok(Object.hasOwn(record.state as object, "__proto__"));
    assert.equal(Object.getPrototypeOf(record.state), Object.prototype);
    const classy = d.classy as Record<string, unknown>;
    assert.deepEqual(Object.keys(classy), ["__class__"]);
    assert.ok(!("state" in classy));
    // Nothing reached Object.prototype.
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
    assert.ok(!Object.hasOwn(Object.prototype, "polluted"));
  });
}
