// Reads what Python's torch.save writes (the zip format of PyTorch 1.6 and later): a pickle
// (protocol 2 by default, later protocols understood too) whose tensors point to storages
// stored as raw little-endian files beside it. libtorch 1.13's own unpickler rejects common
// files (a one-entry dict pickles with SETITEM, which it lacks), so stitchlab has its own.
// Only data is rebuilt: tensors, dicts (OrderedDict too), lists, tuples, numbers, strings.
// Any other class becomes a plain { __class__, args, state } record, never executed.
// The input is untrusted: every read is bounded by the bytes there, and pickled keys become own
// properties (a "__proto__" key must not set a prototype), so a crafted file can only fail.

import { fromBytes } from "../torch/creation.js";
import { type DType, ITEM_SIZE } from "../torch/dtype.js";
import { call, Tensor } from "../torch/tensor.js";
import { readZip } from "./zip.js";

/** An object of a Python class stitchlab does not rebuild, kept as data. */
export interface PyObject {
  __class__: string;
  args: unknown[];
  state?: unknown;
  /** The items of a dict subclass (pickled as SETITEM(S) on the object), as a dict. */
  dictitems?: Record<string, unknown>;
  /** The items of a list subclass (pickled as APPEND(S) on the object). */
  listitems?: unknown[];
}

const STORAGE_DTYPES: Record<string, DType> = {
  FloatStorage: "float32",
  DoubleStorage: "float64",
  HalfStorage: "float16",
  BFloat16Storage: "bfloat16",
  LongStorage: "int64",
  IntStorage: "int32",
  ShortStorage: "int16",
  CharStorage: "int8",
  ByteStorage: "uint8",
  BoolStorage: "bool",
};

class StorageType {
  constructor(readonly dtype: DType) {}
}

type Callable = (args: unknown[]) => unknown;

// What the unpickler made, so that SETITEM, APPEND and BUILD act only on what they are meant
// for: a crafted pickle must not reach a tensor's, a function's or Object.prototype's properties.
const DICTS = new WeakSet<object>();
const RECORDS = new WeakSet<object>();

function newDict(): Record<string, unknown> {
  const d = {};
  DICTS.add(d);
  return d;
}

/**
 * Sets a key as an own data property: plain assignment of "__proto__" would replace the
 * object's prototype instead, so a pickled key of that name must not go through `d[k] = v`.
 */
function defineKey(d: Record<string, unknown>, k: string, v: unknown): void {
  Object.defineProperty(d, k, { value: v, writable: true, enumerable: true, configurable: true });
}

/** What a pickled value is, in Python's words, for error messages. */
function kind(v: unknown): string {
  if (v === null || v === undefined) return "None";
  if (Array.isArray(v)) return "a list";
  if (v instanceof Set) return "a set";
  if (v instanceof Tensor) return "a tensor";
  if (v instanceof StorageType) return "a storage type";
  if (v instanceof Uint8Array) return "bytes";
  if (typeof v === "function") return "a class or function";
  if (typeof v === "object" && DICTS.has(v)) return "a dict";
  if (typeof v === "object" && RECORDS.has(v)) return `an object of class ${(v as PyObject).__class__}`;
  return `a ${typeof v}`;
}

/** A dict key as the string JavaScript keys it by (Python's keys may be ints or tuples too). */
function keyString(k: unknown): string {
  if (k === null || typeof k !== "object") return String(k);
  try {
    return String(k);
  } catch {
    // e.g. a dict whose own "toString" key holds data
    throw new Error(`pickle: a dict key that is ${kind(k)} has no string form`);
  }
}

const isIndex = (x: unknown): x is number => Number.isSafeInteger(x) && (x as number) >= 0;

