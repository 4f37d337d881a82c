// Element types, named as PyTorch names them, and their c10::ScalarType codes.

export type DType =
  | "uint8"
  | "int8"
  | "int16"
  | "int32"
  | "int64"
  | "float16"
  | "float32"
  | "float64"
  | "bool"
  | "bfloat16";

// c10::ScalarType enumeration values (c10/core/ScalarType.h).
const CODES: Record<DType, number> = {
  uint8: 0,
  int8: 1,
  int16: 2,
  int32: 3,
  int64: 4,
  float16: 5,
  float32: 6,
  float64: 7,
  bool: 11,
  bfloat16: 15,
};
const NAMES = new Map<number, DType>(Object.entries(CODES).map(([k, v]) => [v, k as DType]));

export const ITEM_SIZE: Record<DType, number> = {
  uint8: 1,
  int8: 1,
  int16: 2,
  int32: 4,
  int64: 8,
  float16: 2,
  float32: 4,
  float64: 8,
  bool: 1,
  bfloat16: 2,
};

export function dtypeCode(d: DType): number {
  const c = CODES[d];
  if (c === undefined) throw new TypeError(`unknown dtype '${d}' (known: ${Object.keys(CODES).join(", ")})`);
  return c;
}

export function dtypeName(code: number): DType {
  const n = NAMES.get(code);
  if (!n) throw new TypeError(`libtorch scalar type ${code} has no stitchlab dtype`);
  return n;
}

export const isFloating = (d: DType): boolean =>
  d === "float16" || d === "float32" || d === "float64" || d === "bfloat16";

export type TypedArray = Float32Array | Float64Array | Int32Array | Int16Array | Int8Array | Uint8Array | BigInt64Array;

/** The dtype a typed array holds, as torch.from_numpy would see it. */
export function dtypeOfArray(a: TypedArray): DType {
  if (a instanceof Float32Array) return "float32";
  if (a instanceof Float64Array) return "float64";
  if (a instanceof Int32Array) return "int32";
  if (a instanceof Int16Array) return "int16";
  if (a instanceof Int8Array) return "int8";
  if (a instanceof Uint8Array) return "uint8";
  if (a instanceof BigInt64Array) return "int64";
  throw new TypeError("unsupported typed array");
}

/** Views raw little-endian bytes as the typed array of a dtype (half types have none: use float32). */
export function typedArrayOf(d: DType, buf: ArrayBuffer): TypedArray {
  switch (d) {
    case "float32":
      return new Float32Array(buf);
    case "float64":
      return new Float64Array(buf);
    case "int32":
      return new Int32Array(buf);
    case "int16":
      return new Int16Array(buf);
    case "int8":
      return new Int8Array(buf);
    case "uint8":
    case "bool":
      return new Uint8Array(buf);
    case "int64":
      return new BigInt64Array(buf);
    default:
      throw new TypeError(`no typed array holds ${d}; convert with .to('float32') first`);
  }
}

/**
 * Numbers packed into the typed array that holds a dtype (half types go as float32, booleans
 * as 0/1 bytes, int64 truncated toward zero).
 */
export function typedArrayFrom(dtype: DType, values: number[]): TypedArray {
  switch (dtype) {
    case "float64":
      return Float64Array.from(values);
    case "int32":
      return Int32Array.from(values);
    case "int16":
      return Int16Array.from(values);
    case "int8":
      return Int8Array.from(values);
    case "uint8":
      return Uint8Array.from(values);
    case "bool":
      return Uint8Array.from(values, (v) => (v ? 1 : 0));
    case "int64":
      return BigInt64Array.from(values, (v) => BigInt(Math.trunc(v)));
    default:
      return Float32Array.from(values);
  }
}
