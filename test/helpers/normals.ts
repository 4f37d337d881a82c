// Normal draws for the statistics tests' simulations: Box-Muller on data/rng.ts's seeded generator.
import type { Rng } from "../../data/rng.js";

/** n values from N(mean, sd^2). */
export function normals(rng: Rng, n: number, mean: number, sd: number): number[] {
  return Array.from({ length: n }, () => {
    const r = Math.sqrt(-2 * Math.log(1 - rng.random()));
    return mean + sd * r * Math.cos(2 * Math.PI * rng.random());
  });
}
