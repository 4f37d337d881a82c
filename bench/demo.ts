// The demo's limits and requirements (issue 23): `stitchlab demo` from nothing (an empty cache)
// within 11 minutes on this 2-core machine (so within 20 on one 1.8x slower), for seeds 0, 1 and 2
// (`demo --seed S` shifts every seed of the study), each run from its own empty cache; a second
// run of the first, served from the cache, within 30 seconds. Per seed it checks what the demo
// must show over its replicates, at the middle and the last point:
//   - margin: invariance-aware SLM, cross-seed's 95% lower bound above cross-bias's upper bound by
//     MARGIN or more, and every replicate alone ranking cross-seed above cross-bias;
//   - standard SLM at 0.7 or more for both pairs, the identical control at 0.95 or more;
//   - every Pixel front relying on its marker (rolled accuracy at most MARKER_RELIANCE_MAX_ROLLED);
//   - the IRI sets there tight enough to judge (mean residual at most IRI_VERDICT_MAX_RESIDUAL).
// In the same run it times a fixed PyTorch workload (bench/calibrate_torch.py: one epoch of the
// demo's base model, trained by Python PyTorch on 2 threads) and gives each demo's time in those
// units, so that machines can be compared. Exits 1 when a limit or a requirement is not met (the
// numbers are printed and written to bench/results/demo.json either way).
//
//   npm run bench -- demo [--seeds 0,1,2] [--cache DIR]   (default: a fresh cache per seed)
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parse as parseYaml } from "yaml";
import { readLocalRun } from "../experiments/local.js";
import { modelRows } from "../experiments/results.js";
import { isNullRelation } from "../findings/chance.js";
import { type StitchRow, summarize } from "../findings/index.js";
import { contrast, IRI_VERDICT_MAX_RESIDUAL, MARKER_RELIANCE_MAX_ROLLED, shortcutFronts } from "../findings/reading.js";
import { writeFileAtomic } from "../io/files.js";
import { csvRecords } from "../report/csv.js";
import * as torch from "../torch/index.js";
import { python } from "./pytorch_peer.js";

const here = dirname(fileURLToPath(import.meta.url));
const LIMITS = { first: 11 * 60, second: 30 };
/** Cross-seed's lower bound must clear cross-bias's upper bound by this much (issue 23). */
const MARGIN = 0.05;

function timeDemo(cache: string, out: string, seed: number): number {
  const t0 = performance.now();
  const r = spawnSync(
    process.execPath,
    [join(here, "..", "bin", "stitchlab.js"), "demo", "--cache", cache, "--out", out, "--seed", String(seed)],
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
    threads: r.threads ?? "",
  };
}

/**
 * The calibration workload, fixed so that units compare machines and designs: one epoch of the
 * demo's base model as it was when the unit was defined (ResNet-18 at width 1/8, 10,000 images
 * at 32 px in batches of 128), whatever the preset trains now.
 */
const CALIBRATION = { width: 0.125, images: 10_000 } as const;

/** Seconds of the fixed PyTorch workload: one epoch of the demo's base model on 2 threads. */
export function calibrate(): number {
  const { width, images } = CALIBRATION;
  const r = spawnSync(
    python(),
    [join(here, "calibrate_torch.py"), "--width", String(width), "--images", String(images), "--threads", "2"],
    { encoding: "utf8" },
  );
  if (r.status !== 0) throw new Error(`calibration failed: ${r.stderr.trim().split("\n").pop()}`);
  return JSON.parse(r.stdout.trim().split("\n").pop() as string).seconds;
}

/** Each shortcut front's accuracies, from the run's record and the cache (the report's model rows). */
function pixelFronts(out: string, cache: string): { label: string; clean: number; marked: number; rolled: number }[] {
  const run = readLocalRun(out);
  if (!run) throw new Error(`demo: ${out} holds no run record`);
  return shortcutFronts(modelRows(run.plan, cache)).map(({ name, ...a }) => ({ label: name, ...a }));
}

