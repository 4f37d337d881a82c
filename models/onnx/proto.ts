// Reading an ONNX model file: the protobuf is decoded by onnx-proto (onnx.proto compiled by
// protobufjs), never by hand; what this module adds is what the format leaves to its reader:
// tensors to libtorch tensors (raw little-endian bytes or typed fields), 64-bit integers (Long
// objects) to numbers, attributes to plain values, and external data (models over 2 GB keep their
// weights in files beside the model, onnx/external_data_helper.py) read from the model's own folder
// only, so that a crafted file cannot make stitchlab read /etc/passwd into a weight.
import { closeSync, existsSync, openSync, readSync, realpathSync, statSync } from "node:fs";
import { dirname, isAbsolute, relative, resolve, sep } from "node:path";
import onnxProto from "onnx-proto";
import { readFileNamed } from "../../io/files.js";
import { ITEM_SIZE } from "../../torch/dtype.js";
import * as torch from "../../torch/index.js";

export const { onnx } = onnxProto;
export type ModelProto = onnxProto.onnx.ModelProto;
export type GraphProto = onnxProto.onnx.IGraphProto;
export type NodeProto = onnxProto.onnx.INodeProto;
export type TensorProto = onnxProto.onnx.ITensorProto;
export type AttributeProto = onnxProto.onnx.IAttributeProto;

type Tensor = torch.Tensor;

/** A protobuf int64 (a Long object from protobufjs, or a number) as a number; beyond 2^53 it saturates, as ONNX's INT64_MAX "to the end" needs. */
export function num(v: unknown): number {
  if (typeof v === "number") return v;
  if (v && typeof v === "object" && "toNumber" in v) return (v as { toNumber(): number }).toNumber();
  if (typeof v === "string") return Number(v);
  return 0;
}

/** ONNX TensorProto.DataType to a libtorch dtype (those a vision model's graph holds). */
const DTYPES: Record<number, torch.DType | undefined> = {
  1: "float32",
  2: "uint8",
  3: "int8",
  5: "int16",
  6: "int32",
  7: "int64",
  9: "bool",
  10: "float16",
  11: "float64",
  16: "bfloat16",
};
const TYPE_NAMES: Record<number, string> = { 4: "uint16", 8: "string", 12: "uint32", 13: "uint64", 14: "complex64" };

/** The libtorch dtype of an ONNX element type, or one error naming the type and where. */
export function dtypeOf(code: number, where: string): torch.DType {
  const d = DTYPES[code];
  if (!d) throw new Error(`${where}: element type ${TYPE_NAMES[code] ?? code} is not supported`);
  return d;
}

/** Decodes an ONNX file (the protobuf only; external data are read per tensor by tensorOf). */
export function readModelProto(path: string): ModelProto {
  const bytes = readFileNamed(path, "an ONNX model");
  // A zip archive is what torch.save writes (a .pt or .pth renamed, or saved under .onnx).
  const zip = bytes[0] === 0x50 && bytes[1] === 0x4b && bytes[2] === 0x03 && bytes[3] === 0x04;
  if (zip)
    throw new Error(
      `${path} is a zip archive, as torch.save writes, not an ONNX model: give it under its own extension (.pt) with --arch, or export it with torch.onnx.export`,
    );
  try {
    return onnx.ModelProto.decode(bytes);
  } catch (e) {
    throw new Error(`${path} is not an ONNX model (its protobuf does not decode: ${(e as Error).message})`);
  }
}

