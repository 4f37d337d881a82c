// Named tensors to and from safetensors files: a little-endian u64 header length, a JSON
// header, raw bytes. Writes go to a temporary file renamed into place (io/files.ts), so a crash
// never leaves a half-written file under the final name.
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
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

interface HeaderEntry {
  name: string;
  dtype: DType;
  shape: number[];
  begin: number;
  end: number;
}

const isCount = (x: unknown): x is number => Number.isSafeInteger(x) && (x as number) >= 0;

/**
 * The tensors a header describes, checked against the data section before any is read: each
 * entry is {dtype, shape, data_offsets} with a byte count that fits its dtype and shape, and the
 * byte ranges, sorted, tile the data section exactly (each starts where the one before ends, the
 * first at 0, the last at the section's end), as the format requires (safetensors' own
 * validate()): overlapping tensors would share bytes, and a hole holds bytes no tensor owns.
 */
function checkHeader(header: unknown, dataBytes: number, bad: (why: string) => Error): HeaderEntry[] {
  if (typeof header !== "object" || header === null || Array.isArray(header))
    throw bad("the header is not a JSON object of tensors");
  const entries: HeaderEntry[] = [];
  for (const [name, raw] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const e = raw as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    if (typeof e !== "object" || e === null)
      throw bad(`tensor '${name}' is ${JSON.stringify(e)}, not {dtype, shape, data_offsets}`);
    const dtype = typeof e.dtype === "string" ? FROM_ST.get(e.dtype) : undefined;
    if (!dtype) throw bad(`tensor '${name}' has unsupported dtype ${JSON.stringify(e.dtype)}`);
    if (!Array.isArray(e.shape) || !e.shape.every(isCount))
      throw bad(`tensor '${name}' has shape ${JSON.stringify(e.shape)}, not a list of sizes`);
    const offsets = e.data_offsets;
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every(isCount))
      throw bad(`tensor '${name}' has data_offsets ${JSON.stringify(offsets)}, not [begin, end] byte offsets`);
    const [begin, end] = offsets as [number, number];
    const shape = e.shape as number[];
    const numel = shape.reduce((a, x) => a * x, 1);
    if (!(begin <= end && end <= dataBytes && end - begin === numel * ITEM_SIZE[dtype]))
      throw bad(
        `tensor '${name}' (${e.dtype} [${shape}]) has data offsets [${begin}, ${end}] outside the file or of the wrong size`,
      );
    entries.push({ name, dtype, shape, begin, end });
  }
  const sorted = [...entries].sort((a, b) => a.begin - b.begin || a.end - b.end);
  const range = (e: HeaderEntry) => `'${e.name}' [${e.begin}, ${e.end}]`;
  let prev: HeaderEntry | undefined;
  let at = 0;
  for (const e of sorted) {
    if (e.begin < at)
      throw bad(
        `tensors ${range(prev as HeaderEntry)} and ${range(e)} overlap: each byte of the data belongs to one tensor`,
      );
    if (e.begin > at)
      throw bad(
        `bytes [${at}, ${e.begin}) of the data section, ${prev ? `between '${prev.name}' and '${e.name}'` : `before '${e.name}'`}, belong to no tensor (the format allows no holes)`,
      );
    prev = e;
    at = e.end;
  }
  if (at !== dataBytes)
    throw bad(
      `bytes [${at}, ${dataBytes}) of the data section${prev ? `, after '${prev.name}',` : ""} belong to no tensor (the tensors must cover the data exactly)`,
    );
  return entries;
}

/** Loads every tensor of a safetensors file onto the CPU; a corrupt file gives one clear error. */
export function loadSafetensors(path: string): SafetensorsFile {
  const buf = readFileNamed(path, "safetensors");
  const bad = (why: string) => new Error(`safetensors: ${path} is not a valid safetensors file: ${why}`);
  if (buf.byteLength < 8) throw bad("shorter than its 8-byte header length");
  const n = Number(buf.readBigUInt64LE(0));
  if (n > buf.byteLength - 8) throw bad(`header length ${n} exceeds the file size ${buf.byteLength}`);
  let header: Record<string, unknown>;
  try {
    header = JSON.parse(buf.subarray(8, 8 + n).toString("utf8"));
  } catch (e) {
    throw bad(`header is not JSON (${(e as Error).message})`);
  }
  const data = buf.subarray(8 + n);
  // Every entry is checked before any tensor is made.
  const entries = checkHeader(header, data.byteLength, bad);
  const metadata = (header.__metadata__ ?? {}) as Record<string, string>;
  const tensors: Record<string, Tensor> = {};
  try {
    for (const e of entries) tensors[e.name] = fromBytes(data.subarray(e.begin, e.end), e.dtype, e.shape);
  } catch (err) {
    for (const t of Object.values(tensors)) t.dispose();
    throw err;
  }
  return { tensors, metadata };
}

/**
 * The shapes of a safetensors file's tensors by name, from its header alone (checked as
 * loadSafetensors checks it): what a caller needs to judge the weights before loading them.
 */
export function safetensorsShapes(path: string): Record<string, number[]> {
  const bad = (why: string) => new Error(`safetensors: ${path} is not a valid safetensors file: ${why}`);
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (e) {
    throw new Error(`safetensors: cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  try {
    const size = fstatSync(fd).size;
    if (size < 8) throw bad("shorter than its 8-byte header length");
    const len = Buffer.alloc(8);
    readSync(fd, len, 0, 8, 0);
    const n = Number(len.readBigUInt64LE(0));
    if (n > size - 8) throw bad(`header length ${n} exceeds the file size ${size}`);
    const text = Buffer.alloc(n);
    readSync(fd, text, 0, n, 8);
    let header: unknown;
    try {
      header = JSON.parse(text.toString("utf8"));
    } catch (e) {
      throw bad(`header is not JSON (${(e as Error).message})`);
    }
    return Object.fromEntries(checkHeader(header, size - 8 - n, bad).map((e) => [e.name, e.shape]));
  } finally {
    closeSync(fd);
  }
}
