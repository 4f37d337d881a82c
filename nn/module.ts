// Module: named parameters, buffers and children with PyTorch's dotted paths
// ("layer1.0.conv1.weight"), train/eval, freezing, and state dicts checked name by name and
// shape by shape, so checkpoints move between stitchlab and PyTorch unchanged.
import * as torch from "../torch/index.js";

type Tensor = torch.Tensor;

/**
 * Runs fn with the modules in eval mode, then gives each back the mode it had (also when fn
 * throws). The same module may appear twice (a model stitched with itself).
 */
export function inEvalMode<T>(modules: Module[], fn: () => T): T {
  const modes = modules.map((m) => m.training);
  for (const m of modules) m.eval();
  try {
    return fn();
  } finally {
    for (const [i, m] of modules.entries()) m.train(modes[i]);
  }
}

export abstract class Module {
  training = true;
  readonly #params = new Map<string, Tensor>();
  readonly #buffers = new Map<string, Tensor>();
  readonly #children = new Map<string, Module>();

  /** Registers a trainable tensor (requires grad) under `name`; it lives until the module is disposed. */
  protected param(name: string, t: Tensor): Tensor {
    this.#params.set(name, torch.keep(t.requiresGrad ? t : t.requiresGrad_(true)));
    return t;
  }
  /** Registers persistent state that is not trained (running statistics, counters). */
  protected buffer(name: string, t: Tensor): Tensor {
    this.#buffers.set(name, torch.keep(t));
    return t;
  }
  /** Registers a child module under `name`. */
  protected child<M extends Module>(name: string, m: M): M {
    this.#children.set(name, m);
    return m;
  }

  /** Parameters as [dotted name, tensor], in PyTorch's order (own first, then children's). */
  namedParameters(prefix = ""): [string, Tensor][] {
    const out: [string, Tensor][] = [];
    for (const [n, p] of this.#params) out.push([prefix + n, p]);
    for (const [n, c] of this.#children) out.push(...c.namedParameters(`${prefix}${n}.`));
    return out;
  }
  namedBuffers(prefix = ""): [string, Tensor][] {
    const out: [string, Tensor][] = [];
    for (const [n, b] of this.#buffers) out.push([prefix + n, b]);
    for (const [n, c] of this.#children) out.push(...c.namedBuffers(`${prefix}${n}.`));
    return out;
  }
  parameters(): Tensor[] {
    return this.namedParameters().map(([, p]) => p);
  }
  namedModules(prefix = ""): [string, Module][] {
    const out: [string, Module][] = [[prefix.replace(/\.$/, ""), this]];
    for (const [n, c] of this.#children) out.push(...c.namedModules(`${prefix}${n}.`));
    return out;
  }
  /** A direct or nested child by dotted path, or undefined. */
  getSubmodule(path: string): Module | undefined {
    let m: Module | undefined = this;
    for (const part of path.split(".")) {
      if (!m) return undefined;
      m = m.#children.get(part);
    }
    return m;
  }

  /** Sets training mode (batch statistics in batch norm, dropout active) here and below. */
  train(mode = true): this {
    this.training = mode;
    for (const c of this.#children.values()) c.train(mode);
    return this;
  }
  eval(): this {
    return this.train(false);
  }
  /** Freezes (false) or unfreezes (true) every parameter. */
  requiresGrad_(flag: boolean): this {
    for (const p of this.parameters()) p.requiresGrad_(flag);
    return this;
  }

  /**
   * Parameters and buffers by dotted name, in PyTorch's state_dict order (per module: its
   * parameters, its buffers, then its children). The tensors are the module's own (no copy).
   */
  stateDict(prefix = ""): Record<string, Tensor> {
    const out: Record<string, Tensor> = {};
    for (const [n, p] of this.#params) out[prefix + n] = p;
    for (const [n, b] of this.#buffers) out[prefix + n] = b;
    for (const [n, c] of this.#children) Object.assign(out, c.stateDict(`${prefix}${n}.`));
    return out;
  }

  /**
   * Copies tensors into the module's parameters and buffers by name. Strict by default: every
   * missing key, unexpected key and shape mismatch is listed in one error and nothing is copied.
   */
  loadStateDict(
    sd: Record<string, Tensor>,
    opts: { strict?: boolean } = {},
  ): { missing: string[]; unexpected: string[] } {
    const own = this.stateDict();
    const missing = Object.keys(own).filter((k) => !(k in sd));
    const unexpected = Object.keys(sd).filter((k) => !(k in own));
    const mismatched = Object.keys(own)
      .filter((k) => k in sd && sd[k].shape.join(",") !== own[k].shape.join(","))
      .map((k) => `${k}: checkpoint [${sd[k].shape.join(", ")}] vs model [${own[k].shape.join(", ")}]`);
    const strict = opts.strict ?? true;
    if (mismatched.length > 0 || (strict && (missing.length > 0 || unexpected.length > 0))) {
      const parts = [];
      if (missing.length) parts.push(`missing keys: ${missing.join(", ")}`);
      if (unexpected.length) parts.push(`unexpected keys: ${unexpected.join(", ")}`);
      if (mismatched.length) parts.push(`shape mismatches: ${mismatched.join("; ")}`);
      throw new Error(`loadStateDict: the state dict does not fit ${this.constructor.name}: ${parts.join(" | ")}`);
    }
    torch.noGrad(() => {
      for (const [k, dst] of Object.entries(own)) {
        if (!(k in sd)) continue;
        torch.tidy(() => {
          dst.copy_(sd[k].to(dst.dtype));
        });
      }
    });
    return { missing, unexpected };
  }

  /** Moves parameters and buffers to a device in place of the old ones (module.to(device)). */
  to(device: torch.Device): this {
    const move = (m: Map<string, Tensor>, isParam: boolean) => {
      for (const [n, t] of m) {
        if (t.device === device) continue;
        const moved = torch.noGrad(() => torch.keep(t.to(device).detach()));
        // Already there under another name ("cuda" for a tensor on cuda:0, libtorch's current
        // GPU): the same tensor stays, so handles held to it (an optimiser's) stay valid.
        if (moved.device === t.device) {
          moved.dispose();
          continue;
        }
        if (isParam) moved.requiresGrad_(t.requiresGrad);
        t.dispose();
        m.set(n, moved);
      }
    };
    move(this.#params, true);
    move(this.#buffers, false);
    for (const c of this.#children.values()) c.to(device);
    return this;
  }
  /** Own parameter or buffer by name. Layers read their tensors through this at forward time, so a move with to() is seen. */
  protected tensor(name: string): Tensor;
  protected tensor(name: string, optional: true): Tensor | null;
  protected tensor(name: string, optional = false): Tensor | null {
    const t = this.#params.get(name) ?? this.#buffers.get(name) ?? null;
    if (!t && optional) return null;
    if (!t) throw new Error(`${this.constructor.name} has no parameter or buffer '${name}'`);
    return t;
  }

  /** Frees every parameter and buffer. */
  dispose(): void {
    for (const t of this.#params.values()) t.dispose();
    for (const t of this.#buffers.values()) t.dispose();
    for (const c of this.#children.values()) c.dispose();
  }

  abstract forward(x: Tensor): Tensor;
}
