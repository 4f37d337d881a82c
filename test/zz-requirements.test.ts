// The loud end of the suite (last in test/*.test.ts's order): tests whose requirement is
// missing skip (test/helpers/requirements.ts), and outside CI a skip used to pass unnoticed, so
// that `npm test` without Python's PyTorch, Chromium or Fashion-MNIST passed with a quarter of
// the suite not run. This file checks every requirement again (each test file runs in its own
// process, so it cannot collect the others' skips) and fails, listing what is missing and how
// to get it, unless STITCHLAB_ALLOW_SKIPS=1 says the skips are meant.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { test } from "node:test";
import { tsxLoader } from "./helpers/cli.js";
import { absentRequirements, missing, REQUIREMENTS, skipsAllowed } from "./helpers/requirements.js";

test("every requirement of the suite is here, or STITCHLAB_ALLOW_SKIPS=1 allows the skips", (t) => {
  const absent = absentRequirements();
  const lines = absent.map((r) => `- ${r.what}: ${r.why}\n  to get it: ${r.howToGet}`);
  const summary = `${absent.length} requirement(s) of the test suite missing here, so their tests were skipped:\n${lines.join("\n")}`;
  if (absent.length) {
    // Loud whatever the reporter: on stderr as well as in the test's diagnostics.
    console.error(`\n${summary}\n`);
    t.diagnostic(summary);
  } else t.diagnostic(`all ${Object.keys(REQUIREMENTS).length} requirements present: nothing skipped for want of one`);
  if (skipsAllowed()) return;
  assert.equal(
    absent.length,
    0,
    `${summary}\nInstall them (bash scripts/setup.sh --tests installs all of them), or set STITCHLAB_ALLOW_SKIPS=1 to let the suite pass with those tests skipped.`,
  );
});

test("missing(): false when present; the reason, recorded, when absent; an error in CI unless skips are allowed, and when required", () => {
  assert.equal(missing("a thing", true, "make it"), false);
  const run = (env: Record<string, string | undefined>) => {
    const code = `const { missing, recordedSkips } = await import(${JSON.stringify(new URL("./helpers/requirements.ts", import.meta.url).href)});
      try { const r = missing("a thing", false, "make it", process.env.REQUIRED === "1"); console.log(JSON.stringify({ r, recorded: recordedSkips })); }
      catch (e) { console.log(JSON.stringify({ error: e.message })); }`;
    const r = spawnSync(process.execPath, ["--import", tsxLoader, "--input-type=module", "-e", code], {
      encoding: "utf8",
      env: { ...process.env, CI: undefined, STITCHLAB_ALLOW_SKIPS: undefined, ...env },
    });
    assert.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout);
  };
  const local = run({});
  assert.equal(local.r, "a thing is missing; to get it: make it");
  assert.deepEqual(local.recorded, [local.r]);
  assert.match(run({ CI: "1" }).error, /required in CI, but a thing is missing; to get it: make it/);
  assert.equal(run({ CI: "1", STITCHLAB_ALLOW_SKIPS: "1" }).r, "a thing is missing; to get it: make it");
  assert.match(
    run({ REQUIRED: "1", STITCHLAB_ALLOW_SKIPS: "1" }).error,
    /required here \(asked for\), but a thing is missing/,
    "asked for (STITCHLAB_REQUIRE_PYTORCH) wins over allowed skips",
  );
});

test("a missing requirement makes this file fail, naming it and how to get it, unless STITCHLAB_ALLOW_SKIPS=1", () => {
  // This file again, with a Python that cannot exist and an empty PATH: PyTorch, torchvision
  // (which needs it), Chromium and script are missing; Fashion-MNIST is not (a fixed path).
  const again = (env: Record<string, string | undefined>) =>
    spawnSync(
      process.execPath,
      ["--import", tsxLoader, "--test", "--test-name-pattern=every requirement", new URL(import.meta.url).pathname],
      {
        encoding: "utf8",
        env: {
          ...process.env,
          CI: undefined,
          // Not a child of this test runner: the run reports and exits as on its own.
          NODE_TEST_CONTEXT: undefined,
          STITCHLAB_PYTHON: "/nonexistent/python3",
          STITCHLAB_CHROMIUM: undefined,
          PATH: "/nonexistent",
          ...env,
        },
      },
    );
  const strict = again({ STITCHLAB_ALLOW_SKIPS: undefined });
  assert.equal(strict.status, 1, strict.stdout);
  const out = strict.stdout + strict.stderr;
  assert.match(out, /requirement\(s\) of the test suite missing here/);
  assert.match(out, /Python's PyTorch .*: \/nonexistent\/python3 cannot import torch/);
  assert.match(out, /to get it: apt-get install python3-torch \(bash scripts\/setup\.sh --tests installs it\)/);
  assert.match(out, /to get it: apt-get install chromium/);
  assert.match(out, /set STITCHLAB_ALLOW_SKIPS=1/);
  const allowed = again({ STITCHLAB_ALLOW_SKIPS: "1" });
  assert.equal(allowed.status, 0, allowed.stdout + allowed.stderr);
  assert.match(allowed.stdout + allowed.stderr, /Python's PyTorch/, "still listed when allowed");
});
