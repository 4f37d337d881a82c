// The grounding study (issue 40): graded marker agreement in training, Spearman's rho of each
// measure with the fronts' measured reliance, and its wording in the reading.
import assert from "node:assert/strict";
import { test } from "node:test";
import { planMarkers } from "../data/shortcuts.js";
import { groundingLines, groundingRows, partialSpearman, spearman } from "../findings/grounding.js";
import { reading } from "../findings/reading.js";
import { groundingCsv } from "../report/csv.js";
import type { StitchRow } from "../report/types.js";
import { resolveTrainConfig, trainSettingsSchema } from "../train/config.js";
import { stitchRow } from "./helpers/rows.js";

test("spearman: monotone orders give +1 and -1; ties take their average rank (closed form)", () => {
  assert.equal(spearman([1, 2, 3, 4], [10, 20, 30, 40]), 1);
  assert.equal(spearman([1, 2, 3, 4], [0.9, 0.5, 0.4, 0.1]), -1);
  // b's ranks with the tie at 7: [1, 2, 3.5, 5, 3.5]; Pearson with [1..5] is 8 / sqrt(10 * 9.5).
  assert.ok(Math.abs(spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) - 8 / Math.sqrt(95)) < 1e-12);
  assert.ok(Number.isNaN(spearman([1, 2, 3], [4, 4, 4])), "all ties: no rank correlation");
  assert.throws(() => spearman([1, 2], [1]), /2 against 1/);
});

test("marker agreement: a fixed fraction of images carry their own class's marker, the rest a class at random", () => {
  const K = 10;
  const n = 4000;
  const labels = Array.from({ length: n }, (_, i) => i % K);
  const colourOf = (plan: ReturnType<typeof planMarkers>, i: number) =>
    Array.from(plan.colors.slice(3 * i, 3 * i + 3)).join();
  const full = planMarkers(labels, K, 32, 32, { kind: "pixel", seed: 3 });
  const own = (i: number) => colourOf(full, i);
  const share = (plan: ReturnType<typeof planMarkers>) =>
    labels.filter((_, i) => colourOf(plan, i) === own(i)).length / n;
  // At 1 the plan is the protocol's, draw for draw (earlier cache entries stand).
  assert.deepEqual(planMarkers(labels, K, 32, 32, { kind: "pixel", seed: 3, agreement: 1 }), full);
  for (const p of [0, 0.25, 0.5, 0.75]) {
    const plan = planMarkers(labels, K, 32, 32, { kind: "pixel", seed: 3, agreement: p });
    // Agreeing by construction (p) or by chance (1/K of the rest); 4000 images: sd about 0.008.
    const want = p + (1 - p) / K;
    assert.ok(Math.abs(share(plan) - want) < 0.035, `p ${p}: own-class share ${share(plan)} vs ${want}`);
    // Locations are drawn as without agreement: only the colours differ.
    assert.deepEqual(plan.ys, full.ys);
  }
  // Which images agree is the seed's, not the read's: an agreeing image agrees at every draw.
  const reads = [0, 1, 2].map((draw) =>
    planMarkers(labels, K, 32, 32, { kind: "pixel", seed: 3, agreement: 0.5, draw }),
  );
  const agreeAll = labels.filter((_, i) => reads.every((r) => colourOf(r, i) === own(i))).length / n;
  // Fixed agreeing half (0.5) plus the rest agreeing by chance at all three reads (0.5 / 1000).
  assert.ok(agreeAll > 0.45 && agreeAll < 0.56, `agree at every read: ${agreeAll}`);
  assert.throws(() => planMarkers(labels, K, 32, 32, { kind: "rand", agreement: 0.5 }), /pixel and pixel-loc/);
  assert.throws(() => planMarkers(labels, K, 32, 32, { kind: "pixel", agreement: 1.5 }), /not in \[0, 1\]/);
});

test("markerAgreement: in the config (and its key) only below 1, and only with a class marker", () => {
  const data = { dataset: "fashion-mnist", root: null, imageSize: null, limit: null, testLimit: null, markerScale: 2 };
  const settings = (o: Record<string, unknown>) => trainSettingsSchema.parse({ arch: "resnet18", ...o });
  assert.equal("markerAgreement" in resolveTrainConfig(settings({ shortcut: "pixel" }), data), false);
  assert.equal(resolveTrainConfig(settings({ shortcut: "pixel", markerAgreement: 0.25 }), data).markerAgreement, 0.25);
  assert.throws(
    () => resolveTrainConfig(settings({ markerAgreement: 0.5 }), data),
    /markerAgreement 0.5 .*no shortcut/,
  );
  assert.throws(() => resolveTrainConfig(settings({ shortcut: "rand", markerAgreement: 0.5 }), data), /rand shortcut/);
});

