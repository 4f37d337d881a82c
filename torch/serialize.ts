// Values to bytes in torch.save's format, through libtorch's own pickler (torch::pickle_save).
// Writing them to a file is io/'s (io/torchsave.ts); this is the part that needs the addon.
import { native } from "./native.js";
import { Tensor } from "./tensor.js";

function toHandles(v: unknown): unknown {
  // Marked for the addon (runtime.cc): a handle is a number, and numbers stay numbers there.
  if (v instanceof Tensor) return { __stitchlab_tensor__: v.handle };
  if (v === null || typeof v !== "object") return v;
  if (Array.isArray(v)) return v.map(toHandles);
  // fromEntries defines own properties: a key "__proto__" stays a key.
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, toHandles(x)]));
}

/** A tensor, or dicts / lists of tensors and plain values, as the bytes of a torch.save zip archive. */
export function pickleSave(value: unknown): Uint8Array {
  return new Uint8Array(native.pickleSave(toHandles(value)));
}
