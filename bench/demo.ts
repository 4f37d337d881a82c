// The demo's limits and requirements (issue 12): `stitchlab demo` from nothing (an empty cache)
// within 20 minutes on this 2-core machine, and a second run, served from the cache, within 30
// seconds. Runs the built CLI as a user does, twice, and checks what the demo must show over its
// replicates: the identical control at 0.95 or more everywhere, every standard SLM mean at 0.7 or
// more, the 95% intervals of invariance-aware SLM agreement separating cross-seed (higher) from
// cross-bias from the middle point on, and that verdict in each replicate alone. Exits 1 when a
// limit or a requirement is not met (the numbers are printed either way).
//
//   npm run bench -- demo [--cache DIR]      (default: a fresh temporary cache)
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { contrast } from "../experiments/summary.js";
import { writeFileAtomic } from "../io/files.js";
import { type StitchRow, summarize } from "../report/index.js";
import { csvRows } from "../test/helpers/csv.js";
import * as torch from "../torch/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const LIMITS = { first: 20 * 60, second: 30 };

function timeDemo(cache: string, out: string): number {
  const t0 = performance.now();
  const r = spawnSync(
    process.execPath,
    [join(here, "..", "bin", "stitchlab.js"), "demo", "--cache", cache, "--out", out],
    {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  if (r.status !== 0) throw new Error(`stitchlab demo failed (status ${r.status})`);
  process.stdout.write(r.stdout);
  return (performance.now() - t0) / 1000;
}

/** A results.csv line as the summary functions take it (the columns they read). */
function toRow(r: Record<string, string>): StitchRow {
  const num = (k: string) => (r[k] === "" || r[k] === undefined ? Number.NaN : Number(r[k]));
  const orNull = (k: string) => (r[k] === "" || r[k] === undefined ? null : Number(r[k]));
  return {
    front: r.front,
    back: r.back,
    pair: r.pair,
    point: r.point,
    pointIndex: num("point_index"),
    objective: r.objective,
    mode: r.mode as StitchRow["mode"],
    accuracy: num("accuracy"),
    back_accuracy: num("back_accuracy"),
    hard_agreement: num("hard_agreement"),
    agreement_prob: num("agreement_prob"),
    hard_error_consistency: num("hard_error_consistency"),
    soft_error_consistency: num("soft_error_consistency"),
    cka: orNull("cka"),
    excess_agreement: orNull("excess_agreement"),
    test_data: r.test_data,
    iri_residual: orNull("iri_residual"),
    bn_mode: r.bn_mode,
    epochs: num("epochs"),
    seed: num("seed"),
    replicate: num("replicate"),
    front_accuracy: orNull("front_accuracy"),
    train_steps: num("train_steps"),
    robust_accuracy: orNull("robust_accuracy"),
    robust_agreement_prob: orNull("robust_agreement_prob"),
    front_alone_accuracy: orNull("front_alone_accuracy"),
    front_alone_agreement_prob: orNull("front_alone_agreement_prob"),
  };
}

export async function main(args: string[]): Promise<void> {
  let given: string | undefined;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--cache") given = args[++i];
    else throw new Error(`demo: unknown option '${args[i]}'; options: --cache DIR`);
  }
  // A fresh temporary cache unless one is given (kept afterwards, for a cached rerun by hand).
  const cache = given ?? mkdtempSync(join(tmpdir(), "stitchlab-demo-cache-"));
  const out = mkdtempSync(join(tmpdir(), "stitchlab-demo-out-"));
  const first = timeDemo(cache, join(out, "first"));
  const second = timeDemo(cache, join(out, "second"));
  const rows = csvRows(join(out, "second", "results.csv")).map(toRow);
  const summary = summarize(rows);
  const means = (f: (s: (typeof summary)[number]) => boolean) =>
    summary.filter(f).map((s) => s.scores.agreement_prob.mean);
  const c = contrast(rows, "cross-seed", "cross-bias", "slm");
  const identicalMin = Math.min(...means((s) => s.pair === "identical"));
  const standardMin = Math.min(
    ...means((s) => s.pair !== "identical" && s.mode === "standard" && s.objective === "slm"),
  );
  const requirements = {
    first_within_limit: first <= LIMITS.first,
    identical_at_least_095: identicalMin >= 0.95,
    standard_slm_at_least_07: standardMin >= 0.7,
    iris_slm_intervals_apart_from_middle: Boolean(c?.apart),
    verdict_in_every_replicate: Boolean(c?.perReplicate.every((r) => r.holds)),
  };
  const result = {
    first_s: Number(first.toFixed(1)),
    second_s: Number(second.toFixed(1)),
    limit_first_s: LIMITS.first,
    limit_second_s: LIMITS.second,
    replicates: Math.max(...summary.map((s) => s.n)),
    identical_min: identicalMin,
    standard_slm_min: standardMin,
    iris_slm_cross_seed_vs_cross_bias: c?.points.map((p) => ({
      point: p.point,
      cross_seed: [p.higher.mean, p.higher.halfWidth],
      cross_bias: [p.lower.mean, p.lower.halfWidth],
      apart: p.apart,
    })),
    per_replicate: c?.perReplicate,
    requirements,
    threads: torch.getNumThreads(),
    cache,
  };
  console.log(JSON.stringify(result, null, 2));
  const path = join(here, "results", "demo.json");
  mkdirSync(dirname(path), { recursive: true });
  writeFileAtomic(path, [`${JSON.stringify(result, null, 2)}\n`]);
  console.error(`demo: wrote ${path}`);
  if (first > LIMITS.first || second > LIMITS.second) {
    console.error(`demo: over the limits (${first.toFixed(0)} s first, ${second.toFixed(1)} s second)`);
    process.exitCode = 1;
  }
  const unmet = Object.entries(requirements).filter(([, ok]) => !ok);
  if (unmet.length) {
    console.error(`demo: requirements not met: ${unmet.map(([k]) => k).join(", ")}`);
    process.exitCode = 1;
  }
}
