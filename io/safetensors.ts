// Named tensors to and from safetensors files: a little-endian u64 header length, a JSON
// header, raw bytes. Writes go to a temporary file renamed into place (io/files.ts), so a crash
// never leaves a half-written file under the final name.
import { fromBytes } from "../torch/creation.js";
import { type DType, ITEM_SIZE } from "../torch/dtype.js";
import type { Tensor } from "../torch/tensor.js";
import { readFileNamed, writeFileAtomic } from "./files.js";

const ST_DTYPE: Record<DType, string> = {
  float64: "F64",
  float32: "F32",
  float16: "F16",
  bfloat16: "BF16",
  int64: "I64",
  int32: "I32",
  int16: "I16",
  int8: "I8",
  uint8: "U8",
  bool: "BOOL",
};
const FROM_ST = new Map<string, DType>(Object.entries(ST_DTYPE).map(([k, v]) => [v, k as DType]));

/** Saves named tensors (moved to the CPU, made contiguous) with optional string metadata. */
export function saveSafetensors(
  path: string,
  tensors: Record<string, Tensor>,
  metadata?: Record<string, string>,
): void {
  const header: Record<string, unknown> = {};
  if (metadata) header.__metadata__ = metadata;
  const blobs: Uint8Array[] = [];
  let offset = 0;
  for (const [name, t] of Object.entries(tensors)) {
    const bytes = t.toBytes();
    header[name] = { dtype: ST_DTYPE[t.dtype], shape: t.shape, data_offsets: [offset, offset + bytes.byteLength] };
    blobs.push(bytes);
    offset += bytes.byteLength;
  }
  let json = JSON.stringify(header);
  json += " ".repeat((8 - (json.length % 8)) % 8); // keeps the data 8-byte aligned
  const jsonBytes = Buffer.from(json);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(jsonBytes.byteLength));
  writeFileAtomic(path, [len, jsonBytes, ...blobs]);
}

export interface SafetensorsFile {
  tensors: Record<string, Tensor>;
  metadata: Record<string, string>;
}

/** Loads every tensor of a safetensors file onto the CPU; a corrupt file gives one clear error. */
export function loadSafetensors(path: string): SafetensorsFile {
  const buf = readFileNamed(path, "safetensors");
  const bad = (why: string) => new Error(`safetensors: ${path} is not a valid safetensors file: ${why}`);
  if (buf.byteLength < 8) throw bad("shorter than its 8-byte header length");
  const n = Number(buf.readBigUInt64LE(0));
  if (n > buf.byteLength - 8) throw bad(`header length ${n} exceeds the file size ${buf.byteLength}`);
  let header: Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
  try {
    header = JSON.parse(buf.subarray(8, 8 + n).toString("utf8"));
  } catch (e) {
    throw bad(`header is not JSON (${(e as Error).message})`);
  }
  const data = buf.subarray(8 + n);
  const metadata = (header.__metadata__ ?? {}) as unknown as Record<string, string>;
  const tensors: Record<string, Tensor> = {};
  try {
    for (const [name, e] of Object.entries(header)) {
      if (name === "__metadata__") continue;
      const dtype = FROM_ST.get(e.dtype);
      if (!dtype) throw bad(`tensor '${name}' has unsupported dtype ${e.dtype}`);
      const [b, end] = e.data_offsets;
      const numel = e.shape.reduce((a, x) => a * x, 1);
      if (!(b >= 0 && end <= data.byteLength && end - b === numel * ITEM_SIZE[dtype]))
        throw bad(
          `tensor '${name}' (${e.dtype} [${e.shape}]) has data offsets [${b}, ${end}] outside the file or of the wrong size`,
        );
      tensors[name] = fromBytes(data.subarray(b, end), dtype, e.shape);
    }
  } catch (err) {
    for (const t of Object.values(tensors)) t.dispose();
    throw err;
  }
  return { tensors, metadata };
}