/** Parses a torch.save archive held in memory. */
export function loadTorchArchive(buf: Buffer): unknown {
  const zip = readZip(buf);
  const pkl = [...zip.keys()].find((k) => k.endsWith("/data.pkl") || k === "data.pkl");
  if (!pkl) throw new Error("the archive has no data.pkl (not written by torch.save)");
  const prefix = pkl.slice(0, pkl.length - "data.pkl".length);
  // Every record of the archive against its CRC-32 before anything is unpickled or allocated, so
  // that damage is named as such (and by entry), not met half-way as a pickle error.
  for (const e of zip.values()) if (e.name.startsWith(prefix)) e.data();
  const storages = new Map<string, Tensor>();
  // The storages themselves: a tensor is rebuilt only from one of them, never from another view.
  const isStorage = new Set<Tensor>();

  const persistentLoad = (pid: unknown): Tensor => {
    if (!Array.isArray(pid) || pid.length < 5 || pid[0] !== "storage")
      throw new Error(
        `unsupported persistent id: ${Array.isArray(pid) ? `a tuple of ${pid.length} starting with ${typeof pid[0] === "string" ? JSON.stringify(pid[0]) : kind(pid[0])}` : kind(pid)}`,
      );
    const [, type, key, , numel] = pid as [string, unknown, unknown, unknown, unknown];
    if (typeof key !== "string") throw new Error(`a storage key is ${kind(key)}, not a string`);
    if (!isIndex(numel))
      throw new Error(`storage ${key}'s size is ${typeof numel === "number" ? numel : kind(numel)}, not a count`);
    let s = storages.get(key);
    if (!s) {
      const entry = zip.get(`${prefix}data/${key}`);
      if (!entry) throw new Error(`storage ${key} is missing from the archive`);
      const bytes = entry.data();
      const dtype = type instanceof StorageType ? type.dtype : "uint8";
      // Checked here, before anything is allocated for the claimed size.
      const need = numel * ITEM_SIZE[dtype];
      if (bytes.byteLength !== need)
        throw new Error(
          `storage ${key}: ${numel} ${dtype} elements need ${need} bytes, the archive holds ${bytes.byteLength}`,
        );
      s = fromBytes(bytes, dtype, [numel]);
      storages.set(key, s);
      isStorage.add(s);
    }
    return s;
  };

  const rebuildTensor: Callable = (args) => {
    const [storage, offset, size, stride, requiresGrad] = args;
    if (!(storage instanceof Tensor) || !isStorage.has(storage))
      throw new Error(
        `a tensor is rebuilt from ${storage instanceof Tensor ? "a tensor view" : kind(storage)}, not a storage`,
      );
    if (
      !isIndex(offset) ||
      !Array.isArray(size) ||
      !Array.isArray(stride) ||
      size.length !== stride.length ||
      !size.every(isIndex) ||
      !stride.every(isIndex)
    )
      throw new Error("a tensor's offset, size and stride are not non-negative integers of matching lengths");
    // The last element a view reads must lie inside its storage (an empty view reads none).
    const storageNumel = storage.shape[0];
    if (size.every((n) => n > 0)) {
      let last = offset;
      for (let i = 0; i < size.length; i++) last += (size[i] - 1) * stride[i];
      if (last >= storageNumel)
        throw new Error(
          `a tensor of size [${size}] and stride [${stride}] at offset ${offset} lies outside its storage of ${storageNumel} elements`,
        );
    }
    const t: Tensor = call("as_strided", storage, size, stride, offset);
    if (requiresGrad === true) t.requiresGrad_(true);
    return t;
  };
  const rebuildParameter: Callable = (args) => {
    const [data, requiresGrad] = args;
    // A storage is freed when loading ends, so it cannot be the Parameter itself.
    if (!(data instanceof Tensor) || isStorage.has(data))
      throw new Error(`a Parameter is rebuilt from ${kind(data)}, not a tensor`);
    return data.requiresGrad_(requiresGrad === true);
  };
  const sequence = (what: string, x: unknown): unknown[] => {
    if (x === undefined) return [];
    if (Array.isArray(x)) return x;
    throw new Error(`${what} of ${kind(x)}`);
  };
  const globals = new Map<string, Callable>([
    ["collections.OrderedDict", () => newDict()],
    ["builtins.dict", () => newDict()],
    ["torch._utils._rebuild_tensor_v2", rebuildTensor],
    ["torch._utils._rebuild_tensor", rebuildTensor],
    ["torch._utils._rebuild_parameter", rebuildParameter],
    ["torch._utils._rebuild_parameter_with_state", rebuildParameter],
    ["builtins.set", (args) => new Set(sequence("set", args[0]))],
    ["builtins.tuple", (args) => [...sequence("tuple", args[0])]],
  ]);
  const resolve = (module: string, name: string): unknown => {
    if (module === "torch" && Object.hasOwn(STORAGE_DTYPES, name)) return new StorageType(STORAGE_DTYPES[name]);
    const cls = `${module}.${name}`;
    const fn = globals.get(cls);
    if (fn) return fn;
    const make: Callable = (args) => {
      const r: PyObject = { __class__: cls, args };
      RECORDS.add(r);
      return r;
    };
    return make;
  };

  try {
    return unpickle(zip.get(pkl)!.data(), resolve, persistentLoad);
  } finally {
    // Each tensor is a view that keeps its storage alive; the storage handles themselves are ours.
    for (const s of storages.values()) s.dispose();
  }
}