/**
 * Five fronts per replicate: reliance r, an invariance-aware score falling with it, a standard one
 * that does not; the fronts' accuracy in an order of its own (k * 3 mod 5), their agreement alone
 * with the back falling with reliance as the invariance-aware score does.
 */
function study(replicates: number): StitchRow[] {
  const out: StitchRow[] = [];
  for (let rep = 0; rep < replicates; rep++)
    for (const [k, p] of [0, 25, 50, 75, 100].entries()) {
      const reliance = 0.1 * k + 0.01 * rep;
      const base = {
        front: `pixel-p${p}`,
        pair: `agree-${p}`,
        replicate: rep,
        front_reliance: reliance,
        front_clean_accuracy: 0.8 + 0.01 * ((k * 3) % 5),
        front_alone_agreement_prob: 0.7 - reliance,
        test_data: "pixel",
      };
      out.push(stitchRow({ ...base, mode: "iris", agreement_prob: 0.9 - reliance, cka: 0.5 + 0.01 * ((k + rep) % 3) }));
      // Standard stitching: high everywhere, in an order unrelated to reliance.
      out.push(stitchRow({ ...base, mode: "standard", agreement_prob: 0.9 + 0.01 * ((k * 2 + rep) % 5) }));
    }
  return out;
}

test("grounding: rho per replicate over its fronts, its interval over replicates, and the reading's words", () => {
  const rows = study(3);
  const g = groundingRows(rows);
  const by = new Map(g.map((r) => [r.measure, r]));
  assert.deepEqual([...by.keys()].sort(), ["cka", "front accuracy", "front alone", "iris slm", "standard slm"]);
  const ia = by.get("iris slm");
  assert.ok(ia);
  assert.deepEqual(ia.rhos, [-1, -1, -1]);
  assert.equal(ia.fronts, 5);
  assert.equal(ia.rho.mean, -1);
  const std = by.get("standard slm");
  assert.ok(std && std.rho.hi > 0, "standard's order is unrelated to reliance: its interval reaches above 0");
  const lines = groundingLines(g);
  assert.match(lines[0] ?? "", /^Grounding: .*more reliance, less similar.*5 or more fronts.*3 replicates/);
  assert.match(
    lines[1] ?? "",
    /^Grounding at layer2\.1: invariance-aware SLM -1\.00 \[-1\.00, -1\.00\] \(held -1\.00 .*\); .*Baselines: front-alone agreement -1\.00 .*; front accuracy .*Reliance ordered as expected \(interval below 0\): invariance-aware SLM\. Lowest: invariance-aware SLM, told apart from the next\.$/,
  );
  // The baseline's rho is there to beat: here the fronts' agreement alone ranks them as well.
  assert.equal(by.get("front alone")?.rho.mean, -1);
  assert.ok(Number.isNaN(by.get("front accuracy")?.partial.mean ?? 0), "accuracy held against itself: none");
  // The reading carries them; the CSV has one line per measure.
  const said = reading(rows);
  assert.ok(said.some((l) => l.startsWith("Grounding: ")));
  assert.equal(groundingCsv(g).trim().split("\n").length, 6);
  assert.match(groundingCsv(g), /layer2\.1,pixel,iris slm,5,3,-1,-1,-1,-1;-1;-1,-1,-1,-1,-1;-1;-1$/m);
});

test("grounding: none without three fronts of measured reliance; null and identical pairs take no part", () => {
  // The demo's shape: one shortcut front beside a clean one.
  const demo = [
    stitchRow({ front: "pixel-s1", pair: "cross-bias", front_reliance: 0.6 }),
    stitchRow({ front: "clean-s1", pair: "cross-seed", front_reliance: null }),
  ];
  assert.deepEqual(groundingRows(demo), []);
  assert.equal(groundingLines([]).length, 0);
  assert.ok(!reading(demo).some((l) => l.startsWith("Grounding")));
  // Two real fronts and a null and an identical one with reliance: still fewer than three.
  const mixed = [
    stitchRow({ front: "a", pair: "agree-0", front_reliance: 0 }),
    stitchRow({ front: "b", pair: "agree-100", front_reliance: 0.5 }),
    stitchRow({ front: "n", pair: "null:untrained", front_reliance: 0.2 }),
    stitchRow({ front: "clean-s0", pair: "identical", front_reliance: 0.1 }),
  ];
  assert.deepEqual(groundingRows(mixed), []);
  // One replicate: a rho without an interval, said so.
  const one = groundingLines(groundingRows(study(1)));
  assert.match(one[1] ?? "", /invariance-aware SLM -1\.00 \(one replicate\)/);
});