/** A tensor's bytes from its external-data entries, read from a file inside the model's folder. */
function externalBytes(t: TensorProto, modelPath: string): Uint8Array {
  const entries = Object.fromEntries((t.externalData ?? []).map((e) => [e.key ?? "", e.value ?? ""]));
  const where = `${modelPath}: tensor '${t.name}'`;
  const location = entries.location;
  if (!location) throw new Error(`${where} keeps its data outside the model but names no location`);
  // Without the model's path there is no folder to confine the read to (an operator's attribute).
  if (!modelPath) throw new Error(`${where} keeps its data outside the model, where stitchlab does not read it`);
  const folder = realpathSync(dirname(resolve(modelPath)));
  const file = resolve(folder, location);
  const inside = (p: string) => {
    const r = relative(folder, p);
    return r !== "" && !r.startsWith(`..${sep}`) && r !== ".." && !isAbsolute(r);
  };
  if (isAbsolute(location) || !inside(file))
    throw new Error(`${where}: its external data '${location}' lies outside the model's folder ${folder}; refused`);
  if (!existsSync(file)) throw new Error(`${where}: its external data file ${file} is missing`);
  if (!inside(realpathSync(file)))
    throw new Error(`${where}: its external data '${location}' links outside the model's folder ${folder}; refused`);
  const offset = entries.offset ? Number(entries.offset) : 0;
  const size = statSync(file).size;
  const length = entries.length ? Number(entries.length) : size - offset;
  if (!(offset >= 0 && length >= 0 && offset + length <= size))
    throw new Error(`${where}: bytes ${offset}-${offset + length} of ${file} are asked for, and it holds ${size}`);
  const out = new Uint8Array(length);
  const fd = openSync(file, "r");
  try {
    for (let done = 0; done < length; ) {
      const n = readSync(fd, out, done, length - done, offset + done);
      if (n <= 0) throw new Error(`${where}: ${file} ended early`);
      done += n;
    }
  } finally {
    closeSync(fd);
  }
  return out;
}

/** The typed field that holds a tensor's values when raw_data is absent (onnx.proto's rules per type). */
function fieldValues(t: TensorProto, dtype: torch.DType): number[] {
  if (dtype === "float32") return t.floatData ?? [];
  if (dtype === "float64") return t.doubleData ?? [];
  if (dtype === "int64") return (t.int64Data ?? []).map(num);
  return t.int32Data ?? []; // int32, int16, int8, uint8, bool, and float16/bfloat16 as their bits
}

/**
 * A TensorProto as a libtorch tensor (on the CPU; the caller moves it). `where` names it in errors.
 * Values come from raw_data (little-endian, as the format fixes), the typed fields, or external data.
 */
export function tensorOf(t: TensorProto, modelPath: string, where = `${modelPath}: tensor '${t.name}'`): Tensor {
  const dtype = dtypeOf(t.dataType ?? 0, where);
  const shape = (t.dims ?? []).map(num);
  const count = shape.reduce((a, b) => a * b, 1);
  const raw =
    t.dataLocation === onnx.TensorProto.DataLocation.EXTERNAL
      ? externalBytes(t, modelPath)
      : t.rawData && t.rawData.length > 0
        ? t.rawData
        : null;
  const itemSize = ITEM_SIZE[dtype];
  if (raw) {
    if (raw.length !== count * itemSize)
      throw new Error(
        `${where}: shape [${shape}] of ${dtype} needs ${count * itemSize} bytes, and it has ${raw.length}`,
      );
    // fromBytes copies; a view at an unaligned offset into the protobuf's buffer is fine to copy from.
    return torch.fromBytes(new Uint8Array(raw), dtype, shape);
  }
  const values = fieldValues(t, dtype);
  if (values.length !== count)
    throw new Error(`${where}: shape [${shape}] needs ${count} values, and it has ${values.length}`);
  if (dtype === "float16" || dtype === "bfloat16") {
    const bits = new Uint16Array(values);
    return torch.fromBytes(new Uint8Array(bits.buffer), dtype, shape);
  }
  return torch.tensor(values, { dtype, shape });
}

/** An attribute's value as a plain JavaScript value (tensors stay TensorProto; graphs are refused by the ops that would need them). */
export type AttrValue = number | string | number[] | string[] | TensorProto | null;

export function attributeValue(a: AttributeProto): AttrValue {
  const T = onnx.AttributeProto.AttributeType;
  switch (a.type) {
    case T.FLOAT:
      return a.f ?? 0;
    case T.INT:
      return num(a.i);
    case T.STRING:
      return new TextDecoder().decode(a.s ?? new Uint8Array());
    case T.TENSOR:
      return a.t ?? null;
    case T.FLOATS:
      return a.floats ?? [];
    case T.INTS:
      return (a.ints ?? []).map(num);
    case T.STRINGS:
      return (a.strings ?? []).map((s) => new TextDecoder().decode(s));
    default:
      return null;
  }
}