const OPCODES = new Map<number, string>([
  [0x80, "PROTO"],
  [0x95, "FRAME"],
  [0x2e, "STOP"],
  [0x28, "MARK"],
  [0x4e, "NONE"],
  [0x88, "NEWTRUE"],
  [0x89, "NEWFALSE"],
  [0x4b, "BININT1"],
  [0x4d, "BININT2"],
  [0x4a, "BININT"],
  [0x8a, "LONG1"],
  [0x47, "BINFLOAT"],
  [0x58, "BINUNICODE"],
  [0x8c, "SHORT_BINUNICODE"],
  [0x54, "BINSTRING"],
  [0x55, "SHORT_BINSTRING"],
  [0x42, "BINBYTES"],
  [0x43, "SHORT_BINBYTES"],
  [0x29, "EMPTY_TUPLE"],
  [0x5d, "EMPTY_LIST"],
  [0x7d, "EMPTY_DICT"],
  [0x8f, "EMPTY_SET"],
  [0x74, "TUPLE"],
  [0x6c, "LIST"],
  [0x85, "TUPLE1"],
  [0x86, "TUPLE2"],
  [0x87, "TUPLE3"],
  [0x61, "APPEND"],
  [0x65, "APPENDS"],
  [0x90, "ADDITEMS"],
  [0x73, "SETITEM"],
  [0x75, "SETITEMS"],
  [0x63, "GLOBAL"],
  [0x93, "STACK_GLOBAL"],
  [0x52, "REDUCE"],
  [0x81, "NEWOBJ"],
  [0x62, "BUILD"],
  [0x51, "BINPERSID"],
  [0x71, "BINPUT"],
  [0x72, "LONG_BINPUT"],
  [0x94, "MEMOIZE"],
  [0x68, "BINGET"],
  [0x6a, "LONG_BINGET"],
  [0x30, "POP"],
  [0x31, "POP_MARK"],
  [0x32, "DUP"],
]);

/**
 * Runs a pickle program. Every read is bounded by the data: a read past its end, a missing memo
 * entry or a pop below the last MARK throws, so that a crafted file ends in an error, not a loop.
 */
