// The task lock (experiments/lock.ts): a live holder is waited for, a dead one is taken over,
// and the lock goes when the work ends, thrown or not.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
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

test("a lock whose process is gone is taken over at once", async () => {
  const path = join(tmp, "k2.lock");
  const dead = spawnSync("true").pid as number;
  assert.ok(!holderAlive(holder(dead)));
  writeFileSync(path, JSON.stringify(holder(dead)));
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
  assert.equal(waited, false);
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
