// stitchlab's processes (issue 14): the commands that only read files start without libtorch;
// every command is found by the lazy command table; and a `run --workers N` stopped by SIGTERM,
// SIGINT or SIGKILL leaves no worker behind, so a rerun finds no live lock to wait on; and the
// runner reads a worker's output by whole lines.
import assert from "node:assert/strict";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, type TestContext, test } from "node:test";
import { pathToFileURL } from "node:url";
import { buildProgram, COMMAND_MODULES, modulesFor } from "../cli/commands.js";
import { recordLocalRun } from "../experiments/local.js";
import { holderAlive, readHolder, withLock } from "../experiments/lock.js";
import { planExperiment } from "../experiments/plan.js";
import { lineSplitter, progressFields } from "../experiments/runner.js";
import { parseExperiment } from "../experiments/spec.js";
import { cliCommand, taskCommand } from "../experiments/tasks.js";
import { runCli } from "./helpers/cli.js";

const LINUX = existsSync("/proc/self/maps");
const HAVE_DATA = existsSync("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
const tmp = mkdtempSync(join(tmpdir(), "stitchlab-process-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

// Two independent trainings long enough (minutes) never to end before the test stops them.
const SLOW = `
name: slow
dataset: { name: fashion-mnist, limit: 2000, testLimit: 100 }
models:
  a: { arch: resnet18, width: 0.125, seed: 0, epochs: 50 }
  b: { arch: resnet18, width: 0.125, seed: 1, epochs: 50 }
pairs:
  - { front: b, back: a, relation: cross-seed }
points: [layer1.0]
objectives: [slm]
modes: [standard]
stitch: { limit: 64, epochs: 1, batchSize: 32, initImages: 32, ckaImages: 32 }
`;

/**
 * Runs the CLI from the sources with a preload that, as the process exits (process.exit or not),
 * writes whether it mapped stitchlab's addon or libtorch: a command that never computes should
 * have loaded neither.
 */
function cliWithMaps(args: string[]) {
  const out = join(tmp, `maps-${args.join("-").replace(/\W+/g, "_")}.json`);
  const probe = join(tmp, "maps-probe.mjs");
  writeFileSync(
    probe,
    [
      'import { readFileSync, writeFileSync } from "node:fs";',
      'process.on("exit", () => {',
      '  const maps = readFileSync("/proc/self/maps", "utf8");',
      '  const loaded = { addon: maps.includes("stitchlab.node"), libtorch: /libtorch/.test(maps) };',
      "  writeFileSync(process.env.STITCHLAB_TEST_MAPS, JSON.stringify(loaded));",
      "});",
    ].join("\n"),
  );
  const r = spawnSync(process.execPath, ["--import", pathToFileURL(probe).href, ...cliCommand(...args)], {
    encoding: "utf8",
    cwd: tmp,
    env: { ...process.env, STITCHLAB_TEST_MAPS: out },
  });
  return { ...r, loaded: JSON.parse(readFileSync(out, "utf8")) as { addon: boolean; libtorch: boolean } };
}

test("--version, --help, schema and status start without libtorch", { skip: !LINUX && "no /proc here" }, () => {
  const none = { addon: false, libtorch: false };
  const version = cliWithMaps(["--version"]);
  assert.equal(version.status, 0, version.stderr);
  assert.match(version.stdout, /^\d+\.\d+\.\d+/);
  assert.deepEqual(version.loaded, none, "--version");

  const help = cliWithMaps(["--help"]);
  assert.equal(help.status, 0, help.stderr);
  for (const m of COMMAND_MODULES)
    for (const name of m.names) assert.match(help.stdout, new RegExp(`^  ${name} `, "m"));
  assert.deepEqual(help.loaded, none, "--help");

  const schema = cliWithMaps(["schema"]);
  assert.equal(schema.status, 0, schema.stderr);
  assert.ok(JSON.parse(schema.stdout).properties.models, "the experiment file's schema");
  assert.deepEqual(schema.loaded, none, "schema");

  const nothing = cliWithMaps(["status", join(tmp, "no-run-here")]);
  assert.equal(nothing.status, 1);
  assert.match(nothing.stderr, /^stitchlab: .* holds no stitchlab run/m);
  assert.deepEqual(nothing.loaded, none, "status of no run");

  // A local run recorded and never started: every task missing, read from the cache alone.
  const out = join(tmp, "recorded");
  const plan = planExperiment(parseExperiment(SLOW, "slow.yaml"), join(tmp, "slow.yaml"));
  recordLocalRun(out, { plan, cache: join(tmp, "recorded-cache"), scale: "default", device: "cpu" });
  const status = cliWithMaps(["status", out]);
  assert.equal(status.status, 0, status.stderr);
  assert.match(
    status.stdout,
    new RegExp(`${plan.tasks.length} tasks: 0 done, 0 running, 0 failed, ${plan.tasks.length} missing`),
  );
  assert.deepEqual(status.loaded, none, "status of a recorded run");
});

test("every command is registered from its own module alone, as the full program registers it", async () => {
  const full = await buildProgram(["node", "stitchlab", "--help"]);
  const names = full.commands.map((c) => c.name());
  assert.deepEqual(
    names,
    COMMAND_MODULES.flatMap((m) => m.names),
    "the table names each module's commands, in the order --help lists them",
  );
  assert.deepEqual(modulesFor(["--version"]), [], "--version loads no command module");
  for (const name of names) {
    for (const args of [
      [name, "--help"],
      ["help", name],
      ["--help", name, "x"],
    ]) {
      const [m] = modulesFor(args);
      assert.ok(m?.names.includes(name) && modulesFor(args).length === 1, `${args.join(" ")}: ${name}'s module alone`);
    }
    const alone = await buildProgram(["node", "stitchlab", name]);
    const cmd = alone.commands.find((c) => c.name() === name);
    assert.ok(cmd, name);
    assert.equal(cmd.helpInformation(), full.commands.find((c) => c.name() === name)?.helpInformation());
  }
  assert.equal(modulesFor(["trian"]).length, COMMAND_MODULES.length, "an unknown command: all, for 'Did you mean'");
});

/** The processes (other than `except`) whose command line names `text`: here, a run's workers. */
function processesNaming(text: string, except: number[]): number[] {
  const pids: number[] = [];
  for (const p of readdirSync("/proc")) {
    if (!/^\d+$/.test(p) || except.includes(Number(p))) continue;
    try {
      if (readFileSync(`/proc/${p}/cmdline`, "utf8").includes(text)) pids.push(Number(p));
    } catch {
      // ended meanwhile
    }
  }
  return pids;
}

/** Task locks under a cache (`<kind>/<key>.lock`). */
function locks(cache: string): string[] {
  if (!existsSync(cache)) return [];
  return readdirSync(cache, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .flatMap((d) =>
      readdirSync(join(cache, d.name))
        .filter((f) => f.endsWith(".lock"))
        .map((f) => join(cache, d.name, f)),
    );
}

async function until(what: string, ok: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Whatever a failed test left running on a cache: the run and its workers. */
function killAll(cache: string): void {
  for (const pid of processesNaming(cache, [process.pid]))
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // ended meanwhile
    }
}

/** A `run --workers 2` of SLOW, once both workers hold their tasks' locks and one is training. */
async function runningWithTwoWorkers(
  t: TestContext,
  name: string,
): Promise<{ parent: ChildProcess; cache: string; out: string; err: () => string }> {
  const file = join(tmp, "slow.yaml");
  writeFileSync(file, SLOW);
  const cache = join(tmp, `${name}-cache`);
  t.after(() => killAll(cache));
  const out = join(tmp, `${name}-out`);
  const parent = spawn(process.execPath, cliCommand("run", file, "--out", out, "--cache", cache, "--workers", "2"), {
    cwd: tmp,
    stdio: ["ignore", "ignore", "pipe"],
  });
  let err = "";
  parent.stderr?.setEncoding("utf8").on("data", (d: string) => {
    err += d;
  });
  const pid = parent.pid ?? -1;
  // Progress lines come from the workers' stdout through the parent: a worker is training.
  await until(
    "two workers holding their locks, one training",
    () => {
      if (parent.exitCode !== null) throw new Error(`the run ended early: ${err.slice(-1000)}`);
      return locks(cache).length === 2 && processesNaming(cache, [pid]).length === 2 && /epochs 50/.test(err);
    },
    120_000,
  );
  return { parent, cache, out, err: () => err };
}

/**
 * No process names the cache any more, and no lock has a live holder: a rerun takes each at once.
 * `left`: the locks still there (a run stopped by a signal removes its stopped workers' locks; the
 * workers of a run killed outright end themselves without removing theirs).
 */
async function nothingLeft(cache: string, parentPid: number, left: number): Promise<void> {
  await until("the workers to end", () => processesNaming(cache, [parentPid]).length === 0, 10_000);
  const held = locks(cache);
  assert.equal(held.length, left, held.join(", "));
  for (const lock of held) {
    const h = readHolder(lock);
    assert.ok(h && !holderAlive(h), `${lock}: ${JSON.stringify(h)} is not alive`);
    // What the rerun does for each task: take the lock, waiting while a live holder has it.
    const taken = withLock(
      lock,
      async () => "taken",
      (w) => assert.fail(`waited on ${JSON.stringify(w)}`),
      50,
    );
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${lock}: still held`)), 5000);
    });
    assert.equal(await Promise.race([taken, late]), "taken");
    clearTimeout(timer);
  }
}

for (const [signal, code] of [
  ["SIGTERM", 143],
  ["SIGINT", 130],
] as const)
  test(`run --workers 2 stopped by ${signal}: the workers end with it, it exits ${code}, and a rerun waits on no lock`, {
    skip: (!LINUX && "no /proc here") || (!HAVE_DATA && "Fashion-MNIST is not installed"),
  }, async (t) => {
    const { parent, cache, out, err } = await runningWithTwoWorkers(t, signal);
    const closed = new Promise<number | null>((r) => parent.on("close", (c) => r(c)));
    parent.kill(signal);
    assert.equal(await closed, code, err());
    assert.match(err(), /interrupted: finished tasks are kept in the cache .*run the same command again/);
    assert.doesNotMatch(err(), /FAILED/, "a worker stopped with the run has not failed");
    // The parent waited for its workers before exiting: none is left even now.
    assert.deepEqual(processesNaming(cache, [parent.pid ?? -1]), []);
    await nothingLeft(cache, parent.pid ?? -1, 0);
    // Stopped, not failed: the two trainings are missing (to be run), and nothing failed.
    const status = runCli(["status", out], { cwd: tmp });
    assert.match(status.stdout, /3 tasks: 0 done, 0 running, 0 failed, 3 missing/, status.stdout);
  });

test("run --workers 2 killed with SIGKILL: its workers notice and end, and a rerun waits on no lock", {
  skip: (!LINUX && "no /proc here") || (!HAVE_DATA && "Fashion-MNIST is not installed"),
}, async (t) => {
  const { parent, cache, out } = await runningWithTwoWorkers(t, "sigkill");
  const closed = new Promise<NodeJS.Signals | null>((r) => parent.on("close", (_, s) => r(s)));
  parent.kill("SIGKILL");
  assert.equal(await closed, "SIGKILL");
  // Issue 25: status said "missing" of tasks killed under way; they failed, and it says how.
  await until("the workers to end", () => processesNaming(cache, [parent.pid ?? -1]).length === 0, 10_000);
  const status = runCli(["status", out], { cwd: tmp });
  assert.match(status.stdout, /3 tasks: 0 done, 0 running, 2 failed, 1 missing/, status.stdout);
  assert.match(
    status.stdout,
    /failed:\n {2}train a: its process \(\S+ pid \d+ since [^)]+\) ended without finishing it or recording an error: killed \(SIGKILL, or the kernel's out-of-memory killer\)\n {2}train b: its process/,
  );
  await nothingLeft(cache, parent.pid ?? -1, 2);
});

test("a worker killed with SIGKILL (as the out-of-memory killer does) is a failed task, in the run and in status", {
  skip: (!LINUX && "no /proc here") || (!HAVE_DATA && "Fashion-MNIST is not installed"),
}, async (t) => {
  const { parent, cache, out, err } = await runningWithTwoWorkers(t, "oom");
  const closed = new Promise<number | null>((r) => parent.on("close", (c) => r(c)));
  const [worker] = processesNaming(cache, [parent.pid ?? -1]);
  process.kill(worker, "SIGKILL");
  await until("the run to report the failure", () => /FAILED/.test(err()), 30_000);
  assert.match(err(), /train [ab]: FAILED: killed by SIGKILL \(by hand, or by the kernel's out-of-memory killer\)/);
  parent.kill("SIGTERM");
  assert.equal(await closed, 143, err());
  const status = runCli(["status", out], { cwd: tmp });
  assert.match(status.stdout, /3 tasks: 0 done, 0 running, 1 failed, 2 missing/, status.stdout);
  assert.match(
    status.stdout,
    /failed:\n {2}train [ab]: killed by SIGKILL \(by hand, or by the kernel's out-of-memory killer\)\n/,
  );
});

test("the worker script (and `stitchlab task`) reports a bad task as the runner reads it: status 1, the error last on stderr", () => {
  const cache = join(tmp, "empty-cache");
  const worker = spawnSync(process.execPath, taskCommand(cache, "train-nothing"), { encoding: "utf8", cwd: tmp });
  const task = runCli(["task", "train-nothing", "--cache", cache], { cwd: tmp });
  for (const r of [worker, task]) {
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr.trim().split("\n").pop() ?? "", /^stitchlab: no task train-nothing in the cache/);
  }
  assert.match(taskCommand(cache, "k").join(" "), /experiments\/worker\.(ts|js) k --cache /, "not the CLI");
});

test("a worker's stdout is read by whole lines: one split across chunks, several in one chunk, a last one without newline", () => {
  const got: string[] = [];
  const lines = lineSplitter((l) => got.push(l));
  const loss = JSON.stringify({ epoch: 1, epochs: 4, step: 30, steps: 78, loss: 1.2345 });
  // A pipe hands over what was written so far: here the line breaks inside a number.
  lines.push(`${loss.slice(0, 40)}`);
  assert.deepEqual(got, [], "half a line waits for its rest");
  lines.push(`${loss.slice(40)}\n{"epoch":1,"step":31}\n\n{"epoch":1,`);
  assert.deepEqual(got, [loss, '{"epoch":1,"step":31}'], "blank lines left out");
  lines.push('"step":32}\r\n{"event":"done","key":"train-x","state":"ran"}');
  lines.end();
  assert.deepEqual(got, [
    loss,
    '{"epoch":1,"step":31}',
    '{"epoch":1,"step":32}',
    '{"event":"done","key":"train-x","state":"ran"}',
  ]);
  lines.end();
  assert.equal(got.length, 4, "nothing is given twice");
  // What of them is progress: the fields, not the worker's own events, nor what is not a JSON object.
  assert.deepEqual(progressFields(loss), JSON.parse(loss));
  assert.equal(progressFields('{"event":"done","key":"train-x","state":"ran"}'), null);
  assert.equal(progressFields('{"epoch":1,"st'), null);
  assert.equal(progressFields("[1, 2]"), null);
  assert.equal(progressFields("loading..."), null);
});
