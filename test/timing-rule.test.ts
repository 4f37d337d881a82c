// No test asserts on wall-clock time (issue 51): the suite must pass on a machine busy with other
// work. Real-scale timing lives in bench/. The rule (test/helpers/timed-assertions.ts) is tested on
// snippets first, so that a checker that finds nothing cannot pass for a clean suite.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { findTimedAssertions } from "./helpers/timed-assertions.js";

const here = dirname(fileURLToPath(import.meta.url));

test("the timing rule finds a clock bound however it reaches the assertion", () => {
  const flagged = (src: string) => findTimedAssertions(src).length;
  // Directly, through a name, through arithmetic, through a helper's return, an arrow's body, an object's field.
  assert.equal(flagged("const t0 = Date.now(); run(); assert.ok(Date.now() - t0 < 20_000);"), 1);
  assert.equal(
    flagged("const t0 = performance.now(); run(); const ms = performance.now() - t0; assert.ok(ms < 5);"),
    1,
  );
  assert.equal(
    flagged("const t = process.hrtime.bigint(); const d = Number(process.hrtime.bigint() - t) / 1e6; assert(d <= 9);"),
    1,
  );
  assert.equal(
    flagged(
      "async function f() { const t0 = Date.now(); await g(); return Date.now() - t0; }\nconst x = await f(); assert.ok(x >= 350 && x < 2000);",
    ),
    1,
  );
  assert.equal(flagged("const f = () => Date.now() - start; assert.ok(f() < 9);"), 1);
  assert.equal(flagged("const o = { name, ms: performance.now() - t0 }; assert.ok(o.ms < limit, 'slow');"), 1);
  assert.equal(
    flagged("const clock = [performance.now()]; clock.push(performance.now()); assert.ok(clock[1] - clock[0] < 3);"),
    1,
  );
  // A run's time parsed from its output is still wall-clock.
  assert.equal(flagged("const real = runSeconds(stdout); assert.ok(estimate <= 2 * real && real <= 2 * estimate);"), 1);
  assert.equal(flagged("assert.ok(took < 3000, 'stopped');"), 1);
  // Not assertions, or no comparison with time: a deadline while polling, a printed time, an equality of counts.
  assert.equal(flagged("const until = Date.now() + 5000; while (Date.now() < until && !done()) sleep(10);"), 0);
  assert.equal(flagged("if (Date.now() > end) throw new Error('timed out waiting');"), 0);
  assert.equal(flagged("const t0 = Date.now(); run(); console.log(Date.now() - t0); assert.equal(n, 3);"), 0);
  assert.equal(flagged("assert.ok(statSync(f).mtimeMs >= started - 1000);"), 0);
  assert.equal(flagged("assert.ok(e.seconds > 0); assert.ok(estimate <= 0.625 * e);"), 0);
  // A waiver says why the line is no wall-clock bound.
  assert.equal(flagged("// timing-rule: compares two estimates of one probe\nassert.ok(took <= 0.625 * e);"), 0);
  assert.equal(flagged("// a comment that waives nothing\nassert.ok(took <= 0.625 * e);"), 1);
});

test("no test file compares elapsed wall-clock time against a bound", () => {
  const files = [
    ...readdirSync(here).filter((f) => f.endsWith(".ts")),
    ...readdirSync(join(here, "helpers"))
      .filter((f) => f.endsWith(".ts") && f !== "timed-assertions.ts")
      .map((f) => join("helpers", f)),
  ];
  assert.ok(files.length > 50, `only ${files.length} test files found`);
  const found = files.flatMap((f) =>
    findTimedAssertions(readFileSync(join(here, f), "utf8"), f).map((a) => `test/${f}:${a.line}: ${a.text}`),
  );
  assert.deepEqual(
    found,
    [],
    `timed assertions (move them to bench/, or assert the behaviour instead):\n${found.join("\n")}`,
  );
});
