// Deterministic memory: a garbage collector does not see libtorch's native memory promptly,
// so tensors can be freed explicitly (dispose) or by scope (tidy), as in tfjs. Tensors left
// to the collector are still freed by the handle's finaliser, and the addon reports their
// native bytes to V8 so that collections happen when native memory grows.
import { native } from "./native.js";

/** Anything a scope can free. */
export interface Disposable {
  dispose(): void;
  /** The scope that will free this, if any (managed by this module). */
  _scope: Scope | null;
  /** Tensors: give up the native handle, so that a scope frees its tensors in one native call. */
  _release?(): unknown;
  /**
   * Tensors: called when this is made outside every scope or leaves them all alive (keep(), or
   * the result of the outermost tidy), from which point the garbage collector may free it. A
   * tensor in a scope carries no finaliser: a weak reference per tensor cost more than the
   * kernel of a small operator (issue 16).
   */
  _escape?(): void;
}

// A scope is the list of what was made in it; an entry whose `_scope` no longer points at the
// scope (disposed early, kept, moved out) is skipped when the scope closes. A list rather than a
// set: a push per tensor made and nothing per early dispose, the cheapest bookkeeping for the
// small operators whose host cost issue 16 measures.
type Scope = Disposable[];
const scopes: Scope[] = [];

/**
 * Called by every newly created tensor: the innermost open scope takes ownership, or, outside
 * every scope, the garbage collector may free it.
 */
export function track(t: Disposable): void {
  const s = scopes[scopes.length - 1];
  if (s) {
    s.push(t);
    t._scope = s;
  } else t._escape?.();
}

/** Removes a tensor from scope management: it lives until disposed or collected. */
export function keep<T extends Disposable>(t: T): T {
  if (t._scope !== null) {
    t._scope = null;
    t._escape?.();
  }
  return t;
}

/** Called when a tensor is disposed early, so its scope forgets it. */
export function untrack(t: Disposable): void {
  t._scope = null;
}

function collect(value: unknown, out: Set<Disposable>, depth = 0): void {
  if (value === null || typeof value !== "object" || depth > 8) return;
  if ("_scope" in value && typeof (value as Disposable).dispose === "function") {
    out.add(value as Disposable);
    return;
  }
  if (Array.isArray(value)) for (const v of value) collect(v, out, depth + 1);
  else if (value instanceof Map) for (const v of value.values()) collect(v, out, depth + 1);
  else if (Object.getPrototypeOf(value) === Object.prototype)
    for (const v of Object.values(value)) collect(v, out, depth + 1);
}

// A closing scope frees its tensors in one native call per FREE_BATCH: their handles (numbers)
// are written into this buffer, which the addon reads directly, rather than passed as an array
// that it would read one napi call per element.
const FREE_BATCH = 1024;
const freeBuffer = new Float64Array(new ArrayBuffer(FREE_BATCH * 8));
let freeBufferGiven = false;
function freeBuffered(n: number): void {
  if (!freeBufferGiven) {
    native.setFreeBuffer(freeBuffer);
    freeBufferGiven = true;
  }
  native.freeBuffered(n);
}

/**
 * Runs fn in a scope: every tensor created inside is disposed when fn returns, except the
 * tensors found in its result (a tensor, or arrays, maps and plain objects holding tensors),
 * which move to the enclosing scope. fn must be synchronous: a scope cannot follow an await.
 */
export function tidy<T>(fn: () => T): T {
  const scope: Scope = [];
  scopes.push(scope);
  let result: T;
  try {
    result = fn();
  } catch (e) {
    scopes.pop();
    for (const t of scope) {
      if (t._scope !== scope) continue;
      t._scope = null;
      t.dispose();
    }
    throw e;
  }
  scopes.pop();
  if (result instanceof Promise) {
    throw new Error("tidy(fn): fn returned a Promise; scopes only work with synchronous code");
  }
  // Most scopes return nothing or a number: no set to build then.
  let kept: Set<Disposable> | null = null;
  if (result !== null && typeof result === "object") {
    kept = new Set<Disposable>();
    collect(result, kept);
  }
  const parent = scopes[scopes.length - 1] ?? null;
  let n = 0;
  for (const t of scope) {
    if (t._scope !== scope) continue;
    if (kept?.has(t)) {
      t._scope = parent;
      if (parent) parent.push(t);
      else t._escape?.();
    } else {
      t._scope = null;
      if (!t._release) {
        // Anything else frees itself (its dispose could open a scope, which would reuse the buffer).
        if (n) freeBuffered(n);
        n = 0;
        t.dispose();
      } else {
        const h = t._release();
        if (h === null) continue;
        if (n === FREE_BATCH) {
          freeBuffered(n);
          n = 0;
        }
        freeBuffer[n++] = h as number;
      }
    }
  }
  if (n) freeBuffered(n);
  return result;
}

/** Disposes every tensor found in value (a tensor, or arrays, maps and plain objects of them). */
export function dispose(value: unknown): void {
  const found = new Set<Disposable>();
  collect(value, found);
  for (const t of found) t.dispose();
}

/**
 * Live tensor handles; the native bytes kept alive by the tensors the garbage collector may free
 * (those outside every scope: CPU storages, each counted once), which V8 is told of; and how
 * many handles the garbage collector has freed since the start (tensors nobody disposed: a
 * path that leaks shows up here, even though the collector frees it in the end).
 */
export function memory(): {
  liveHandles: number;
  accountedBytes: number;
  collectedHandles: number;
  scopeDepth: number;
} {
  return { ...native.stats(), scopeDepth: scopes.length };
}
