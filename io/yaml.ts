// YAML (and JSON, a subset) with a bound on how deeply collections nest. The yaml package builds
// its documents recursively, so a file of a few thousand nested `[` or indented keys overflowed
// the stack ("Maximum call stack size exceeded at line 2"), an error that names neither the cause
// nor the fix. Its concrete syntax tree is made without recursion, so the depth is measured there,
// with a stack of our own, before the document is built.
import { type CST, Parser, parse } from "yaml";

/** Nesting deeper than this is refused: an experiment file needs about five levels. */
export const MAX_YAML_DEPTH = 64;

/** Nesting past the bound: valid YAML, but refused, with its own message. */
export class YamlTooDeepError extends Error {}

/** Where a collection nested more than `max` deep first begins (an offset into text), or undefined. */
function tooDeep(text: string, max: number): number | undefined {
  let first: number | undefined;
  const stack: { token: CST.Token | null | undefined; depth: number }[] = [];
  for (const doc of new Parser().parse(text)) stack.push({ token: doc, depth: 0 });
  for (let top = stack.pop(); top; top = stack.pop()) {
    const { token, depth } = top;
    if (!token) continue;
    if (token.type === "document") stack.push({ token: token.value, depth });
    else if (token.type === "block-map" || token.type === "block-seq" || token.type === "flow-collection") {
      if (depth + 1 > max) {
        first = Math.min(first ?? token.offset, token.offset);
        continue;
      }
      for (const item of token.items)
        stack.push(
          { token: "key" in item ? item.key : undefined, depth: depth + 1 },
          { token: item.value, depth: depth + 1 },
        );
    }
  }
  return first;
}

/**
 * Parses YAML text as `yaml`'s parse does, after refusing collections nested more than `maxDepth`
 * deep with an error naming the line (the caller names the file).
 */
export function parseYamlBounded(text: string, maxDepth = MAX_YAML_DEPTH): unknown {
  const offset = tooDeep(text, maxDepth);
  if (offset !== undefined) {
    let line = 1;
    for (let i = text.indexOf("\n"); i >= 0 && i < offset; i = text.indexOf("\n", i + 1)) line++;
    throw new YamlTooDeepError(
      `lists or mappings nested more than ${maxDepth} levels deep (from line ${line}): look for an unclosed [ or {, or indentation that runs away`,
    );
  }
  return parse(text);
}
