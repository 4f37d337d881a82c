// The seed-level rule (findings/chance.ts SEED_TEST_RULE) as the reading applies it, by simulation:
// rows drawn as a run writes them, summarised, then read by beyondChance ("beyond chance") and by
// contrast ("told apart"). On rows of one distribution the rule speaks at about its level or less;
// on rows 0.1 apart with the demo's spread, at the rate its power calculation gives.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Rng } from "../data/rng.js";
import { beyondChance, SEED_TEST_ALPHA } from "../findings/chance.js";
import { contrast } from "../findings/reading.js";
import type { StitchRow } from "../findings/rows.js";
import { summarize } from "../findings/summary.js";
import { welchPower } from "../metrics/welch.js";
import { normals } from "./helpers/normals.js";
import { stitchRow } from "./helpers/rows.js";

/** One pair's replicates at layer4.1, invariance-aware SLM, as results.csv holds them. */
const rowsOf = (pair: string, front: string, values: number[]): StitchRow[] =>
  values.map((v, replicate) =>
    stitchRow({
      pair,
      front,
      point: "layer4.1",
      pointIndex: 8,
      mode: "iris",
      agreement_prob: v,
      hard_agreement: v,
      replicate,
    }),
  );

const TRIALS = 2000;
const se = (p: number) => Math.sqrt((p * (1 - p)) / TRIALS);

/** How often each statement is made over TRIALS draws, the pair's mean delta above the other's. */
function rates(delta: number, sd: number, n: number, seed: number): { beyond: number; apart: number } {
  const rng = new Rng(seed);
  let [beyond, apart] = [0, 0];
  for (let i = 0; i < TRIALS; i++) {
    const pair = rowsOf("cross-seed", "clean-s1", normals(rng, n, 0.5 + delta, sd));
    const other = normals(rng, n, 0.5, sd);
    const [chance] = beyondChance(summarize([...pair, ...rowsOf("null:untrained", "clean-s1~untrained", other)]));
    if (chance?.beyond) beyond++;
    if (contrast([...pair, ...rowsOf("cross-bias", "pixel-s1", other)], "cross-seed", "cross-bias", "slm")?.apart)
      apart++;
  }
  return { beyond: beyond / TRIALS, apart: apart / TRIALS };
}

test("beyond chance and told apart: at no more than the rule's level on rows of one distribution", () => {
  const r = rates(0, 0.08, 3, 541);
  for (const [what, rate] of Object.entries(r))
    assert.ok(rate <= SEED_TEST_ALPHA + 3 * se(SEED_TEST_ALPHA), `said ${what} in ${rate} of draws with no difference`);
  // Not a rule that never speaks: it says each now and then.
  assert.ok(r.beyond > 0.01 && r.apart > 0.01, JSON.stringify(r));
});

test("beyond chance and told apart: at the calculated power on rows 0.1 apart with the demo's spread", () => {
  const power = welchPower(0.1, 0.08, 6);
  const r = rates(0.1, 0.08, 6, 542);
  for (const [what, rate] of Object.entries(r))
    assert.ok(
      rate <= power + 3 * se(power) && rate >= power - 0.05,
      `said ${what} in ${rate} of draws, power ${power}`,
    );
});
