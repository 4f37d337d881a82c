// Autograd beyond Tensor's own methods: grad-mode scopes and the functional grad().
import { native } from "./native.js";
import { Tensor } from "./tensor.js";

function withGradMode<T>(enabled: boolean, fn: () => T): T {
  const prev = native.isGradEnabled();
  native.setGradEnabled(enabled);
  try {
    const r = fn();
    if (r instanceof Promise) throw new Error("noGrad/enableGrad: fn must be synchronous");
    return r;
  } finally {
    native.setGradEnabled(prev);
  }
}

/** Runs fn with gradient recording off (torch.no_grad). */
export function noGrad<T>(fn: () => T): T {
  return withGradMode(false, fn);
}
/** Runs fn with gradient recording on (torch.enable_grad). */
export function enableGrad<T>(fn: () => T): T {
  return withGradMode(true, fn);
}
export function isGradEnabled(): boolean {
  return native.isGradEnabled();
}

/**
 * Gradients of outputs with respect to inputs (torch.autograd.grad), without touching .grad.
 * Returns one tensor per input (null for an unused input when allowUnused).
 */
export function grad(
  outputs: Tensor | Tensor[],
  inputs: Tensor | Tensor[],
  opts: { gradOutputs?: (Tensor | null)[]; retainGraph?: boolean; createGraph?: boolean; allowUnused?: boolean } = {},
): (Tensor | null)[] {
  const outs = Array.isArray(outputs) ? outputs : [outputs];
  const ins = Array.isArray(inputs) ? inputs : [inputs];
  const gs = native.grad(
    outs.map((t) => t.handle),
    ins.map((t) => t.handle),
    opts.gradOutputs ? opts.gradOutputs.map((g) => (g ? g.handle : null)) : null,
    opts.retainGraph,
    opts.createGraph ?? false,
    opts.allowUnused ?? false,
  );
  return gs.map((h) => (h === null ? null : new Tensor(h)));
}
