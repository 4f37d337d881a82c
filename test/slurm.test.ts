// The Slurm executor against a real single-node Slurm (bench/slurm-cluster.ts starts munged,
// slurmctld and slurmd): an experiment submitted with sbatch runs to completion with tasks side by
// side and equals a local run; a job cancelled mid-task cancels its dependants and a rerun submits
// only what is missing; a failing task is retried in its job and reported with its error.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { type Slurm, startSlurm, SMALL_EXPERIMENT as TINY } from "../bench/slurm-cluster.js";
import { SLURM_DEFAULTS, type SlurmOptions, sbatchArgs, slurmStatus, taskScript } from "../experiments/slurm.js";
import { saveDivergingCheckpoint } from "./helpers/checkpoints.js";
import { runCli } from "./helpers/cli.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

const skip = skipUnlessFashionMnist();
const tmp = mkdtempSync(join(tmpdir(), "stitchlab-slurm-"));
let slurm: Slurm;

before(async () => {
  slurm = await startSlurm(join(tmp, "slurm"));
  process.env.SLURM_CONF = slurm.env.SLURM_CONF;
});
after(() => {
  slurm?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

function stitchlab(args: string[], env: NodeJS.ProcessEnv = {}) {
  return runCli(args, {
    cwd: tmp,
    env: { ...process.env, ...slurm.env, ...env },
  });
}

function squeue(args: string[]): string {
  return spawnSync("squeue", args, { encoding: "utf8", env: slurm.env }).stdout;
}

/** Polls the run's status until nothing is queued or running (the report job included). */
async function settle(out: string, minutes = 8) {
  const until = Date.now() + minutes * 60_000;
  for (;;) {
    const s = slurmStatus(out);
    const busy = s.tasks.some((t) => t.status === "pending" || t.status === "running");
    const reportBusy = s.report && !["COMPLETED", "FAILED", "CANCELLED"].includes(s.report.state);
    if (!busy && !reportBusy) return s;
    if (Date.now() > until)
      throw new Error(`still busy after ${minutes} min: ${JSON.stringify(s.tasks.map((t) => [t.label, t.status]))}`);
    await new Promise((r) => setTimeout(r, 1000));
  }
}

function csv(path: string): string[][] {
  return readFileSync(path, "utf8")
    .trim()
    .split("\n")
    .map((l) => l.split(","));
}

/** Every cell equal, numbers within 1e-6 (the same computation on the same thread count). */
function assertSameResults(a: string, b: string) {
  const x = csv(a);
  const y = csv(b);
  assert.deepEqual(x[0], y[0]);
  assert.equal(x.length, y.length);
  for (let i = 1; i < x.length; i++)
    for (let j = 0; j < x[i].length; j++)
      assert.ok(
        x[i][j] === y[i][j] || Math.abs(Number(x[i][j]) - Number(y[i][j])) < 1e-6,
        `row ${i} ${x[0][j]}: ${x[i][j]} vs ${y[i][j]}`,
      );
}

/** [start, end] seconds of each finished job, from the start/end lines the job script logs. */
function jobSpans(out: string): [number, number][] {
  const dir = join(out, "slurm", "logs");
  const spans: [number, number][] = [];
  for (const f of readdirSync(dir).filter((f) => !f.startsWith("report"))) {
    const text = readFileSync(join(dir, f), "utf8");
    const s = text.match(/stitchlab-job start ([\d.]+)/);
    const e = text.match(/stitchlab-job end ([\d.]+)/);
    if (s && e) spans.push([Number(s[1]), Number(e[1])]);
  }
  return spans;
}

let file: string;
let local: string;

test("sbatch's arguments and the job script carry every option", () => {
  const o: SlurmOptions = {
    ...SLURM_DEFAULTS,
    partition: "gpu",
    gres: "gpu:1",
    time: "2:00:00",
    mem: "16G",
    cpusPerTask: 8,
    sbatchArgs: ["--account=lab", "--qos=long"],
    retries: 2,
    device: "cuda",
    setup: "module load cuda",
  };
  const args = sbatchArgs(o, "stitchlab-x", "/logs/x.%j.log", ["11", "12"], "afterok");
  for (const a of [
    "--parsable",
    "--job-name=stitchlab-x",
    "--output=/logs/x.%j.log",
    "--cpus-per-task=8",
    "--partition=gpu",
    "--gres=gpu:1",
    "--time=2:00:00",
    "--mem=16G",
    "--dependency=afterok:11:12",
    "--kill-on-invalid-dep=yes",
    "--account=lab",
    "--qos=long",
  ])
    assert.ok(args.includes(a), `${a} in ${args.join(" ")}`);
  assert.ok(!sbatchArgs(o, "n", "l", [], "afterok").some((a) => a.startsWith("--dependency")));
  const script = taskScript(o, "/shared/cache", "train-abc");
  assert.match(script, /^#!\/bin\/bash\n/);
  assert.match(script, /module load cuda/);
  assert.match(script, /seq 1 3/, "two retries: three attempts");
  assert.match(script, /experiments\/worker\.(ts|js) train-abc --cache \/shared\/cache --device cuda/);
  assert.match(script, /STITCHLAB_THREADS=\$\{SLURM_CPUS_PER_TASK:-1\}/);
});

test("without Slurm's commands, --executor slurm says so and submits nothing", { skip }, () => {
  writeFileSync(join(tmp, "noslurm.yaml"), TINY);
  const r = stitchlab(
    ["run", "noslurm.yaml", "--out", join(tmp, "noslurm"), "--cache", join(tmp, "c0"), "--executor", "slurm"],
    { PATH: "/nonexistent" },
  );
  assert.equal(r.status, 1);
  assert.match(r.stderr, /sbatch could not be run \(ENOENT\): is this a Slurm login node\?/);
});

test("an experiment runs to completion through sbatch, two tasks at a time, and equals a local run", {
  skip,
}, async () => {
  file = join(tmp, "tiny.yaml");
  writeFileSync(file, TINY);
  const out = join(tmp, "s1");
  const cache = join(tmp, "cache");
  const r = stitchlab([
    "run",
    file,
    "--out",
    out,
    "--cache",
    cache,
    "--executor",
    "slurm",
    "--sbatch-arg=--comment=from-stitchlab",
  ]);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /submitted 8 job\(s\) to Slurm; 0 task\(s\) already in the cache/);
  assert.match(r.stdout, /report: writes .*report\.html/);
  const ids = [...r.stdout.matchAll(/^ {2}(\d+)\t/gm)].map((m) => m[1]);
  assert.equal(ids.length, 9, "8 tasks and the report");
  // The dependencies are Slurm's and mirror the graph: each job waits on exactly the jobs of the
  // tasks it needs (as printed, and as Slurm holds them).
  const printed = new Map(
    [...r.stdout.matchAll(/^ {2}(\d+)\t(.+?)(?: {2}\(after (.+)\))?$/gm)].map((m) => [
      m[2],
      { id: m[1], after: (m[3] ?? "").split(", ").filter(Boolean).sort() },
    ]),
  );
  const plan = JSON.parse(readFileSync(join(out, "slurm", "run.json"), "utf8")).plan;
  const labelOf = new Map(plan.tasks.map((t: { key: string; label: string }) => [t.key, t.label]));
  for (const t of plan.tasks as { key: string; label: string; deps: string[] }[]) {
    const want = [...new Set(t.deps.map((d) => printed.get(labelOf.get(d) as string)?.id))].sort();
    assert.deepEqual(printed.get(t.label)?.after, want, t.label);
  }
  assert.ok(
    [...printed.values()].some((p) => p.after.length >= 2),
    "some job waits on two or more",
  );
  const held = squeue(["-h", "-j", ids.join(","), "-o", "%i|%E|%k"]);
  const byId = new Map([...printed.values()].map((p) => [p.id, p.after]));
  let checked = 0;
  for (const line of held.trim().split("\n")) {
    const [id, dep] = line.split("|");
    const onSlurm = [...(dep ?? "").matchAll(/afterok:(\d+)/g)].map((m) => m[1]);
    // Slurm may already have cleared a satisfied dependency; what it holds must be the graph's.
    for (const d of onSlurm) assert.ok(byId.get(id)?.includes(d), `job ${id} waits on ${d}: ${line}`);
    if (onSlurm.length) checked++;
  }
  assert.ok(checked >= 2, `Slurm holds the dependencies: ${held}`);
  assert.match(held, /from-stitchlab/, "--sbatch-arg reaches sbatch");

  // Submitting again while the jobs are queued or running adds no task job; the new report job
  // replaces the old one.
  const twice = stitchlab(["run", file, "--out", out, "--cache", cache, "--executor", "slurm"]);
  assert.equal(twice.status, 0, twice.stderr);
  const counts = twice.stdout.match(
    /submitted 0 job\(s\) to Slurm; (\d+) task\(s\) already queued or running, not resubmitted; (\d+) task\(s\) already in the cache/,
  );
  assert.ok(counts, twice.stdout);
  assert.equal(Number(counts[1]) + Number(counts[2]), 8);
  const report2 = twice.stdout.match(/^ {2}(\d+)\treport/m)?.[1];
  assert.ok(report2 && report2 !== ids[8]);
  assert.match(squeue(["-h", "--states=all", "-j", ids[8], "-o", "%T"]), /CANCELLED/);

  const s = await settle(out);
  assert.deepEqual(
    s.tasks.filter((t) => t.status !== "done").map((t) => `${t.label}: ${t.status} ${t.error}`),
    [],
  );
  assert.equal(s.report?.state, "COMPLETED");
  assert.ok(existsSync(join(out, "report.html")) && existsSync(join(out, "results.csv")), "the report job wrote them");
  const spans = jobSpans(out);
  assert.equal(spans.length, 8);
  const overlap = spans.some(([a0, a1], i) => spans.some(([b0, b1], j) => i !== j && a0 < b1 && b0 < a1));
  assert.ok(overlap, `no two jobs ran at once: ${JSON.stringify(spans)}`);
  const shown = stitchlab(["status", out]);
  assert.equal(shown.status, 0, shown.stderr);
  assert.match(shown.stdout, /8 tasks: 8 done, 0 running, 0 pending, 0 failed, 0 cancelled, 0 missing/);

  // The same experiment run here, one thread per task as in the jobs (--cpus-per-task 1).
  local = join(tmp, "local");
  const l = stitchlab(["run", file, "--out", local, "--cache", join(tmp, "local-cache")], { STITCHLAB_THREADS: "1" });
  assert.equal(l.status, 0, l.stderr);
  assertSameResults(join(out, "results.csv"), join(local, "results.csv"));

  // Everything cached: a rerun submits nothing and writes the report at once.
  const again = stitchlab(["run", file, "--out", join(tmp, "s1b"), "--cache", cache, "--executor", "slurm"]);
  assert.equal(again.status, 0, again.stderr);
  assert.match(again.stdout, /every task is in the cache; nothing to submit/);
  assertSameResults(join(tmp, "s1b", "results.csv"), join(local, "results.csv"));
});

test("a job cancelled mid-task cancels its dependants; a rerun submits only what is missing and equals a local run", {
  skip,
}, async () => {
  assert.ok(local, "needs the local run of the test before");
  const out = join(tmp, "s2");
  const cache = join(tmp, "cache2");
  const r = stitchlab(["run", file, "--out", out, "--cache", cache, "--executor", "slurm"]);
  assert.equal(r.status, 0, r.stderr);
  // Cancel model a's training while it trains (its partial folder exists): every stitch needs a.
  const plan = slurmStatus(out).tasks;
  const trainA = plan.find((t) => t.label === "train a");
  assert.ok(trainA?.jobId);
  const partial = join(cache, "train", `${trainA.key}.partial`);
  for (const until = Date.now() + 120_000; !existsSync(partial) && Date.now() < until; )
    await new Promise((r) => setTimeout(r, 100));
  assert.ok(existsSync(partial), "train a never started");
  spawnSync("scancel", [trainA.jobId], { env: slurm.env });
  const s = await settle(out);
  const by = Object.fromEntries(s.tasks.map((t) => [t.label, t]));
  assert.equal(by["train a"].status, "cancelled");
  assert.equal(by["train b"].status, "done");
  const stitches = s.tasks.filter((t) => t.label.startsWith("stitch"));
  assert.equal(stitches.length, 4);
  for (const t of stitches) {
    assert.equal(t.status, "cancelled", `${t.label} is ${t.status}, not left pending`);
    assert.match(t.error ?? "", /a task it needs failed or was cancelled/);
  }
  // The cancelled job never removed its task lock; the rerun's job must take it over.
  const lock = join(cache, "train", `${trainA.key}.lock`);
  assert.ok(existsSync(lock), "a job killed mid-task leaves its lock");
  const notDone = s.tasks.filter((t) => t.status !== "done").length;
  assert.equal(notDone, 6, "train a, iris a, 4 stitches");
  assert.match(stitchlab(["status", out]).stdout, /submits only what is missing/);

  const rerun = stitchlab(["run", file, "--out", out, "--cache", cache, "--executor", "slurm"]);
  assert.equal(rerun.status, 0, rerun.stderr);
  assert.match(
    rerun.stdout,
    new RegExp(`submitted ${notDone} job\\(s\\) to Slurm; 2 task\\(s\\) already in the cache`),
  );
  const s2 = await settle(out);
  assert.ok(
    s2.tasks.every((t) => t.status === "done"),
    JSON.stringify(s2.tasks.map((t) => [t.label, t.status])),
  );
  assert.ok(!existsSync(lock), "taken over from the cancelled job and released");
  assertSameResults(join(out, "results.csv"), join(local, "results.csv"));
});

test("a failing task is retried in its job, then shown failed with its error; the rest are reported", {
  skip,
}, async () => {
  // A back model whose logits overflow: stitching into it diverges on every attempt.
  saveDivergingCheckpoint(join(tmp, "ckpt", "broken.safetensors"));
  const broken = join(tmp, "broken.yaml");
  writeFileSync(
    broken,
    TINY.replace("  b: {", "  broken: { checkpoint: ckpt/broken.safetensors }\n  b: {")
      .replace("{ front: b, back: a, relation: cross-seed }", "{ front: a, back: broken, relation: broken }")
      .replace("objectives: [slm]", "objectives: [slm]\nmodes: [standard]"),
  );
  const out = join(tmp, "s3");
  const r = stitchlab(["run", broken, "--out", out, "--cache", join(tmp, "cache3"), "--executor", "slurm"]);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /submitted 4 job\(s\) to Slurm; 0 task\(s\) already in the cache/);
  const s = await settle(out);
  const failed = s.tasks.filter((t) => t.status === "failed");
  assert.equal(failed.length, 1);
  assert.match(failed[0].label, /stitch a -> broken/);
  assert.match(failed[0].error ?? "", /stitching diverged: loss is NaN/);
  const log = readFileSync(failed[0].log as string, "utf8");
  assert.match(log, /attempt 1 of 2 failed/);
  assert.match(log, /attempt 2 of 2 failed/);
  assert.equal(s.report?.state, "COMPLETED", "the report job runs after failures too");
  assert.equal(csv(join(out, "results.csv")).length, 2, "header and the identical pair's row");
  const shown = stitchlab(["status", out]);
  assert.match(shown.stdout, /failed:\n {2}\d+\tstitch a -> broken .*loss is NaN/);
});

test("sbatch failing part-way records what went in and says so; running again submits the rest; --resubmit replaces queued jobs", {
  skip,
}, () => {
  // An sbatch that takes three jobs, then refuses as a per-user submit limit would.
  const bin = join(tmp, "limited-bin");
  mkdirSync(bin, { recursive: true });
  const count = join(bin, "count");
  const real = spawnSync("sh", ["-c", "command -v sbatch"], { encoding: "utf8" }).stdout.trim();
  writeFileSync(
    join(bin, "sbatch"),
    `#!/bin/sh\nn=$(cat ${count} 2>/dev/null || echo 0); echo $((n+1)) > ${count}\n` +
      `if [ "$n" -ge 3 ]; then echo "sbatch: error: QOSMaxSubmitJobPerUserLimit" >&2; exit 1; fi\nexec ${real} "$@"\n`,
    { mode: 0o755 },
  );
  const out = join(tmp, "s4");
  const exp = join(tmp, "tiny4.yaml");
  writeFileSync(exp, TINY);
  const args = ["run", exp, "--out", out, "--cache", join(tmp, "cache4"), "--executor", "slurm", "--sbatch-arg=--hold"];
  const r = stitchlab(args, { PATH: `${bin}:${process.env.PATH}` });
  assert.equal(r.status, 1);
  assert.match(r.stderr, /QOSMaxSubmitJobPerUserLimit/);
  assert.match(r.stderr, /3 of the 8 jobs to submit went in .*run the same command again to submit the rest/);
  const s = slurmStatus(out);
  assert.equal(s.tasks.filter((t) => t.status === "pending").length, 3, "status shows the three held jobs");
  assert.equal(s.tasks.filter((t) => t.status === "missing").length, 5);

  const again = stitchlab(args);
  assert.equal(again.status, 0, again.stderr);
  assert.match(again.stdout, /submitted 5 job\(s\) to Slurm; 3 task\(s\) already queued or running/);
  const jobs = slurmStatus(out).tasks.map((t) => t.jobId as string);
  assert.equal(new Set(jobs).size, 8);

  // Other options keep the queued jobs, with a warning; --resubmit replaces them.
  const changed = stitchlab([...args, "--time", "10"]);
  assert.equal(changed.status, 0, changed.stderr);
  assert.match(changed.stdout, /submitted 0 job\(s\)/);
  assert.match(changed.stderr, /warning: 8 job\(s\) still queued or running keep the options .* --resubmit/);
  const replaced = stitchlab([...args, "--time", "10", "--resubmit"]);
  assert.equal(replaced.status, 0, replaced.stderr);
  assert.match(replaced.stdout, /submitted 8 job\(s\) to Slurm; 0 task\(s\) already in the cache/);
  assert.equal(
    squeue(["-h", "--states=all", "-j", jobs.join(","), "-o", "%T"])
      .trim()
      .split("\n")
      .filter((l) => l === "CANCELLED").length,
    8,
  );
  const now = slurmStatus(out).tasks.map((t) => t.jobId as string);
  assert.ok(now.every((j) => !jobs.includes(j)));
  spawnSync("scancel", now, { env: slurm.env });
});