function unpickle(
  data: Uint8Array,
  resolve: (module: string, name: string) => unknown,
  persistentLoad: (pid: unknown) => unknown,
): unknown {
  const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const stack: unknown[] = [];
  // Where each MARK was, as in CPython: the objects above the last mark are all a pop may take.
  const marks: number[] = [];
  const memo = new Map<number, unknown>();
  let p = 0;
  let at = 0; // where the current opcode starts
  let op = 0;
  const opName = () => OPCODES.get(op) ?? `opcode 0x${op.toString(16)}`;
  const fail = (why: string) => new Error(`pickle: ${why} (${opName()} at byte ${at})`);
  /** Takes n bytes, returning where they start. */
  const take = (n: number, what = opName()): number => {
    const left = buf.byteLength - p;
    if (n > left)
      throw new Error(`pickle: truncated at byte ${p} while reading ${what} (${n} bytes needed, ${left} left)`);
    const q = p;
    p += n;
    return q;
  };
  const readLine = (): string => {
    const end = buf.indexOf(0x0a, p);
    if (end < 0)
      throw new Error(
        `pickle: truncated at byte ${p} while reading ${opName()}: no newline before the end at byte ${buf.byteLength}`,
      );
    const s = buf.toString("latin1", p, end);
    p = end + 1;
    return s;
  };
  const fence = () => (marks.length ? marks[marks.length - 1] : 0);
  const pop = (): unknown => {
    if (stack.length <= fence()) throw fail("stack underflow");
    return stack.pop();
  };
  const top = (): unknown => {
    if (stack.length <= fence()) throw fail("stack underflow");
    return stack[stack.length - 1];
  };
  const popMark = (): unknown[] => {
    const m = marks.pop();
    if (m === undefined) throw fail("no MARK before it");
    return stack.splice(m);
  };
  const memoGet = (i: number): unknown => {
    if (!memo.has(i)) throw fail(`memo entry ${i} is missing`);
    return memo.get(i);
  };
  const setItems = (items: unknown[]) => {
    const d = top();
    let target: Record<string, unknown>;
    if (typeof d === "object" && d !== null && DICTS.has(d)) target = d as Record<string, unknown>;
    else if (typeof d === "object" && d !== null && RECORDS.has(d)) target = (d as PyObject).dictitems ??= newDict();
    else throw fail(`${opName()} on ${kind(d)}, not a dict`);
    for (let i = 0; i < items.length; i += 2) defineKey(target, keyString(items[i]), items[i + 1]);
  };
  const appendItems = (items: unknown[]) => {
    const l = top();
    let target: unknown[];
    if (Array.isArray(l)) target = l;
    else if (typeof l === "object" && l !== null && RECORDS.has(l)) target = (l as PyObject).listitems ??= [];
    else throw fail(`${opName()} to ${kind(l)}, not a list`);
    for (const x of items) target.push(x);
  };
  /** Calls what REDUCE or NEWOBJ found; its errors say where in the pickle they happened. */
  const callIt = (f: unknown, args: unknown): unknown => {
    if (typeof f !== "function") throw fail(`${opName()} of ${kind(f)}, which is not callable`);
    if (!Array.isArray(args)) throw fail(`${opName()} with arguments that are ${kind(args)}, not a tuple`);
    try {
      return (f as Callable)(args);
    } catch (e) {
      throw fail((e as Error).message);
    }
  };

  for (;;) {
    if (p >= buf.byteLength) throw new Error(`pickle: ran past the end at byte ${p} without STOP`);
    at = p;
    op = buf[p++];
    switch (op) {
      case 0x80: {
        // PROTO
        const v = buf[take(1)];
        if (v > 5) throw fail(`unsupported pickle protocol ${v}`);
        break;
      }
      case 0x95: {
        // FRAME: a length the frame's opcodes must fit in
        const n = Number(buf.readBigUInt64LE(take(8)));
        if (n > buf.byteLength - p)
          throw new Error(`pickle: truncated at byte ${p}: a FRAME of ${n} bytes, ${buf.byteLength - p} left`);
        break;
      }
      case 0x2e: // STOP
        return pop();
      case 0x28: // MARK
        marks.push(stack.length);
        break;
      case 0x4e: // NONE
        stack.push(null);
        break;
      case 0x88: // NEWTRUE
        stack.push(true);
        break;
      case 0x89: // NEWFALSE
        stack.push(false);
        break;
      case 0x4b: // BININT1
        stack.push(buf[take(1)]);
        break;
      case 0x4d: // BININT2
        stack.push(buf.readUInt16LE(take(2)));
        break;
      case 0x4a: // BININT
        stack.push(buf.readInt32LE(take(4)));
        break;
      case 0x8a: {
        // LONG1: little-endian two's complement of n bytes
        const n = buf[take(1)];
        const q = take(n);
        let v = 0n;
        for (let i = n - 1; i >= 0; i--) v = (v << 8n) | BigInt(buf[q + i]);
        if (n > 0 && buf[q + n - 1] & 0x80) v -= 1n << BigInt(8 * n);
        stack.push(Number(v));
        break;
      }
      case 0x47: // BINFLOAT (big-endian)
        stack.push(buf.readDoubleBE(take(8)));
        break;
      case 0x58: {
        // BINUNICODE
        const n = buf.readUInt32LE(take(4));
        const q = take(n);
        stack.push(buf.toString("utf8", q, q + n));
        break;
      }
      case 0x8c: {
        // SHORT_BINUNICODE
        const n = buf[take(1)];
        const q = take(n);
        stack.push(buf.toString("utf8", q, q + n));
        break;
      }
      case 0x54: {
        // BINSTRING
        const n = buf.readInt32LE(take(4));
        if (n < 0) throw fail(`negative length ${n}`);
        const q = take(n);
        stack.push(buf.toString("latin1", q, q + n));
        break;
      }
      case 0x55: {
        // SHORT_BINSTRING
        const n = buf[take(1)];
        const q = take(n);
        stack.push(buf.toString("latin1", q, q + n));
        break;
      }
      case 0x42: {
        // BINBYTES
        const n = buf.readUInt32LE(take(4));
        const q = take(n);
        stack.push(buf.subarray(q, q + n));
        break;
      }
      case 0x43: {
        // SHORT_BINBYTES
        const n = buf[take(1)];
        const q = take(n);
        stack.push(buf.subarray(q, q + n));
        break;
      }
      case 0x29: // EMPTY_TUPLE
      case 0x5d: // EMPTY_LIST
        stack.push([]);
        break;
      case 0x7d: // EMPTY_DICT
        stack.push(newDict());
        break;
      case 0x8f: // EMPTY_SET
        stack.push(new Set());
        break;
      case 0x74: // TUPLE
      case 0x6c: // LIST
        stack.push(popMark());
        break;
      case 0x85: // TUPLE1
        stack.push([pop()]);
        break;
      case 0x86: {
        // TUPLE2
        const b = pop();
        const a = pop();
        stack.push([a, b]);
        break;
      }
      case 0x87: {
        // TUPLE3
        const c = pop();
        const b = pop();
        const a = pop();
        stack.push([a, b, c]);
        break;
      }
      case 0x61: // APPEND
        appendItems([pop()]);
        break;
      case 0x65: // APPENDS
        appendItems(popMark());
        break;
      case 0x90: {
        // ADDITEMS
        const items = popMark();
        const s = top();
        if (!(s instanceof Set)) throw fail(`ADDITEMS to ${kind(s)}, not a set`);
        for (const x of items) s.add(x);
        break;
      }
      case 0x73: {
        // SETITEM
        const v = pop();
        const k = pop();
        setItems([k, v]);
        break;
      }
      case 0x75: {
        // SETITEMS
        const items = popMark();
        if (items.length % 2) throw fail(`SETITEMS with an odd number of items (${items.length})`);
        setItems(items);
        break;
      }
      case 0x63: {
        // GLOBAL "module\nname\n"
        const module = readLine();
        const name = readLine();
        stack.push(resolve(module, name));
        break;
      }
      case 0x93: {
        // STACK_GLOBAL
        const name = pop();
        const module = pop();
        if (typeof module !== "string" || typeof name !== "string")
          throw fail(`a class named by ${kind(module)} and ${kind(name)}, not two strings`);
        stack.push(resolve(module, name));
        break;
      }
      case 0x52: // REDUCE
      case 0x81: {
        // NEWOBJ
        const args = pop();
        const f = pop();
        stack.push(callIt(f, args));
        break;
      }
      case 0x62: {
        // BUILD: set state; plain records keep it, dicts and tensors ignore it (e.g. _metadata)
        const state = pop();
        const obj = top();
        if (typeof obj === "object" && obj !== null && RECORDS.has(obj)) (obj as PyObject).state = state;
        break;
      }
      case 0x51: {
        // BINPERSID
        const pid = pop();
        try {
          stack.push(persistentLoad(pid));
        } catch (e) {
          throw fail((e as Error).message);
        }
        break;
      }
      case 0x71: // BINPUT
        memo.set(buf[take(1)], top());
        break;
      case 0x72: // LONG_BINPUT
        memo.set(buf.readUInt32LE(take(4)), top());
        break;
      case 0x94: // MEMOIZE
        memo.set(memo.size, top());
        break;
      case 0x68: // BINGET
        stack.push(memoGet(buf[take(1)]));
        break;
      case 0x6a: // LONG_BINGET
        stack.push(memoGet(buf.readUInt32LE(take(4))));
        break;
      case 0x30: // POP: the top object, or the last MARK when nothing lies above it (as in CPython)
        if (stack.length > fence()) stack.pop();
        else if (marks.length) marks.pop();
        else throw fail("stack underflow");
        break;
      case 0x31: // POP_MARK
        popMark();
        break;
      case 0x32: // DUP
        stack.push(top());
        break;
      default:
        throw new Error(`pickle: unsupported opcode 0x${op.toString(16)} at byte ${at}`);
    }
  }
}
