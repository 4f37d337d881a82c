// The documentation: README.md is a quick start (short, with the two commands a newcomer runs),
// and every relative link in README.md and docs/*.md points at a file inside the repository
// (and, with an #anchor into a markdown file, at a heading that exists there).
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, isAbsolute, join, relative, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { runCli } from "./helpers/cli.js";
import { commandLines, fenced } from "./helpers/markdown.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const docFiles = [
  "README.md",
  ...readdirSync(join(root, "docs"))
    .filter((f) => f.endsWith(".md"))
    .sort()
    .map((f) => `docs/${f}`),
];
const read = (file: string) => readFileSync(join(root, file), "utf8");

/** The lines outside fenced code blocks (``` or ~~~), with inline code spans removed. */
function prose(text: string): string[] {
  const out: string[] = [];
  for (const { line, code } of fenced(text)) if (!code) out.push(line.replace(/(`+)[^`]*?\1/g, ""));
  return out;
}

/** GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

/** The anchors of a markdown file's headings, with GitHub's -1, -2 suffixes for repeats. */
function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const { line, code } of fenced(text)) {
    const m = code ? null : /^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const base = slug(m[1]);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** The link targets of a markdown file: [text](target) and ![alt](target), outside code. */
function links(text: string): string[] {
  const out: string[] = [];
  for (const line of prose(text))
    for (const m of line.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) out.push(m[1]);
  return out;
}

const external = (target: string) => /^[a-z][a-z0-9+.-]*:/i.test(target);

test("the slug of a heading is GitHub's", () => {
  assert.equal(slug("The demo (`stitchlab demo`)"), "the-demo-stitchlab-demo");
  assert.equal(slug("On a GPU (`--device cuda`, `--autocast bf16`)"), "on-a-gpu---device-cuda---autocast-bf16");
  assert.equal(
    slug("Differences from the reference code, on purpose"),
    "differences-from-the-reference-code-on-purpose",
  );
});

test("every relative link in README.md and docs/*.md resolves inside the repository", () => {
  const problems: string[] = [];
  let checked = 0;
  for (const file of docFiles) {
    for (const target of links(read(file))) {
      if (external(target)) continue;
      checked++;
      const [pathPart, anchor] = target.split("#", 2) as [string, string | undefined];
      const path = pathPart === "" ? join(root, file) : resolve(root, dirname(file), decodeURIComponent(pathPart));
      const inside = relative(root, path);
      if (inside.startsWith("..") || isAbsolute(inside)) {
        problems.push(`${file}: ${target} points outside the repository`);
        continue;
      }
      if (!existsSync(path)) {
        problems.push(`${file}: ${target}: no such file`);
        continue;
      }
      if (anchor !== undefined && path.endsWith(".md") && !anchors(readFileSync(path, "utf8")).has(anchor))
        problems.push(`${file}: ${target}: no heading with the anchor #${anchor} in ${inside}`);
    }
  }
  assert.deepEqual(problems, []);
  assert.ok(checked > 10, `only ${checked} relative links found: is the link pattern right?`);
});

test("README.md is a quick start of at most 260 lines", () => {
  const lines = read("README.md").replace(/\n$/, "").split("\n").length;
  assert.ok(lines <= 260, `README.md has ${lines} lines; move detail into docs/`);
});

test("README.md has the two commands for a newcomer, exactly", () => {
  const readme = read("README.md").split("\n");
  for (const command of [
    "bash scripts/setup.sh && ./bin/stitchlab.js demo",
    "bash scripts/setup.sh --tests && npm test",
  ])
    assert.ok(readme.includes(command), `README.md lacks the line: ${command}`);
});

test("every stitchlab command in README.md and docs/ names a command and options that exist, with the required ones", () => {
  const helpOf = new Map<string, { flags: Set<string>; required: string[] }>();
  const help = (command: string[]) => {
    const key = command.join(" ");
    let h = helpOf.get(key);
    if (!h) {
      const r = runCli([...command, "--help"]);
      assert.equal(r.status, 0, `stitchlab ${key} --help: ${r.stderr}`);
      const entries = r.stdout.split(/\n(?= {2}-)/).map((e) => e.replace(/\s+/g, " ").trim());
      const flags = new Set<string>();
      const required: string[] = [];
      for (const e of entries) {
        const names = [...e.matchAll(/(?:^|, )(--?[a-zA-Z][\w-]*)/g)].map((m) => m[1]);
        for (const n of names) flags.add(n);
        if (e.endsWith("(required)") && names[0]) required.push(names[0]);
      }
      h = { flags, required };
      helpOf.set(key, h);
    }
    return h;
  };
  let checked = 0;
  for (const file of docFiles)
    for (const line of commandLines(read(file))) {
      const words = line.split(/\s+/).filter((w) => w && !w.startsWith("'") && !w.endsWith("'"));
      const command = words[0] === "data" ? words.slice(0, 2) : words.slice(0, 1);
      if (!command[0] || command[0].startsWith("-")) continue; // --version and the like
      const { flags, required } = help(command);
      const given = words.filter((w) => /^--?[a-zA-Z]/.test(w)).map((w) => w.split("=")[0]);
      for (const g of given) assert.ok(flags.has(g), `${file}: \`stitchlab ${line}\`: no option ${g}`);
      if (!given.includes("--help") && !given.includes("--dry-run") && !given.includes("--json"))
        for (const r of required) assert.ok(given.includes(r), `${file}: \`stitchlab ${line}\` lacks ${r}`);
      checked++;
    }
  assert.ok(checked >= 20, `only ${checked} command lines found`);
});
