// Tensor creation, with PyTorch's names and defaults (float32 unless a dtype is given).
import { type Device, isCuda } from "./device.js";
import { type DType, dtypeCode, dtypeOfArray, type TypedArray, typedArrayFrom } from "./dtype.js";
import { native } from "./native.js";
import { call, Tensor } from "./tensor.js";

export interface CreateOptions {
  dtype?: DType;
  device?: Device;
  requiresGrad?: boolean;
}

function finish(t: Tensor, opts: CreateOptions): Tensor {
  if (opts.requiresGrad) t.requiresGrad_(true);
  return t;
}

/** Flattens nested arrays into out, inferring shape; returns whether every leaf is a boolean. */
function flattenNested(data: unknown, shape: number[], out: number[], depth = 0): boolean {
  if (Array.isArray(data)) {
    if (shape.length === depth) shape.push(data.length);
    else if (shape[depth] !== data.length) throw new RangeError("tensor(): nested arrays are ragged");
    let allBool = data.length > 0;
    for (const x of data) allBool = flattenNested(x, shape, out, depth + 1) && allBool;
    return allBool;
  } else if (typeof data === "number" || typeof data === "boolean") {
    if (depth !== shape.length) throw new RangeError("tensor(): nested arrays are ragged");
    out.push(Number(data));
    return typeof data === "boolean";
  } else {
    throw new TypeError("tensor(): expected numbers, booleans, nested arrays of them, or a typed array");
  }
}

/**
 * A tensor holding a copy of data: a typed array (with a shape; 1-D by default), a number,
 * or nested arrays. Plain numbers default to float32 (JavaScript cannot tell 1 from 1.0),
 * booleans (all leaves booleans) to bool;
 * a typed array keeps its own dtype unless `dtype` asks for another.
 */
export function tensor(
  data: TypedArray | number | boolean | unknown[],
  opts: CreateOptions & { shape?: number[] } = {},
): Tensor {
  let arr: TypedArray;
  let shape: number[];
  let dtype: DType;
  if (ArrayBuffer.isView(data)) {
    arr = data as TypedArray;
    dtype = dtypeOfArray(arr);
    shape = opts.shape ?? [arr.length];
  } else {
    const flat: number[] = [];
    const inferred: number[] = [];
    const allBool = flattenNested(data, inferred, flat);
    dtype = opts.dtype ?? (allBool ? "bool" : "float32");
    if (dtype === "float16" || dtype === "bfloat16") dtype = "float32";
    arr = typedArrayFrom(dtype, flat);
    shape = opts.shape ?? inferred;
  }
  let t = new Tensor(native.fromBuffer(arr, dtypeCode(dtype), shape));
  if (opts.dtype && opts.dtype !== dtype) {
    const c = t.to(opts.dtype);
    t.dispose();
    t = c;
  }
  if (opts.device && isCuda(opts.device)) {
    const c = t.to(opts.device);
    t.dispose();
    t = c;
  }
  return finish(t, opts);
}

/** A tensor that views raw little-endian bytes of the given dtype and shape (copied). */
export function fromBytes(bytes: Uint8Array, dtype: DType, shape: number[]): Tensor {
  return new Tensor(native.fromBuffer(bytes, dtypeCode(dtype), shape));
}

const code = (o: CreateOptions) => dtypeCode(o.dtype ?? "float32");

export function zeros(shape: number[], opts: CreateOptions = {}): Tensor {
  return finish(call("zeros", shape, code(opts), null, opts.device ?? null), opts);
}
export function ones(shape: number[], opts: CreateOptions = {}): Tensor {
  return finish(call("ones", shape, code(opts), null, opts.device ?? null), opts);
}
export function empty(shape: number[], opts: CreateOptions = {}): Tensor {
  return finish(call("empty.memory_format", shape, code(opts), null, opts.device ?? null), opts);
}
export function full(shape: number[], value: number | boolean, opts: CreateOptions = {}): Tensor {
  return finish(call("full", shape, value, code(opts), null, opts.device ?? null), opts);
}
export function eye(n: number, opts: CreateOptions = {}): Tensor {
  return finish(call("eye", n, code(opts), null, opts.device ?? null), opts);
}
/** Values in [start, end) with a step; int64 when all three are integers, as in PyTorch. */
export function arange(start: number, end?: number, step = 1, opts: CreateOptions = {}): Tensor {
  if (end === undefined) [start, end] = [0, start];
  const dt = opts.dtype ? dtypeCode(opts.dtype) : null;
  return finish(call("arange.start_step", start, end, step, dt, null, opts.device ?? null), opts);
}
/** Uniform samples in [0, 1). */
export function rand(shape: number[], opts: CreateOptions = {}): Tensor {
  return finish(call("rand", shape, code(opts), null, opts.device ?? null), opts);
}
/** Standard normal samples. */
export function randn(shape: number[], opts: CreateOptions = {}): Tensor {
  return finish(call("randn", shape, code(opts), null, opts.device ?? null), opts);
}
/** Integers in [low, high), int64 by default. */
export function randint(low: number, high: number, shape: number[], opts: CreateOptions = {}): Tensor {
  return finish(
    call("randint.low", low, high, shape, dtypeCode(opts.dtype ?? "int64"), null, opts.device ?? null),
    opts,
  );
}
export function zerosLike(t: Tensor, opts: CreateOptions = {}): Tensor {
  return finish(call("zeros_like", t, opts.dtype ? dtypeCode(opts.dtype) : null), opts);
}
export function onesLike(t: Tensor, opts: CreateOptions = {}): Tensor {
  return finish(call("ones_like", t, opts.dtype ? dtypeCode(opts.dtype) : null), opts);
}
export function randLike(t: Tensor): Tensor {
  return call("rand_like", t);
}
export function randnLike(t: Tensor): Tensor {
  return call("randn_like", t);
}
