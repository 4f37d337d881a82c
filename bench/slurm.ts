// What the Slurm executor costs, on a private single-node Slurm (bench/slurm-cluster.ts):
//   1. submitting a paper-scale graph (presets/cross-seed.yaml --scale paper: 164 tasks and the
//      report job), held so nothing runs: seconds to submit, ms per sbatch, and `status` time;
//   2. a small experiment end to end (8 tasks, two at a time): from `stitchlab run --executor
//      slurm` to the report job's end, against the local executor with --workers 2 on the same
//      cores. The difference is Slurm's scheduling and each job's process start.
// There is no PyTorch side here: PyTorch has no scheduler; the yardstick is our local executor.
//
//   npm run bench -- slurm [--quick]     (--quick: submission of the small experiment only)
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { planExperiment } from "../experiments/plan.js";
import { SLURM_DEFAULTS, slurmStatus, submitPlan } from "../experiments/slurm.js";
import { readExperiment } from "../experiments/spec.js";
import { cliCommand } from "../experiments/tasks.js";
import { SMALL_EXPERIMENT as SMALL, startSlurm } from "./slurm-cluster.js";
import { isQuick } from "./synthetic.js";
import { round, writeResult } from "./timing.js";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

function stitchlab(args: string[], env: NodeJS.ProcessEnv): string {
  const r = spawnSync(process.execPath, cliCommand(...args), {
    encoding: "utf8",
    env: { ...process.env, ...env },
  });
  if (r.status !== 0) throw new Error(`stitchlab ${args.join(" ")} failed: ${r.stderr}`);
  return r.stdout;
}

const seconds = (t0: number) => (performance.now() - t0) / 1000;

async function settle(out: string): Promise<void> {
  for (;;) {
    const s = slurmStatus(out);
    const busy = s.tasks.some((t) => t.status === "pending" || t.status === "running");
    if (!busy && s.report && !["PENDING", "RUNNING", "COMPLETING", "CONFIGURING"].includes(s.report.state)) {
      const bad = s.tasks.filter((t) => t.status !== "done");
      if (bad.length) throw new Error(`tasks did not finish: ${bad.map((t) => `${t.label} ${t.status}`).join(", ")}`);
      return;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * Submits a graph held (nothing runs), in this process so that Node's start is not counted,
 * times that and the status query, then cancels every job.
 */
function submission(file: string, scale: string | undefined, tmp: string) {
  const name = scale ?? "default";
  const exp = readExperiment(file, scale);
  exp.dataset.root = tmp; // planning never reads the data
  const plan = planExperiment(exp, file);
  const out = join(tmp, `held-${name}`);
  const options = { ...SLURM_DEFAULTS, sbatchArgs: ["--hold"] };
  const t0 = performance.now();
  const sub = submitPlan(plan, { file, scale: name, cache: join(tmp, `held-cache-${name}`), out, options });
  const submit = seconds(t0);
  const t1 = performance.now();
  const status = slurmStatus(out);
  const statusS = seconds(t1);
  const jobs = [...sub.jobs.map((j) => j.jobId), sub.reportJob as string];
  if (status.tasks.some((t) => t.status !== "pending")) throw new Error("held jobs should all be pending");
  spawnSync("scancel", jobs);
  return {
    jobs: jobs.length,
    submit_s: round(submit, 2),
    ms_per_job: round((submit * 1000) / jobs.length, 1),
    status_s: round(statusS, 3),
  };
}

export async function main(args: string[]): Promise<void> {
  const quick = isQuick("slurm", args);
  const tmp = mkdtempSync(join(tmpdir(), "stitchlab-bench-slurm-"));
  const slurm = await startSlurm(join(tmp, "slurm"));
  process.env.SLURM_CONF = slurm.env.SLURM_CONF;
  try {
    const small = join(tmp, "small.yaml");
    writeFileSync(small, SMALL);
    const result: Record<string, unknown> = { cores: slurm.cpus, quick };
    result.submit_small = submission(small, undefined, tmp);
    if (!quick) {
      result.submit_paper = submission(join(root, "presets", "cross-seed.yaml"), "paper", tmp);
      // End to end, both executors, each from an empty cache, one thread per task.
      const env = { ...slurm.env, STITCHLAB_THREADS: "1" };
      let t0 = performance.now();
      stitchlab(["run", small, "--out", join(tmp, "local"), "--cache", join(tmp, "c-local"), "--workers", "2"], env);
      const local = seconds(t0);
      t0 = performance.now();
      const out = join(tmp, "slurm-run");
      stitchlab(["run", small, "--out", out, "--cache", join(tmp, "c-slurm"), "--executor", "slurm"], env);
      await settle(out);
      const viaSlurm = seconds(t0);
      result.small_end_to_end = {
        tasks: 8,
        local_workers2_s: round(local, 1),
        slurm_s: round(viaSlurm, 1),
        ratio: round(viaSlurm / local, 2),
        overhead_per_task_s: round((viaSlurm - local) / 8, 2),
      };
    }
    console.log(JSON.stringify(result, null, 2));
    writeResult("slurm", quick, result);
  } finally {
    slurm.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}
