// A small seeded pseudo-random generator of our own, so that shuffling, augmentation draws and
// marker placement depend only on the seed, not on libtorch's generator state (which any other
// random op in the process would advance) nor on the libtorch build.
//
// Mulberry32: 32-bit state, period 2^32, good enough statistical quality for orders and offsets,
// and trivially reproducible in Python (see the constants below) should a reference need it.

/** Mixes integers into one 32-bit seed (a seed and stream ids such as the epoch). */
export function mixSeed(...parts: number[]): number {
  let h = 0x9e3779b9;
  for (const p of parts) {
    // Math.imul-based hashing (murmur3's finaliser) keeps 32-bit arithmetic exact in JS.
    h = Math.imul(h ^ (p >>> 0), 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
    // Large seeds (above 2^32) still matter: fold the high part in too.
    h ^= Math.floor(p / 0x100000000) >>> 0;
  }
  return h >>> 0;
}

export class Rng {
  #state: number;

  /** A generator seeded by one integer, or by several (e.g. seed and epoch), mixed. */
  constructor(seed: number, ...streams: number[]) {
    if (!Number.isFinite(seed)) throw new RangeError(`Rng: seed must be a finite number, got ${seed}`);
    this.#state = mixSeed(seed, ...streams);
  }

  /** The next 32-bit unsigned integer. */
  nextUint32(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }

  /** A float in [0, 1). */
  random(): number {
    return this.nextUint32() / 0x100000000;
  }

  /** An integer in [0, n), n <= 2^32 (multiply-shift: bias below 2^-32 * n, negligible here). */
  int(n: number): number {
    return Math.floor(this.random() * n);
  }

  /** k of 0..n-1 drawn without replacement, in increasing order (the first k of a permutation). */
  sample(n: number, k: number): number[] {
    return Array.from(this.permutation(n).subarray(0, k)).sort((a, b) => a - b);
  }

  /** A random permutation of 0..n-1 (Fisher-Yates). */
  permutation(n: number): Int32Array {
    const p = new Int32Array(n);
    for (let i = 0; i < n; i++) p[i] = i;
    for (let i = n - 1; i > 0; i--) {
      const j = this.int(i + 1);
      const t = p[i];
      p[i] = p[j];
      p[j] = t;
    }
    return p;
  }
}
