// PyTorch's torch.save zip format (PyTorch 1.6 and later) to and from files: reading with
// stitchlab's own unpickler (io/pickle.ts), writing through libtorch's pickler
// (torch/serialize.ts), atomically (io/files.ts).
import { pickleSave } from "../torch/serialize.js";
import { readFileNamed, writeFileAtomic } from "./files.js";
import { loadTorchArchive } from "./pickle.js";

/**
 * Loads what Python's torch.save wrote (the zip format, PyTorch 1.6 and later): a tensor, or
 * dicts / lists of tensors and plain values, e.g. a state dict. Tuples come back as arrays;
 * objects of other classes as { __class__, args, state } records (nothing is executed).
 */
export function torchLoad(path: string): unknown {
  const buf = readFileNamed(path, "torch.load");
  if (buf.byteLength < 4 || buf[0] !== 0x50 || buf[1] !== 0x4b) {
    throw new Error(
      `torch.load: ${path} is not in torch.save's zip format (PyTorch >= 1.6). ` +
        "Re-save it in Python with torch.save(obj, path) using the default format, or as safetensors.",
    );
  }
  try {
    return loadTorchArchive(buf);
  } catch (e) {
    // Whatever the archive or pickle reader found, the message names the file it was in.
    throw new Error(`torch.load: cannot read ${path}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
}

/** Saves a tensor, or dicts / lists of tensors and plain values, so that Python's torch.load reads it. */
export function torchSave(path: string, value: unknown): void {
  writeFileAtomic(path, [pickleSave(value)]);
}