test("partial Spearman: the closed form on ranks, and a measure that only follows accuracy loses its rho once accuracy is held", () => {
  // x, y, z ranks: y = x, z unrelated in part. r_xy = 1 leaves partial 1 whatever z (where defined).
  assert.ok(Math.abs(partialSpearman([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) - 1) < 1e-12);
  // By hand: x = [1..5], y = [2, 1, 4, 3, 5], z = [1, 3, 2, 5, 4]; 1 - 6 sum d^2 / 120 gives r_xy 0.8,
  // r_xz 0.8, r_yz 0.3: (0.8 - 0.8 * 0.3) / sqrt((1 - 0.64) (1 - 0.09)) = 0.56 / sqrt(0.3276).
  const x = [1, 2, 3, 4, 5];
  const [y, z] = [
    [2, 1, 4, 3, 5],
    [1, 3, 2, 5, 4],
  ];
  assert.ok(Math.abs(spearman(x, y) - 0.8) < 1e-12 && Math.abs(spearman(x, z) - 0.8) < 1e-12);
  assert.ok(Math.abs(spearman(y, z) - 0.3) < 1e-12);
  assert.ok(Math.abs(partialSpearman(x, y, z) - 0.56 / Math.sqrt(0.3276)) < 1e-12);
  assert.ok(Number.isNaN(partialSpearman(x, x, x)), "z orders x completely: undefined");
  // A measure that is the fronts' accuracy and nothing else: rho follows accuracy's; held, it falls.
  const rows = study(3).map((r) =>
    r.mode === "standard" ? { ...r, agreement_prob: r.front_clean_accuracy as number } : r,
  );
  const std = groundingRows(rows).find((g) => g.measure === "standard slm");
  assert.ok(std);
  assert.equal(std.rho.mean, groundingRows(rows).find((g) => g.measure === "front accuracy")?.rho.mean);
  assert.ok(std.partialRhos.every(Number.isNaN), "held against the accuracy it copies: undefined");
});

test("grounding: not read where the fronts' reliance barely differs (no study was designed there)", () => {
  // Three Pixel fronts trained alike: reliance 0.60, 0.62, 0.63.
  const alike = [0.6, 0.62, 0.63].flatMap((reliance, k) =>
    [0, 1, 2].map((replicate) =>
      stitchRow({ front: `pixel-s${k}`, pair: `cross-bias-${k}`, front_reliance: reliance, replicate, mode: "iris" }),
    ),
  );
  assert.deepEqual(groundingRows(alike), []);
  assert.ok(!reading(alike).some((l) => l.startsWith("Grounding")));
  // The same fronts 0.1 apart end to end are read.
  const graded = alike.map((r) => ({ ...r, front_reliance: 0.5 + 0.05 * Number(r.front.slice(-1)) }));
  assert.ok(groundingRows(graded).length > 0);
});

test("grounding: a replicate short of fronts has no rho and the others stand; seeds are averaged; the interval stays in [-1, 1]", () => {
  // Replicate 2 loses a front's rows down to two fronts (failed tasks): NaN there, n = 2 from the rest.
  const rows = study(3).filter((r) => !(r.replicate === 2 && ["pixel-p0", "pixel-p25", "pixel-p50"].includes(r.front)));
  const ia = groundingRows(rows).find((g) => g.measure === "iris slm");
  assert.ok(ia);
  assert.deepEqual(ia.rhos.slice(0, 2), [-1, -1]);
  assert.ok(Number.isNaN(ia.rhos[2]));
  assert.equal(ia.rho.n, 2);
  // Two stitching seeds of one front: their mean is ranked, not whichever row came first.
  const seeded = study(1).flatMap((r) =>
    r.mode === "iris" && r.front === "pixel-p0"
      ? [
          { ...r, agreement_prob: 0.1, seed: 0 },
          { ...r, agreement_prob: 0.95, seed: 1 },
        ]
      : [r],
  );
  // pixel-p0 (least reliance) averages 0.525, below pixel-p25's 0.8: no longer a perfect -1.
  const mixed = groundingRows(seeded).find((g) => g.measure === "iris slm");
  assert.ok(mixed && mixed.rhos[0] !== undefined && mixed.rhos[0] > -1);
  // Wide spreads: the bounds are clipped to rho's range.
  for (const g of groundingRows(
    study(3).map((r) =>
      r.replicate === 1 && r.mode === "standard" ? { ...r, agreement_prob: 1 - r.agreement_prob } : r,
    ),
  ))
    assert.ok(g.rho.lo >= -1 && g.rho.hi <= 1, `${g.measure}: [${g.rho.lo}, ${g.rho.hi}]`);
});
