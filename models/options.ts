// The createModel options each architecture takes, and what each may be: an option the model does
// not know, or a value it cannot use, is refused naming the key and what is allowed, as timm's
// create_model refuses an unexpected keyword argument. Without this, `{foo: 1}` was ignored and
// `{stem: "weird"}` built a CIFAR stem while model.json said "weird" (issue 25).
interface OptionRule {
  /** What the value must be, in words. */
  expected: string;
  ok: (v: unknown) => boolean;
}

const whole = (min: number): OptionRule => ({
  expected: `a whole number >= ${min}`,
  ok: (v) => Number.isSafeInteger(v) && (v as number) >= min,
});
const positive: OptionRule = {
  expected: "a number > 0",
  ok: (v) => typeof v === "number" && Number.isFinite(v) && v > 0,
};
const oneOf = (...values: string[]): OptionRule => ({
  expected: `one of ${values.map((v) => JSON.stringify(v)).join(", ")}`,
  ok: (v) => typeof v === "string" && values.includes(v),
});

const CNN = { numClasses: whole(1), width: positive, imageSize: whole(1) };
const RESNET = {
  numClasses: CNN.numClasses,
  width: CNN.width,
  stem: oneOf("cifar", "imagenet"),
  imageSize: CNN.imageSize,
};
const VIT = {
  numClasses: whole(1),
  imageSize: whole(1),
  patchSize: whole(1),
  embedDim: whole(1),
  depth: whole(1),
  numHeads: whole(1),
  mlpRatio: positive,
  pointBlocks: {
    expected: "a list of block indices (whole numbers >= 0)",
    ok: (v: unknown) => Array.isArray(v) && v.every((i) => Number.isSafeInteger(i) && i >= 0),
  },
};

/** The options of an architecture, by the family its name begins with (the zoo's names: models/registry.ts). */
function rulesOf(arch: string): Record<string, OptionRule> | undefined {
  if (arch.startsWith("resnet")) return RESNET;
  if (arch.startsWith("vgg")) return CNN;
  if (arch.startsWith("vit")) return VIT;
  return undefined;
}

/** The names of an architecture's options, in the order its documentation gives them. */
export const optionNames = (arch: string): string[] => Object.keys(rulesOf(arch) ?? {});

/**
 * The first problem with `options` for `arch`, as the key it concerns and a message naming the
 * key and what is allowed; null when they are fine (or the name is no architecture family of
 * the zoo's: that is createModel's error). Undefined values count as absent.
 */
export function modelOptionsIssue(
  arch: string,
  options: Record<string, unknown>,
): { key: string; message: string } | null {
  const rules = rulesOf(arch);
  if (!rules) return null;
  for (const [key, value] of Object.entries(options)) {
    if (value === undefined) continue;
    const rule = Object.hasOwn(rules, key) ? rules[key] : undefined;
    if (!rule)
      return { key, message: `${arch} has no option '${key}' (its options: ${Object.keys(rules).join(", ")})` };
    if (!rule.ok(value))
      return { key, message: `${arch}'s option ${key} is ${JSON.stringify(value)}: expected ${rule.expected}` };
  }
  return null;
}

/** Throws modelOptionsIssue's message, after `where` (e.g. the file) when given. */
export function checkModelOptions(arch: string, options: Record<string, unknown>, where?: string): void {
  const issue = modelOptionsIssue(arch, options);
  if (issue) throw new Error(where ? `${where}: ${issue.message}` : issue.message);
}
