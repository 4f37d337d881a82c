// Reads what Python's torch.save writes (the zip format of PyTorch 1.6 and later): a pickle
// (protocol 2 by default, later protocols understood too) whose tensors point to storages
// stored as raw little-endian files beside it. libtorch 1.13's own unpickler rejects common
// files (a one-entry dict pickles with SETITEM, which it lacks), so stitchlab has its own.
// Only data is rebuilt: tensors, dicts (OrderedDict too), lists, tuples, numbers, strings.
// Any other class becomes a plain { __class__, args, state } record, never executed.

import { fromBytes } from "./creation.js";
import type { DType } from "./dtype.js";
import { call, type Tensor } from "./tensor.js";
import { readZip } from "./zip.js";

/** An object of a Python class stitchlab does not rebuild, kept as data. */
export interface PyObject {
  __class__: string;
  args: unknown[];
  state?: unknown;
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
class Mark {}
const MARK = new Mark();

type Callable = (args: unknown[]) => unknown;

/** Parses a torch.save archive held in memory. */
export function loadTorchArchive(buf: Buffer): unknown {
  const zip = readZip(buf);
  const pkl = [...zip.keys()].find((k) => k.endsWith("/data.pkl") || k === "data.pkl");
  if (!pkl) throw new Error("the archive has no data.pkl (not written by torch.save)");
  const prefix = pkl.slice(0, pkl.length - "data.pkl".length);
  const storages = new Map<string, Tensor>();

  const persistentLoad = (pid: unknown): Tensor => {
    if (!Array.isArray(pid) || pid[0] !== "storage")
      throw new Error(`unsupported persistent id ${JSON.stringify(pid)}`);
    const [, type, key, , numel] = pid as [string, StorageType, string, string, number];
    let s = storages.get(key);
    if (!s) {
      const entry = zip.get(`${prefix}data/${key}`);
      if (!entry) throw new Error(`storage ${key} is missing from the archive`);
      const bytes = entry.data();
      const dtype = type instanceof StorageType ? type.dtype : "uint8";
      s = fromBytes(bytes, dtype, [numel]);
      storages.set(key, s);
    }
    return s;
  };

  const rebuildTensor: Callable = (args) => {
    const [storage, offset, size, stride, requiresGrad] = args as [Tensor, number, number[], number[], boolean];
    const t: Tensor = call("as_strided", storage, size, stride, offset);
    if (requiresGrad) t.requiresGrad_(true);
    return t;
  };
  const rebuildParameter: Callable = (args) => {
    const [data, requiresGrad] = args as [Tensor, boolean];
    return data.requiresGrad_(requiresGrad);
  };
  const globals: Record<string, Callable> = {
    "collections.OrderedDict": () => ({}),
    "builtins.dict": () => ({}),
    "torch._utils._rebuild_tensor_v2": rebuildTensor,
    "torch._utils._rebuild_tensor": rebuildTensor,
    "torch._utils._rebuild_parameter": rebuildParameter,
    "torch._utils._rebuild_parameter_with_state": rebuildParameter,
    "builtins.set": (args) => new Set((args[0] as unknown[]) ?? []),
    "builtins.tuple": (args) => [...((args[0] as unknown[]) ?? [])],
  };
  const resolve = (module: string, name: string): unknown => {
    if (module === "torch" && name in STORAGE_DTYPES) return new StorageType(STORAGE_DTYPES[name]);
    const fn = globals[`${module}.${name}`];
    if (fn) return fn;
    const cls = `${module}.${name}`;
    const make: Callable = (args) => ({ __class__: cls, args }) satisfies PyObject;
    return make;
  };

  try {
    const result = unpickle(zip.get(pkl)!.data(), resolve, persistentLoad);
    return result;
  } finally {
    // Each tensor is a view that keeps its storage alive; the storage handles themselves are ours.
    for (const s of storages.values()) s.dispose();
  }
}

function unpickle(
  data: Uint8Array,
  resolve: (module: string, name: string) => unknown,
  persistentLoad: (pid: unknown) => unknown,
): unknown {
  const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const stack: unknown[] = [];
  const memo = new Map<number, unknown>();
  let p = 0;
  const popMark = (): unknown[] => {
    let i = stack.length - 1;
    while (i >= 0 && stack[i] !== MARK) i--;
    if (i < 0) throw new Error("pickle: MARK not found");
    const items = stack.splice(i);
    items.shift();
    return items;
  };
  const readLine = (): string => {
    const end = buf.indexOf(0x0a, p);
    const s = buf.toString("latin1", p, end);
    p = end + 1;
    return s;
  };
  const setItem = (d: unknown, k: unknown, v: unknown) => {
    if (d instanceof Map) d.set(k, v);
    else (d as Record<string, unknown>)[String(k)] = v;
  };
  const callIt = (f: unknown, args: unknown[]): unknown => {
    if (typeof f !== "function") throw new Error("pickle: REDUCE on a non-callable");
    return (f as Callable)(args);
  };

  for (;;) {
    if (p >= buf.byteLength) throw new Error("pickle: ran past the end without STOP");
    const op = buf[p++];
    switch (op) {
      case 0x80: // PROTO
        p += 1;
        break;
      case 0x95: // FRAME
        p += 8;
        break;
      case 0x2e: // STOP
        return stack.pop();
      case 0x28: // MARK
        stack.push(MARK);
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
        stack.push(buf[p]);
        p += 1;
        break;
      case 0x4d: // BININT2
        stack.push(buf.readUInt16LE(p));
        p += 2;
        break;
      case 0x4a: // BININT
        stack.push(buf.readInt32LE(p));
        p += 4;
        break;
      case 0x8a: {
        // LONG1: little-endian two's complement of n bytes
        const n = buf[p++];
        let v = 0n;
        for (let i = n - 1; i >= 0; i--) v = (v << 8n) | BigInt(buf[p + i]);
        if (n > 0 && buf[p + n - 1] & 0x80) v -= 1n << BigInt(8 * n);
        p += n;
        stack.push(Number(v));
        break;
      }
      case 0x47: // BINFLOAT (big-endian)
        stack.push(buf.readDoubleBE(p));
        p += 8;
        break;
      case 0x58: {
        // BINUNICODE
        const n = buf.readUInt32LE(p);
        stack.push(buf.toString("utf8", p + 4, p + 4 + n));
        p += 4 + n;
        break;
      }
      case 0x8c: {
        // SHORT_BINUNICODE
        const n = buf[p];
        stack.push(buf.toString("utf8", p + 1, p + 1 + n));
        p += 1 + n;
        break;
      }
      case 0x54: {
        // BINSTRING
        const n = buf.readInt32LE(p);
        stack.push(buf.toString("latin1", p + 4, p + 4 + n));
        p += 4 + n;
        break;
      }
      case 0x55: {
        // SHORT_BINSTRING
        const n = buf[p];
        stack.push(buf.toString("latin1", p + 1, p + 1 + n));
        p += 1 + n;
        break;
      }
      case 0x42: {
        // BINBYTES
        const n = buf.readUInt32LE(p);
        stack.push(buf.subarray(p + 4, p + 4 + n));
        p += 4 + n;
        break;
      }
      case 0x43: {
        // SHORT_BINBYTES
        const n = buf[p];
        stack.push(buf.subarray(p + 1, p + 1 + n));
        p += 1 + n;
        break;
      }
      case 0x29: // EMPTY_TUPLE
      case 0x5d: // EMPTY_LIST
        stack.push([]);
        break;
      case 0x7d: // EMPTY_DICT
        stack.push({});
        break;
      case 0x8f: // EMPTY_SET
        stack.push(new Set());
        break;
      case 0x74: // TUPLE
      case 0x6c: // LIST
        stack.push(popMark());
        break;
      case 0x85: // TUPLE1
        stack.push([stack.pop()]);
        break;
      case 0x86: {
        // TUPLE2
        const b = stack.pop();
        const a = stack.pop();
        stack.push([a, b]);
        break;
      }
      case 0x87: {
        // TUPLE3
        const c = stack.pop();
        const b = stack.pop();
        const a = stack.pop();
        stack.push([a, b, c]);
        break;
      }
      case 0x61: {
        // APPEND
        const v = stack.pop();
        (stack[stack.length - 1] as unknown[]).push(v);
        break;
      }
      case 0x65: {
        // APPENDS
        const items = popMark();
        (stack[stack.length - 1] as unknown[]).push(...items);
        break;
      }
      case 0x90: {
        // ADDITEMS
        const items = popMark();
        for (const x of items) (stack[stack.length - 1] as Set<unknown>).add(x);
        break;
      }
      case 0x73: {
        // SETITEM
        const v = stack.pop();
        const k = stack.pop();
        setItem(stack[stack.length - 1], k, v);
        break;
      }
      case 0x75: {
        // SETITEMS
        const items = popMark();
        const d = stack[stack.length - 1];
        for (let i = 0; i < items.length; i += 2) setItem(d, items[i], items[i + 1]);
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
        const name = stack.pop() as string;
        const module = stack.pop() as string;
        stack.push(resolve(module, name));
        break;
      }
      case 0x52: {
        // REDUCE
        const args = stack.pop() as unknown[];
        const f = stack.pop();
        stack.push(callIt(f, args));
        break;
      }
      case 0x81: {
        // NEWOBJ
        const args = stack.pop() as unknown[];
        const cls = stack.pop();
        stack.push(callIt(cls, args));
        break;
      }
      case 0x62: {
        // BUILD: set state; plain records keep it, dicts and tensors ignore it (e.g. _metadata)
        const state = stack.pop();
        const obj = stack[stack.length - 1];
        if (obj && typeof obj === "object" && "__class__" in obj) (obj as PyObject).state = state;
        break;
      }
      case 0x51: // BINPERSID
        stack.push(persistentLoad(stack.pop()));
        break;
      case 0x71: // BINPUT
        memo.set(buf[p++], stack[stack.length - 1]);
        break;
      case 0x72: // LONG_BINPUT
        memo.set(buf.readUInt32LE(p), stack[stack.length - 1]);
        p += 4;
        break;
      case 0x94: // MEMOIZE
        memo.set(memo.size, stack[stack.length - 1]);
        break;
      case 0x68: // BINGET
        stack.push(memo.get(buf[p++]));
        break;
      case 0x6a: // LONG_BINGET
        stack.push(memo.get(buf.readUInt32LE(p)));
        p += 4;
        break;
      case 0x30: // POP
        stack.pop();
        break;
      case 0x31: // POP_MARK
        popMark();
        break;
      case 0x32: // DUP
        stack.push(stack[stack.length - 1]);
        break;
      default:
        throw new Error(`pickle: unsupported opcode 0x${op.toString(16)} at byte ${p - 1}`);
    }
  }
}
