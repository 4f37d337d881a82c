// A real single-node Slurm for the executor's tests (test/slurm.test.ts) and its benchmark
// (bench/slurm.ts): munged, slurmctld and slurmd from Debian's packages (scripts/setup.sh
// --tests installs them), started in a private folder with their own
// key, socket, ports and state, and stopped after. No systemd and no cgroups: process tracking
// is proctrack/linuxproc, and jobs share the node's cores (select/cons_tres, CR_Core).
import { execFileSync, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { availableParallelism, hostname, userInfo } from "node:os";
import { join } from "node:path";

export interface Slurm {
  /** Environment for Slurm's client commands (SLURM_CONF). */
  env: NodeJS.ProcessEnv;
  cpus: number;
  stop(): void;
}

const DAEMONS = ["munged", "slurmctld", "slurmd"];

function which(cmd: string): string | null {
  for (const dir of ["/usr/sbin", "/usr/bin", "/sbin", "/bin", ...(process.env.PATH ?? "").split(":")])
    if (dir && existsSync(join(dir, cmd))) return join(dir, cmd);
  return null;
}

/** Starts the cluster; throws naming what is missing or which daemon failed (with its log). */
export async function startSlurm(dir: string): Promise<Slurm> {
  const bins = Object.fromEntries([...DAEMONS, "sinfo"].map((d) => [d, which(d)]));
  const missing = Object.entries(bins).filter(([, p]) => !p);
  if (missing.length)
    throw new Error(
      `Slurm is not installed (${missing.map(([d]) => d).join(", ")} not found): ` +
        "bash scripts/setup.sh --tests installs slurmctld, slurmd, slurm-client and munge",
    );
  mkdirSync(join(dir, "state"), { recursive: true });
  mkdirSync(join(dir, "spool"), { recursive: true });
  const key = join(dir, "munge.key");
  writeFileSync(key, randomBytes(1024));
  chmodSync(key, 0o400);
  chmodSync(dir, 0o700);
  const run = (cmd: string, args: string[]) => {
    const r = spawnSync(bins[cmd] as string, args, { encoding: "utf8" });
    if (r.status !== 0) throw new Error(`${cmd} did not start: ${r.stderr || r.stdout}${logTail(dir, cmd)}`);
  };
  run("munged", [
    "--force",
    `--key-file=${key}`,
    `--socket=${join(dir, "munge.sock")}`,
    `--pid-file=${join(dir, "munged.pid")}`,
    `--log-file=${join(dir, "munged.log")}`,
    `--seed-file=${join(dir, "munged.seed")}`,
  ]);
  // Ports from the process id, so two test runs on one machine do not collide.
  const port = 20000 + (process.pid % 20000);
  const host = hostname().split(".")[0];
  const user = userInfo().username;
  const cpus = availableParallelism();
  const conf = join(dir, "slurm.conf");
  writeFileSync(
    conf,
    [
      "ClusterName=stitchlab-test",
      // Addresses given, so a machine whose hostname does not resolve (containers) still works.
      `SlurmctldHost=${host}(127.0.0.1)`,
      `SlurmUser=${user}`,
      `SlurmdUser=${user}`,
      "AuthType=auth/munge",
      `AuthInfo=socket=${join(dir, "munge.sock")}`,
      "CredType=cred/munge",
      `SlurmctldPort=${port}`,
      `SlurmdPort=${port + 1}`,
      `StateSaveLocation=${join(dir, "state")}`,
      `SlurmdSpoolDir=${join(dir, "spool")}`,
      `SlurmctldPidFile=${join(dir, "slurmctld.pid")}`,
      `SlurmdPidFile=${join(dir, "slurmd.pid")}`,
      `SlurmctldLogFile=${join(dir, "slurmctld.log")}`,
      `SlurmdLogFile=${join(dir, "slurmd.log")}`,
      "ProctrackType=proctrack/linuxproc",
      "TaskPlugin=task/none",
      "JobAcctGatherType=jobacct_gather/none",
      "AccountingStorageType=accounting_storage/none",
      "SelectType=select/cons_tres",
      "SelectTypeParameters=CR_Core",
      "MpiDefault=none",
      "ReturnToService=2",
      "SchedulerParameters=sched_interval=1",
      // Finished jobs stay visible to squeue for 10 minutes (there is no accounting database).
      "MinJobAge=600",
      "KillWait=5",
      `NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus} State=UNKNOWN`,
      "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
      "",
    ].join("\n"),
  );
  const env = { ...process.env, SLURM_CONF: conf };
  const daemon = (cmd: string) => {
    const r = spawnSync(bins[cmd] as string, ["-f", conf], { encoding: "utf8", env });
    if (r.status !== 0) throw new Error(`${cmd} did not start: ${r.stderr || r.stdout}${logTail(dir, cmd)}`);
  };
  daemon("slurmctld");
  daemon("slurmd");
  const slurm: Slurm = {
    env,
    cpus,
    stop: () => {
      // Jobs first: with proctrack/linuxproc their processes would outlive slurmd.
      spawnSync("scancel", ["-u", user], { env });
      execFileSync("sleep", ["2"]);
      stopSlurm(dir);
    },
  };
  // The node registers within a few seconds; until then jobs would wait.
  const until = Date.now() + 30_000;
  for (;;) {
    const r = spawnSync(bins.sinfo as string, ["-h", "-o", "%T"], { encoding: "utf8", env });
    if (r.status === 0 && /^idle/m.test(r.stdout)) return slurm;
    if (Date.now() > until) {
      slurm.stop();
      throw new Error(`the Slurm node never became idle (sinfo: ${r.stdout}${r.stderr})${logTail(dir, "slurmd")}`);
    }
    await new Promise((r) => setTimeout(r, 300));
  }
}

function logTail(dir: string, daemon: string): string {
  const log = join(dir, `${daemon}.log`);
  return existsSync(log) ? `\n${log}:\n${readFileSync(log, "utf8").trim().split("\n").slice(-10).join("\n")}` : "";
}

function stopSlurm(dir: string): void {
  for (const d of ["slurmd", "slurmctld", "munged"]) {
    const pidFile = join(dir, `${d}.pid`);
    if (!existsSync(pidFile)) continue;
    const pid = Number(readFileSync(pidFile, "utf8").trim());
    try {
      process.kill(pid, "SIGTERM");
    } catch {
      continue; // already gone
    }
    // Wait for it to exit so the next start finds its ports free.
    for (let i = 0; i < 50; i++) {
      try {
        process.kill(pid, 0);
        execFileSync("sleep", ["0.1"]);
      } catch {
        break;
      }
    }
  }
}

// The experiment the Slurm tests and benchmark run: two models, one point, both modes: train 2,
// iris 2, stitch 4. Model a trains for a few seconds, long enough to be cancelled in the middle.
export const SMALL_EXPERIMENT = `
name: tiny
dataset: { name: fashion-mnist, limit: 300, testLimit: 100 }
models:
  a: { arch: resnet18, width: 0.0625, seed: 0, epochs: 6 }
  b: { arch: resnet18, width: 0.0625, seed: 1, epochs: 1 }
pairs:
  - { front: a, back: a, relation: identical }
  - { front: b, back: a, relation: cross-seed }
points: [layer1.0]
objectives: [slm]
iris: { limit: 64, steps: 3, batchSize: 32 }
stitch: { limit: 64, epochs: 1, batchSize: 32, initImages: 32, ckaImages: 32 }
`;
