// Test helpers: seeded input generation (independent of libtorch's generator, so inputs do not
// change when an operator under test draws random numbers) and tensor comparison.
import assert from "node:assert/strict";
import { Rng } from "../../data/rng.js";
import { type TypedArray, typedArrayFrom } from "../../torch/dtype.js";
import * as torch from "../../torch/index.js";

/** Uniform numbers in [0, 1) from the project's seeded generator (data/rng.ts). */
export function rng(seed: number): () => number {
  const r = new Rng(seed);
  return () => r.random();
}

/** A 32-bit FNV-1a hash of a string: a per-name seed, so adding a case does not change the others. */
export function hashSeed(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/** Standard normal samples by Box-Muller from a uniform source. */
export function normals(u: () => number, n: number): number[] {
  const out: number[] = [];
  while (out.length < n) {
    const r = Math.sqrt(-2 * Math.log(1 - u()));
    const th = 2 * Math.PI * u();
    out.push(r * Math.cos(th), r * Math.sin(th));
  }
  return out.slice(0, n);
}

type Gen =
  | { kind: "normal"; scale: number }
  | { kind: "uniform"; low: number; high: number }
  | { kind: "awayFromZero"; margin: number } // normal samples pushed at least `margin` away from 0
  | { kind: "int"; low: number; high: number } // integers in [low, high)
  | { kind: "bool" }
  | { kind: "values"; values: number[] };

/** How to make one input: its shape, its dtype and how its values are drawn. */
export interface InputSpec {
  shape: number[];
  dtype: torch.DType;
  gen: Gen;
}

export type FloatDType = "float32" | "float64";
/** Standard normal samples (times scale). */
export const normal = (shape: number[], dtype: FloatDType = "float32", scale = 1): InputSpec => ({
  shape,
  dtype,
  gen: { kind: "normal", scale },
});
/** Uniform samples in [low, high): positive by default (for log, sqrt, pow, variances). */
export const uniform = (shape: number[], low = 0.5, high = 2, dtype: FloatDType = "float32"): InputSpec => ({
  shape,
  dtype,
  gen: { kind: "uniform", low, high },
});
export const positive = (shape: number[], dtype: FloatDType = "float32"): InputSpec => uniform(shape, 0.5, 2, dtype);
/** Normal samples at least `margin` away from zero (for kinks at 0: relu, abs, sign). */
export const awayFromZero = (shape: number[], dtype: FloatDType = "float32", margin = 0.05): InputSpec => ({
  shape,
  dtype,
  gen: { kind: "awayFromZero", margin },
});
/** Integers in [low, high), int64 by default (class indices, index tensors). */
export const ints = (shape: number[], low: number, high: number, dtype: torch.DType = "int64"): InputSpec => ({
  shape,
  dtype,
  gen: { kind: "int", low, high },
});
export const bools = (shape: number[]): InputSpec => ({ shape, dtype: "bool", gen: { kind: "bool" } });
/** Given values (row-major). */
export const values = (vals: number[], shape: number[] = [vals.length], dtype: torch.DType = "float32"): InputSpec => ({
  shape,
  dtype,
  gen: { kind: "values", values: vals },
});

/** The typed array holding a spec's values, drawn from a PRNG seeded by `seed`. */
export function generate(spec: InputSpec, seed: number): TypedArray {
  const n = spec.shape.reduce((a, b) => a * b, 1);
  const u = rng(seed);
  let v: number[];
  const g = spec.gen;
  switch (g.kind) {
    case "normal":
      v = normals(u, n).map((x) => x * g.scale);
      break;
    case "awayFromZero":
      v = normals(u, n).map((x) => Math.sign(x || 1) * (Math.abs(x) + g.margin));
      break;
    case "uniform":
      v = Array.from({ length: n }, () => g.low + (g.high - g.low) * u());
      break;
    case "int":
      v = Array.from({ length: n }, () => g.low + Math.floor((g.high - g.low) * u()));
      break;
    case "bool":
      v = Array.from({ length: n }, () => (u() < 0.5 ? 1 : 0));
      break;
    case "values":
      if (g.values.length !== n) throw new Error(`values(): ${g.values.length} values for shape [${spec.shape}]`);
      v = g.values;
      break;
  }
  return typedArrayFrom(spec.dtype, v);
}

/** A tensor of the spec's dtype and shape holding `data` (from generate). */
export function tensorOf(spec: InputSpec, data: TypedArray): torch.Tensor {
  return torch.tensor(data, { shape: spec.shape, dtype: spec.dtype });
}

/** A seeded input tensor in one call. */
export function make(spec: InputSpec, seed: number): torch.Tensor {
  return tensorOf(spec, generate(spec, seed));
}

export interface Tolerance {
  rtol?: number;
  /** Absolute tolerance, multiplied by max(1, largest |expected|) so that it scales with the result. */
  atol?: number;
}

const DEFAULT_TOL: Partial<Record<torch.DType, Required<Tolerance>>> = {
  float32: { rtol: 1e-5, atol: 1e-5 },
  float64: { rtol: 1e-10, atol: 1e-10 },
  float16: { rtol: 1e-3, atol: 1e-3 },
  bfloat16: { rtol: 1e-2, atol: 1e-2 },
};

function asNumbers(t: torch.Tensor): number[] {
  return Array.from(t.toTypedArray() as ArrayLike<number | bigint>, Number);
}

/**
 * Asserts that actual matches expected: same shape, same dtype (unless checkDtype is false),
 * integers and booleans exactly, floats within |a - e| <= atol * max(1, max|e|) + rtol * |e|
 * (NaN where NaN is expected, infinities equal).
 */
export function assertClose(
  actual: torch.Tensor,
  expected: torch.Tensor,
  opts: Tolerance & { label?: string; checkDtype?: boolean } = {},
): void {
  const label = opts.label ? `${opts.label}: ` : "";
  assert.deepEqual(actual.shape, expected.shape, `${label}shape [${actual.shape}] != expected [${expected.shape}]`);
  if (opts.checkDtype ?? true)
    assert.equal(actual.dtype, expected.dtype, `${label}dtype ${actual.dtype} != expected ${expected.dtype}`);
  if (!torch.isFloating(expected.dtype) && !torch.isFloating(actual.dtype)) {
    // As BigInts, so that int64 values beyond 2^53 compare exactly.
    const big = (t: torch.Tensor) =>
      Array.from(t.toTypedArray() as ArrayLike<number | bigint>, (v) => (typeof v === "bigint" ? v : BigInt(v)));
    const a = big(actual);
    const e = big(expected);
    for (let i = 0; i < e.length; i++)
      if (a[i] !== e[i]) assert.fail(`${label}element ${i}: ${a[i]} != expected ${e[i]} (exact comparison)`);
    return;
  }
  const a = asNumbers(actual);
  const e = asNumbers(expected);
  const def = DEFAULT_TOL[expected.dtype] ?? DEFAULT_TOL[actual.dtype] ?? DEFAULT_TOL.float32!;
  const rtol = opts.rtol ?? def.rtol;
  const scale = Math.max(1, ...e.filter(Number.isFinite).map(Math.abs));
  const atol = (opts.atol ?? def.atol) * scale;
  let worst = -1;
  let worstExcess = 0;
  for (let i = 0; i < e.length; i++) {
    const x = a[i];
    const y = e[i];
    if (Number.isNaN(y) || !Number.isFinite(y)) {
      if (!Object.is(x, y) && !(Number.isNaN(x) && Number.isNaN(y)))
        assert.fail(`${label}element ${i}: ${x} != expected ${y}`);
      continue;
    }
    const excess = Math.abs(x - y) - (atol + rtol * Math.abs(y));
    if (!(excess <= 0) && (worst < 0 || excess > worstExcess || Number.isNaN(excess))) {
      worst = i;
      worstExcess = excess;
    }
  }
  if (worst >= 0) {
    const bad = e.filter((y, i) => Math.abs(a[i] - y) > atol + rtol * Math.abs(y) || Number.isNaN(a[i])).length;
    assert.fail(
      `${label}${bad} of ${e.length} elements differ; worst at ${worst}: ${a[worst]} vs expected ${e[worst]} ` +
        `(|diff| ${Math.abs(a[worst] - e[worst]).toExponential(3)}, rtol ${rtol}, atol ${atol.toExponential(3)})`,
    );
  }
}
