// findings/ (issue 53): the room that turns result rows into statements sits between experiments/
// and metrics/. It reads rows and summaries, never a plan, a run or a model: its files import only
// each other, metrics/, io/files.ts and the two leaves of stitch/ that name things (the modes'
// words, the residual a set is judged by). experiments/ and report/ import it, not the reverse.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const ALLOWED = [
  /^findings\/[\w-]+\.ts$/,
  /^metrics\/[\w-]+\.ts$/,
  /^io\/files\.ts$/,
  /^stitch\/(modes|residuals)\.ts$/,
];

/** Every relative import of a file, as a path from the repository's root. */
export function relativeImports(file: string): string[] {
  const text = readFileSync(join(root, file), "utf8");
  return [...text.matchAll(/(?:from|import)\s*\(?\s*"(\.{1,2}\/[^"]+)"/g)].map((m) =>
    relative(root, resolve(root, dirname(file), (m[1] as string).replace(/\.js$/, ".ts"))),
  );
}

test("findings/ imports only findings/, metrics/, io/files.ts and stitch/'s two leaves", () => {
  const files = readdirSync(join(root, "findings")).filter((f) => f.endsWith(".ts"));
  assert.ok(files.length >= 7, `findings/ holds its files (${files.join(", ")})`);
  const outside = files.flatMap((f) =>
    relativeImports(`findings/${f}`)
      .filter((to) => !ALLOWED.some((a) => a.test(to)))
      .map((to) => `findings/${f} -> ${to}`),
  );
  assert.deepEqual(outside, []);
});

test("the rule catches an import from outside the room (a checker that finds nothing cannot pass)", () => {
  // experiments/results.ts reads the cache and torch: it must fail the rule findings/ passes.
  const bad = relativeImports("experiments/results.ts").filter((to) => !ALLOWED.some((a) => a.test(to)));
  assert.ok(
    bad.some((to) => to.startsWith("torch/")),
    `found ${bad.join(", ")}`,
  );
});

test("nothing below findings/ imports it, and report/ imports it, not the reverse", () => {
  const below = ["metrics", "io", "stitch", "torch", "nn", "data", "eval", "models", "train"];
  const up = below.flatMap((d) =>
    readdirSync(join(root, d))
      .filter((f) => f.endsWith(".ts"))
      .flatMap((f) =>
        relativeImports(`${d}/${f}`)
          .filter((to) => to.startsWith("findings/"))
          .map((to) => `${d}/${f} -> ${to}`),
      ),
  );
  assert.deepEqual(up, []);
});

test("bench/ imports nothing of test/ (tests may use bench/'s tools, not the reverse)", () => {
  const files = readdirSync(join(root, "bench")).filter((f) => f.endsWith(".ts"));
  const intoTests = files.flatMap((f) =>
    relativeImports(`bench/${f}`)
      .filter((to) => to.startsWith("test/"))
      .map((to) => `bench/${f} -> ${to}`),
  );
  assert.deepEqual(intoTests, []);
});
