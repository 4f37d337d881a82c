// T's settle measure (stitch/train.ts fullRateLossFall): the loss's relative fall over the last
// quarter of the full-rate phase, checked against closed forms.
import assert from "node:assert/strict";
import { test } from "node:test";
import { fullRateLossFall } from "../stitch/train.js";

const STEP = { milestones: [1 / 3, 2 / 3], lrDecay: 0.1 };

test("the fall is measured before the first milestone, from the third quarter to the last", () => {
  // 12 epochs: the rate first falls at epoch 4, so the quarters are epochs 2 and 3 (losses 2 and 1).
  assert.equal(fullRateLossFall([4, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1], STEP), 1);
  // exp(-e / 20) over 120 epochs: the rate falls at 40; the mean over epochs 20-29 is exp(0.5) times
  // that over 30-39, whatever the loss after the milestone does.
  const decay = Array.from({ length: 120 }, (_, e) => Math.exp(-e / 20));
  const flatTail = decay.map((v, e) => (e >= 40 ? decay[39] : v));
  for (const losses of [decay, flatTail]) {
    const fall = fullRateLossFall(losses, STEP) as number;
    assert.ok(Math.abs(fall - (Math.exp(0.5) - 1)) < 1e-12, `${fall}`);
  }
  // A flat loss has not fallen.
  assert.equal(fullRateLossFall(Array(30).fill(0.7), STEP), 0);
});

test("without a fall of the rate the whole run is the full-rate phase; too short a phase or a non-finite loss gives null", () => {
  const linear = Array.from({ length: 8 }, (_, e) => 10 - e);
  // lrDecay 1: epochs 4-5 (6, 5) against 6-7 (4, 3).
  assert.equal(fullRateLossFall(linear, { milestones: [1 / 3, 2 / 3], lrDecay: 1 }), (5.5 - 3.5) / 3.5);
  assert.equal(fullRateLossFall(linear, { milestones: [], lrDecay: 0.1 }), (5.5 - 3.5) / 3.5);
  // A milestone at 0 does not end the phase; the next one (epoch 4) does.
  assert.equal(fullRateLossFall(linear, { milestones: [0, 0.5], lrDecay: 0.1 }), (8 - 7) / 7);
  // 6 epochs: the rate falls at epoch 2, a quarter of which is no epoch.
  assert.equal(fullRateLossFall([3, 2, 1, 1, 1, 1], STEP), null);
  assert.equal(fullRateLossFall([], STEP), null);
  assert.equal(fullRateLossFall([4, 3, Number.NaN, 1, 1, 1, 1, 1, 1, 1, 1, 1], STEP), null);
});
