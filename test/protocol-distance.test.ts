// The fast protocol's distance from the settled one, read where the answer is given
// (findings/protocol-distance.ts) from the protocol study's record (bench/protocol.ts).
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { stringify } from "yaml";
import { COMPARE_DEFAULTS } from "../experiments/compare.js";
import { compareProtocolLine, demoProtocolLine, demoSettings, protocolRecord } from "../findings/protocol-distance.js";
import { repoRoot } from "../io/files.js";

const root = mkdtempSync(join(tmpdir(), "stitchlab-distance-"));
after(() => rmSync(root, { recursive: true, force: true }));
mkdirSync(join(root, "bench", "results"), { recursive: true });
mkdirSync(join(root, "presets"));

const demo = { iris: { limit: 48, start: "uniform", target: 0.2 }, stitch: { limit: 48, epochs: 120, lr: 0.01 } };
const writeDemo = (settings: typeof demo) =>
  writeFileSync(join(root, "presets", "demo.yaml"), stringify({ name: "demo", ...settings }));
const record = (shipped: unknown, differ: string[] = []) => ({
  scale: "demo",
  replicates: 3,
  shipped,
  distances: [
    { setting: "recipe-reference", maxAbs: 0.3, at: "cross-bias layer2.1 iris", differ: ["x"] },
    { setting: "shipped", maxAbs: 0.0312, at: "cross-seed layer4.1 iris", differ },
  ],
});
const writeRecord = (scale: string, r: unknown) =>
  writeFileSync(join(root, "bench", "results", `protocol-${scale}.json`), JSON.stringify(r));

test("the demo's line gives the shipped setting's measured distance, and says unchecked once the defaults change", () => {
  writeDemo(demo);
  assert.match(
    demoProtocolLine(root),
    /not yet checked against the settled protocol \(npm run bench -- protocol --scale demo\)/,
  );
  // Recorded with the keys in another order: the same settings.
  writeRecord("demo", record({ stitch: { lr: 0.01, epochs: 120, limit: 48 }, iris: demo.iris }));
  assert.equal(
    demoProtocolLine(root),
    "  protocol   fast: within 0.031 of the settled protocol (768 IRIs and images per set, T 1,920 steps, IRIs from noise) on the demo's pairs (three fronts each) (largest at cross-seed layer4.1 iris), every verdict the same",
  );
  // A default changed since the study ran: the record no longer speaks for it.
  writeDemo({ ...demo, stitch: { ...demo.stitch, epochs: 480 } });
  assert.match(demoProtocolLine(root), /not yet checked/);
  writeDemo(demo);
  writeRecord("demo", record(demo, ["cross-seed layer2.1: standard vs invariance-aware: apart (settled: close)"]));
  assert.match(
    demoProtocolLine(root),
    /, 1 verdict differs \(cross-seed layer2\.1: standard vs invariance-aware: apart \(settled: close\)\)$/,
  );
});

test("compare's line: the full-width record where it was made with compare's defaults, else the demo's, said as such", () => {
  writeDemo(demo);
  writeRecord("demo", record(demo));
  const compare = { iris: { limit: 48 }, stitch: { limit: 48, lr: 0.001 } };
  assert.match(
    compareProtocolLine(compare, root),
    /^ {2}protocol {3}fast: not checked against the settled protocol at full width \(npm run bench -- protocol --scale full\); the demo's recipe \(T's rate aside\) stands within 0\.031 .* on the demo's width-1\/8 pairs/,
  );
  writeRecord("full", { ...record(compare), scale: "full" });
  assert.match(
    compareProtocolLine(compare, root),
    /^ {2}protocol {3}fast: within 0\.031 .* on two full-width ResNet-18s of other seeds/,
  );
});

test("the records in the repository, where there are any, were made with the defaults that ship now", () => {
  const demoRecord = protocolRecord("demo");
  if (demoRecord?.shipped)
    assert.deepEqual(demoRecord.shipped, demoSettings(repoRoot), "rerun npm run bench -- protocol --scale demo");
  const full = protocolRecord("full");
  if (full?.shipped)
    assert.deepEqual(full.shipped, { iris: { ...COMPARE_DEFAULTS.iris }, stitch: { ...COMPARE_DEFAULTS.stitch } });
});