/** What one seed's demo shows, against the requirements. */
export function judge(out: string, cache: string) {
  const rows = csvRecords(join(out, "results.csv")).map(toRow);
  const summary = summarize(rows);
  const means = (f: (s: (typeof summary)[number]) => boolean) =>
    summary.filter(f).map((s) => s.scores.agreement_prob.mean);
  const c = contrast(rows, "cross-seed", "cross-bias", "slm");
  const points = (c?.points ?? []).map((p) => ({
    point: p.point,
    cross_seed: [p.higher.mean, p.higher.halfWidth],
    cross_bias: [p.lower.mean, p.lower.halfWidth],
    margin: p.higher.mean - p.higher.halfWidth - (p.lower.mean + p.lower.halfWidth),
  }));
  const judged = new Set(points.map((p) => p.point));
  const residuals = rows
    .filter((r) => r.mode === "iris" && judged.has(r.point) && r.iri_residual !== null)
    .map((r) => r.iri_residual as number);
  const fronts = pixelFronts(out, cache);
  const identicalMin = Math.min(...means((s) => s.pair === "identical"));
  // The real pairs: a null front (untrained, noise) is chance, meant to score low.
  const standardMin = Math.min(
    ...means(
      (s) => s.pair !== "identical" && !isNullRelation(s.pair) && s.mode === "standard" && s.objective === "slm",
    ),
  );
  const maxResidual = residuals.length ? Math.max(...residuals) : Number.NaN;
  const requirements = {
    margin_at_middle_and_last: points.length > 0 && points.every((p) => p.margin >= MARGIN),
    every_replicate_ranks_cross_seed_above: Boolean(c?.perReplicate.every((r) => r.holds)),
    standard_slm_at_least_07: standardMin >= 0.7,
    identical_at_least_095: identicalMin >= 0.95,
    pixel_fronts_rely_on_marker: fronts.length > 0 && fronts.every((f) => f.rolled <= MARKER_RELIANCE_MAX_ROLLED),
    iris_tight_enough_to_judge: maxResidual <= IRI_VERDICT_MAX_RESIDUAL,
  };
  return {
    replicates: Math.max(...summary.map((s) => s.n)),
    identical_min: identicalMin,
    standard_slm_min: standardMin,
    iris_slm_cross_seed_vs_cross_bias: points,
    per_replicate: c?.perReplicate,
    pixel_fronts: fronts,
    max_iri_residual_middle_last: maxResidual,
    requirements,
  };
}

export async function main(args: string[]): Promise<void> {
  let given: string | undefined;
  let seeds = [0, 1, 2];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--cache") given = args[++i];
    else if (args[i] === "--seeds") seeds = (args[++i] ?? "").split(",").map(Number);
    else throw new Error(`demo: unknown option '${args[i]}'; options: --seeds 0,1,2, --cache DIR`);
  }
  if (!seeds.length || seeds.some((s) => !(Number.isInteger(s) && s >= 0)))
    throw new Error("demo: --seeds takes non-negative integers, e.g. 0,1,2");
  const out = mkdtempSync(join(tmpdir(), "stitchlab-demo-out-"));
  const calibrations = [calibrate()];
  const runs = [];
  for (const [i, seed] of seeds.entries()) {
    // A fresh cache per seed unless one is given (kept afterwards, for a cached rerun by hand).
    const cache = given ? join(given, `seed-${seed}`) : mkdtempSync(join(tmpdir(), `stitchlab-demo-cache-${seed}-`));
    const dir = join(out, `seed-${seed}`);
    console.log(`demo --seed ${seed}: cache ${cache}`);
    const first = timeDemo(cache, dir, seed);
    const second = i === 0 ? timeDemo(cache, join(out, `seed-${seed}-again`), seed) : null;
    runs.push({
      seed,
      first_s: Number(first.toFixed(1)),
      second_s: second && Number(second.toFixed(1)),
      // The cache's folder is printed, not recorded: a results file holds no machine's paths.
      ...judge(dir, cache),
    });
  }
  calibrations.push(calibrate());
  const unit = calibrations.reduce((a, b) => a + b, 0) / calibrations.length;
  const measured = runs.map((r) => ({
    ...r,
    calibration_s: Number(unit.toFixed(2)),
    first_in_calibration_units: Number((r.first_s / unit).toFixed(1)),
  }));
  // Seeds run by an earlier invocation on the same demo (the same preset settings; comments aside)
  // are kept, so that `--seeds 0` and then `--seeds 1,2` give one record of the three.
  const path = join(here, "results", "demo.json");
  const settings = parseYaml(readFileSync(join(here, "..", "presets", "demo.yaml"), "utf8"));
  const preset = createHash("sha256").update(JSON.stringify(settings)).digest("hex");
  const before = existsSync(path) ? JSON.parse(readFileSync(path, "utf8")) : null;
  const kept =
    before?.preset_sha256 === preset ? (before.runs as { seed: number }[]).filter((r) => !seeds.includes(r.seed)) : [];
  const result = {
    preset_sha256: preset,
    limit_first_s: LIMITS.first,
    limit_second_s: LIMITS.second,
    margin_required: MARGIN,
    calibration: {
      what: "one epoch of the demo's base model, trained by Python PyTorch on 2 threads (bench/calibrate_torch.py)",
      seconds: calibrations.map((c) => Number(c.toFixed(2))),
      recipe: { ...CALIBRATION, batch: 128 },
    },
    threads: torch.getNumThreads(),
    runs: [...kept, ...measured].sort((a, b) => a.seed - b.seed),
  };
  console.log(JSON.stringify(result, null, 2));
  mkdirSync(dirname(path), { recursive: true });
  writeFileAtomic(path, [`${JSON.stringify(result, null, 2)}\n`]);
  console.error(`demo: wrote ${path}`);
  for (const r of runs) {
    if (r.first_s > LIMITS.first || (r.second_s !== null && r.second_s > LIMITS.second)) {
      console.error(`demo --seed ${r.seed}: over the limits (${r.first_s} s first, ${r.second_s ?? "-"} s second)`);
      process.exitCode = 1;
    }
    const unmet = Object.entries(r.requirements).filter(([, ok]) => !ok);
    if (unmet.length) {
      console.error(`demo --seed ${r.seed}: requirements not met: ${unmet.map(([k]) => k).join(", ")}`);
      process.exitCode = 1;
    }
  }
}
