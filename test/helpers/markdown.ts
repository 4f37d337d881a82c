// Reading markdown as the documentation tests do: fenced code blocks, and the stitchlab commands
// in them (test/docs.test.ts checks their options, test/readme.test.ts runs them).

/** Each line of a markdown text with whether it lies inside a fenced code block (``` or ~~~); fence lines are left out. */
export function* fenced(text: string): Generator<{ line: string; code: boolean }> {
  let fence: string | null = null;
  for (const line of text.split("\n")) {
    const m = /^\s{0,3}(`{3,}|~{3,})/.exec(line);
    if (m) {
      if (fence === null) fence = m[1];
      else if (m[1][0] === fence[0] && m[1].length >= fence.length) fence = null;
      continue;
    }
    yield { line, code: fence !== null };
  }
}

/** The stitchlab command lines in a file's code blocks: continuation lines joined, comments cut. */
export function commandLines(text: string): string[] {
  const out: string[] = [];
  let pending = "";
  for (const { line, code } of fenced(text)) {
    if (!code) continue;
    const joined = pending + line.replace(/\s+#\s.*$/, "");
    if (joined.trimEnd().endsWith("\\")) {
      pending = `${joined.trimEnd().slice(0, -1)} `;
      continue;
    }
    pending = "";
    for (const part of joined.split(/&&|;/)) {
      const m = /(?:^|\s)\.\/bin\/stitchlab\.js\s+(.*)$/.exec(part.trim());
      if (m) out.push(m[1].trim());
    }
  }
  return out;
}
