// The task lock (experiments/lock.ts): a live holder is waited for, a dead one is taken over,
// and the lock goes when the work ends, thrown or not.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { holderAlive, type LockHolder, processStart, withLock } from "../experiments/lock.js";

const tmp = mkdtempSync(join(tmpdir(), "stitchlab-lock-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

const holder = (pid: number, job: string | null = null): LockHolder => ({
  host: hostname(),
  pid,
  job,
  at: new Date().toISOString(),
});

test("a live holder is waited for; the work runs once it lets go, and the lock is removed", async () => {
  const path = join(tmp, "train", "k1.lock");
  const waits: LockHolder[] = [];
  const order: string[] = [];
  let second: Promise<void> | undefined;
  await withLock(path, async () => {
    // Held (by this very process, which is alive): a second taker must wait.
    second = withLock(
      path,
      async () => {
        order.push("second");
      },
      (h) => waits.push(h),
      20,
    );
    await new Promise((r) => setTimeout(r, 200));
    order.push("first done");
  });
  await second;
  assert.deepEqual(order, ["first done", "second"]);
  assert.equal(waits.length, 1, "told once whom it waits for");
  assert.equal(waits[0].pid, process.pid);
  assert.ok(!existsSync(path), "removed when the work ended");
});

/** withLock on `path` runs at once, without waiting for the lock's (stale) holder. */
async function takenOverAtOnce(path: string): Promise<void> {
  let waited = false;
  const r = await withLock(
    path,
    async () => "ran",
    () => {
      waited = true;
    },
    20,
  );
  assert.equal(r, "ran");
  assert.equal(waited, false, "taken over at once");
}

test("a lock whose process is gone is taken over at once", async () => {
  const path = join(tmp, "k2.lock");
  const dead = spawnSync("true").pid as number;
  assert.ok(!holderAlive(holder(dead)));
  writeFileSync(path, JSON.stringify(holder(dead)));
  await takenOverAtOnce(path);
  assert.ok(!existsSync(path));
});

test("the lock is removed when the work throws, and the error passes through", async () => {
  const path = join(tmp, "k3.lock");
  await assert.rejects(
    withLock(path, async () => {
      assert.ok(existsSync(path));
      throw new Error("boom");
    }),
    /boom/,
  );
  assert.ok(!existsSync(path));
});

test("a holder on another machine without a Slurm job is assumed alive; this process is alive", () => {
  assert.ok(holderAlive({ ...holder(1), host: "elsewhere.invalid" }));
  assert.ok(holderAlive(holder(process.pid)));
});

test("a lock naming nobody (empty, from a process killed as it wrote) is taken over once 30 s old", async () => {
  const path = join(tmp, "k4.lock");
  writeFileSync(path, "");
  const old = new Date(Date.now() - 60_000);
  utimesSync(path, old, old);
  assert.equal(await withLock(path, async () => "ran", undefined, 20), "ran");
  assert.ok(!existsSync(path));
  assert.deepEqual(
    readdirSync(tmp).filter((f) => f.startsWith("k4")),
    [],
    "no file of its own left behind",
  );
});

test("a taker that will not wait (onWait throws) gets its error at once, leaves the holder's lock alone and nothing of its own", async () => {
  // As `run --out DIR` takes DIR's lock (issue 25, case 10): a second run into the same folder is
  // refused at once, naming the holder, rather than mixing its files with the first's.
  const path = join(tmp, "k5.lock");
  await withLock(path, async () => {
    const held = readFileSync(path, "utf8");
    await assert.rejects(
      withLock(
        path,
        async () => assert.fail("ran without the lock"),
        (h) => {
          throw new Error(`in use by pid ${h.pid}`);
        },
        20,
      ),
      new RegExp(`in use by pid ${process.pid}`),
    );
    assert.equal(readFileSync(path, "utf8"), held, "the holder's lock is untouched");
    assert.deepEqual(
      readdirSync(tmp).filter((f) => f.startsWith("k5")),
      ["k5.lock"],
      "the refused taker left no file of its own",
    );
  });
  assert.ok(!existsSync(path));
});

/** Runs fn with a fake `squeue` first on PATH that reports every job asked about in `state`. */
function withSqueue<T>(state: string, fn: () => T): T {
  const bin = join(tmp, `bin-${state}`);
  mkdirSync(bin, { recursive: true });
  // squeue -h --states=all -j ID -o %i|%T|%r: one line per job, as the real one prints it.
  writeFileSync(join(bin, "squeue"), `#!/bin/sh\nwhile [ "$1" != -j ]; do shift; done\necho "$2|${state}|None"\n`);
  chmodSync(join(bin, "squeue"), 0o755);
  const path = process.env.PATH;
  process.env.PATH = `${bin}:${path}`;
  try {
    return fn();
  } finally {
    process.env.PATH = path;
  }
}

test("a dead holder on this machine is stale even while its Slurm job runs (a retry in the same job takes over)", async () => {
  // Issue 36: attempt 1 of a task aborted; attempt 2, in the same Slurm job, waited for it forever,
  // since the lock's job (its own) was alive.
  const dead = spawnSync("true").pid as number;
  await withSqueue("RUNNING", async () => {
    assert.ok(!holderAlive(holder(dead, "1")), "a dead pid in a live job");
    assert.ok(holderAlive(holder(process.pid, "1")), "a live pid in a live job");
    // On another machine the pid cannot be asked: the job decides.
    assert.ok(holderAlive({ ...holder(dead, "1"), host: "elsewhere.invalid" }));
    const path = join(tmp, "k6.lock");
    writeFileSync(path, JSON.stringify(holder(dead, "1")));
    await takenOverAtOnce(path);
  });
  withSqueue("COMPLETED", () => assert.ok(!holderAlive({ ...holder(dead, "1"), host: "elsewhere.invalid" })));
});

test("a lock records its holder's start time; a pid reused by another process does not hold it", {
  skip: processStart(process.pid) === undefined && "no /proc here",
}, async () => {
  const started = processStart(process.pid) as number;
  const path = join(tmp, "k7.lock");
  await withLock(path, async () => {
    assert.equal(JSON.parse(readFileSync(path, "utf8")).started, started);
  });
  // This process's pid, as another (node) process would have it after the holder died: another start time.
  const reused = { ...holder(process.pid), started: started - 1 };
  assert.ok(!holderAlive(reused), "the same pid, another start time");
  assert.ok(holderAlive({ ...holder(process.pid), started }), "the same process");
  // A lock of an older stitchlab, without the start time, is read as before (a live node process holds it).
  assert.ok(holderAlive(holder(process.pid)));
  writeFileSync(path, JSON.stringify(reused));
  assert.equal(
    await withLock(
      path,
      async () => "ran",
      () => assert.fail("waited for a reused pid"),
      20,
    ),
    "ran",
  );
  assert.ok(!existsSync(path));
});

/** Runs fn with the environment's variables set (undefined: unset) as given, and as they were after. */
async function withEnv<T>(vars: Record<string, string | undefined>, fn: () => T | Promise<T>): Promise<T> {
  const was = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const set = (v: Record<string, string | undefined>) => {
    for (const [k, x] of Object.entries(v))
      if (x === undefined) delete process.env[k];
      else process.env[k] = x;
  };
  set(vars);
  try {
    return await fn();
  } finally {
    set(was);
  }
}

test("a holder on another machine in our own Slurm job: an earlier run of the job (requeued onto another node) is gone, this run's is alive", async () => {
  // Slurm requeued job 7 (a node failed): its run 1 waited forever for the lock of its run 0 on the
  // failed node, since the lock's job, its own, was alive (squeue says RUNNING).
  const elsewhere = (restarts?: number): LockHolder => ({
    ...holder(1, "7"),
    host: "elsewhere.invalid",
    ...(restarts === undefined ? {} : { restarts }),
  });
  await withSqueue("RUNNING", () =>
    withEnv({ SLURM_JOB_ID: "7", SLURM_RESTART_COUNT: "1" }, async () => {
      assert.ok(!holderAlive(elsewhere(0)), "run 0 of our job, requeued since");
      assert.ok(holderAlive(elsewhere(1)), "this run, on another of the job's nodes (a multi-node job)");
      assert.ok(holderAlive(elsewhere(2)), "a later run than ours");
      assert.ok(holderAlive(elsewhere()), "an older stitchlab's lock, without the count: read as before");
      assert.ok(holderAlive({ ...elsewhere(0), job: "8" }), "another job: Slurm decides (running)");
      // Taken over at once, and the new lock records this run's count.
      const path = join(tmp, "k8.lock");
      writeFileSync(path, JSON.stringify(elsewhere(0)));
      const held = await withLock(
        path,
        async () => JSON.parse(readFileSync(path, "utf8")) as LockHolder,
        () => assert.fail("waited for an earlier run of its own job"),
        20,
      );
      assert.equal(held.job, "7");
      assert.equal(held.restarts, 1);
      assert.ok(!existsSync(path));
    }),
  );
  // Not requeued yet: SLURM_RESTART_COUNT is unset, and the count is 0.
  await withEnv({ SLURM_JOB_ID: "7", SLURM_RESTART_COUNT: undefined }, async () => {
    const path = join(tmp, "k9.lock");
    await withLock(path, async () => assert.equal(JSON.parse(readFileSync(path, "utf8")).restarts, 0));
    assert.ok(holderAlive(elsewhere(0)));
  });
  // Outside Slurm no count is recorded.
  await withEnv({ SLURM_JOB_ID: undefined, SLURM_RESTART_COUNT: undefined }, async () => {
    const path = join(tmp, "k10.lock");
    await withLock(path, async () => assert.equal(JSON.parse(readFileSync(path, "utf8")).restarts, undefined));
  });
});

/** The state of a process (field 3 of /proc/<pid>/stat), or undefined. */
function procState(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
  } catch {
    return undefined;
  }
}

test("a holder that has ended but was not reaped (a zombie) is gone, though its pid answers and its start time is the lock's", {
  skip: processStart(process.pid) === undefined && "no /proc here",
  timeout: 10_000,
}, async () => {
  // A child of a parent that never waits: sh starts `sleep 30` in the background, prints its pid,
  // and becomes (exec) a sleep that never reaps it. Killed, the child stays a zombie of that parent,
  // as a worker of a SIGKILLed run stays where nobody reaps orphans (a container's first process).
  const parent = spawn("sh", ["-c", "sleep 30 & echo $!; exec sleep 30"], { stdio: ["ignore", "pipe", "inherit"] });
  try {
    const pid = await new Promise<number>((resolve, reject) => {
      let text = "";
      parent.stdout.on("data", (d: Buffer) => {
        text += d.toString();
        if (text.includes("\n")) resolve(Number(text.trim()));
      });
      parent.on("error", reject);
    });
    const started = processStart(pid);
    assert.ok(started !== undefined, `pid ${pid} has a start time`);
    const lock: LockHolder = { ...holder(pid), started };
    assert.ok(holderAlive(lock), "alive while it runs");
    process.kill(pid, "SIGKILL");
    for (let i = 0; i < 500 && procState(pid) !== "Z"; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(procState(pid), "Z", "a zombie");
    // What the other checks see: the pid answers, the start time is the lock's.
    assert.doesNotThrow(() => process.kill(pid, 0));
    assert.equal(processStart(pid), started);
    assert.ok(!holderAlive(lock), "a zombie does not hold the lock");
  } finally {
    parent.kill("SIGKILL");
  }
});
