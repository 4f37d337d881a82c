// rAuA, the relative area under the agreement curve (docs/method.md, "Scores"): the mean
// agreement over the intermediate stitch points. "Intermediate" is the caller's list of stitch
// points in network order (points between layers, not the raw input); by default every point
// given counts. With excludeLast, the last point (the head's input, where stitching only has
// to match B's final features) is dropped. Larger = more similar along the whole depth.

/** Mean of the per-point agreements (e.g. agreement probabilities), in [0, 1] for scores in [0, 1]. */
export function rAuA(agreements: readonly number[], opts: { excludeLast?: boolean } = {}): number {
  const points = opts.excludeLast ? agreements.slice(0, -1) : agreements;
  if (points.length === 0) throw new RangeError("rAuA: no intermediate stitch points");
  let sum = 0;
  for (const a of points) sum += a;
  return sum / points.length;
}
