// The native addon under AddressSanitizer (issue 36): build it with ASan (`npm run build:native --
// --sanitize`, into native/build-asan/, up to date in seconds after the first build), then run
// the tests that drive the addon's own code (the operator bridge, autograd, the typed calls, CUDA
// graphs' CPU fallback, autocast, and the layout tests with our channels-last batch norm) with
// that addon and libasan preloaded. An out-of-bounds access, a use after free or a double free in
// the addon's code aborts with ASan's report. (libtorch's own kernels are not instrumented; the
// layout test's AVX2 run and bench/layout_safety.py watch those through the allocator.)
// test/memory.test.ts is left out: it measures resident memory, which ASan's quarantine changes.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

const ROOT = join(import.meta.dirname, "..");
const SANITIZED = ["ops", "grad", "typed", "graphs", "autocast", "layout"].map((f) => join("test", `${f}.test.ts`));

/** libasan of the compiler that builds the addon (`gcc -print-file-name` names the bare file when it has none). */
function libasan(): string {
  const r = spawnSync("gcc", ["-print-file-name=libasan.so"], { encoding: "utf8" });
  const path = r.stdout.trim();
  assert.ok(
    r.status === 0 && path.startsWith("/") && existsSync(path),
    `gcc has no libasan.so (${path || r.stderr}): install gcc's sanitizer runtime (build-essential brings it)`,
  );
  return path;
}

test("the addon built with AddressSanitizer passes the native and layout tests without a report", () => {
  const build = spawnSync(process.execPath, [join(ROOT, "native", "build.mjs"), "--sanitize"], {
    cwd: ROOT,
    encoding: "utf8",
    timeout: 1_200_000,
  });
  assert.equal(build.status, 0, `the sanitizer build failed:\n${(build.stdout + build.stderr).slice(-3000)}`);
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    STITCHLAB_ADDON: "asan",
    LD_PRELOAD: libasan(),
    // Node and libtorch keep memory until exit by design: leaks are not what this looks for.
    ASAN_OPTIONS: "detect_leaks=0:abort_on_error=1",
  };
  // Else the child reports to this runner's protocol instead of printing its results.
  delete env.NODE_TEST_CONTEXT;
  // The addon is the sanitized one, so that a pass means something.
  const probe = spawnSync(
    process.execPath,
    ["--import", "tsx", "-e", 'import("./torch/index.js").then((t) => console.log(t.buildInfo().addressSanitizer))'],
    { cwd: ROOT, env, encoding: "utf8" },
  );
  assert.equal(probe.stdout.trim(), "true", `the ASan addon did not load:\n${probe.stderr.slice(-2000)}`);
  const r = spawnSync(
    process.execPath,
    ["--expose-gc", "--import", "tsx", "--test", "--test-concurrency=1", ...SANITIZED],
    { cwd: ROOT, env, encoding: "utf8", timeout: 900_000, maxBuffer: 64 * 1024 * 1024 },
  );
  const out = `${r.stdout}\n${r.stderr}`;
  assert.doesNotMatch(out, /ERROR: AddressSanitizer/, out.slice(out.indexOf("ERROR: AddressSanitizer"), 4000));
  assert.equal(r.signal, null, `killed by ${r.signal}:\n${out.slice(-3000)}`);
  assert.equal(r.status, 0, `failed under ASan:\n${out.slice(-3000)}`);
  assert.match(r.stdout, /# pass [1-9]\d\d/, "the sanitized files ran their tests");
  assert.match(r.stdout, /# fail 0/);
});
