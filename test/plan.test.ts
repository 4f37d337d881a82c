// The planner's parts, each alone (experiments/plan.ts): the models, the experiment's lists, a
// pair's points, a replicate's tasks. planExperiment composes them; the experiment, config and
// errors tests cover the composition.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  checkExperiment,
  checkPair,
  type PlanContext,
  planModels,
  planReplicate,
  REPLICATE_SEED_STRIDE,
} from "../experiments/plan.js";
import { parseExperiment } from "../experiments/spec.js";

const EXP = `
name: parts
dataset: { name: fashion-mnist, limit: 300, testLimit: 100 }
models:
  a: { arch: resnet18, width: 0.0625, seed: 0, epochs: 1 }
  b: { arch: resnet18, width: 0.0625, seed: 1, epochs: 1 }
pairs:
  - { front: a, back: b, relation: cross-seed }
points: [layer1.0, layer2.1]
objectives: [slm, hlm]
modes: [standard, iris]
replicates: 2
iris: { limit: 64, steps: 3, batchSize: 32 }
stitch: { limit: 64, epochs: 1, batchSize: 32 }
`;

const fresh = (): PlanContext => ({ tasks: new Map(), problems: [] });

test("planModels: one train task per trained model, its points and classes; a bad model is a problem under its name", () => {
  const ctx = fresh();
  const m = planModels(parseExperiment(EXP, "exp.yaml"), "/nowhere", ctx);
  assert.deepEqual(ctx.problems, []);
  assert.equal(ctx.tasks.size, 2);
  assert.deepEqual(Object.keys(m.refs), ["a", "b"]);
  assert.ok(m.points.a?.points.includes("layer2.1"));
  assert.equal(m.classes.b, 10);
  assert.equal(m.trainConfigs.b?.seed, 1);

  const bad = fresh();
  const withMissing = EXP.replace(
    "  b: { arch: resnet18, width: 0.0625, seed: 1, epochs: 1 }",
    "  b: { checkpoint: missing.safetensors }",
  );
  const mb = planModels(parseExperiment(withMissing, "exp.yaml"), "/nowhere", bad);
  assert.equal(bad.problems.length, 1);
  assert.match(bad.problems[0] as string, /^models\.b: checkpoint not found: \/nowhere\/missing\.safetensors/);
  assert.ok(mb.refs.a && !mb.refs.b);
});

test("checkExperiment: a seed twice, an objective twice (as written or normalised) and one that does not parse are problems; the rest are returned", () => {
  const ctx = fresh();
  const exp = parseExperiment(
    EXP.replace("objectives: [slm, hlm]", "objectives: [slm, hlm, SLM, nonsense]"),
    "exp.yaml",
  );
  exp.seeds = [0, 0];
  const objectives = checkExperiment(exp, ctx);
  assert.deepEqual(objectives, ["slm", "hlm", "SLM"]);
  assert.ok(
    ctx.problems.some((p) => p.startsWith("seeds[1]: the same as seeds[0]")),
    ctx.problems.join("\n"),
  );
  assert.ok(
    ctx.problems.some((p) => p.startsWith("objectives[2]: the same as objectives[0]")),
    ctx.problems.join("\n"),
  );
  assert.ok(
    ctx.problems.some((p) => p.startsWith("objectives[3]: ")),
    ctx.problems.join("\n"),
  );
  // With replicates, a seed at or above the stride would make one replicate's run another's.
  const high = fresh();
  checkExperiment(parseExperiment(EXP.replace("seed: 1,", `seed: ${REPLICATE_SEED_STRIDE},`), "exp.yaml"), high);
  assert.deepEqual(high.problems, [
    `models.b.seed: seed ${REPLICATE_SEED_STRIDE} must be below ${REPLICATE_SEED_STRIDE} with replicates (replicate r adds ${REPLICATE_SEED_STRIDE} r)`,
  ]);
});

test("checkPair: the pair's points when both models have them; null, with the problem, when a model or a point is missing", () => {
  const exp = parseExperiment(EXP, "exp.yaml");
  const ctx = fresh();
  const m = planModels(exp, "/nowhere", ctx);
  assert.deepEqual(checkPair(exp, 0, m, 10, ctx), ["layer1.0", "layer2.1"]);
  assert.deepEqual(ctx.problems, []);

  const noPoint = parseExperiment(
    EXP.replace("points: [layer1.0, layer2.1]", "points: [layer1.0, layer9.9]"),
    "exp.yaml",
  );
  assert.equal(checkPair(noPoint, 0, m, 10, ctx), null);
  assert.match(String(ctx.problems.at(-1)), /^points: no stitch point "layer9\.9" in resnet18; it has /);

  const noModel = parseExperiment(EXP.replace("{ front: a, back: b,", "{ front: a, back: c,"), "exp.yaml");
  const c2 = fresh();
  assert.equal(checkPair(noModel, 0, planModels(noModel, "/nowhere", c2), 10, c2), null);
  assert.deepEqual(c2.problems, ['pairs[0].back: no model "c"; the models are a, b']);
});

test("planReplicate: per point an IRI set of the replicate's front, and a stitch per objective and mode; replicate 1 trains its own front at seed + stride and keeps the back", () => {
  const exp = parseExperiment(EXP, "exp.yaml");
  const ctx = fresh();
  const m = planModels(exp, "/nowhere", ctx);
  const pair = exp.pairs[0] as (typeof exp.pairs)[number];
  const r0 = planReplicate(exp, pair, 0, ["layer1.0", "layer2.1"], ["slm", "hlm"], m, ctx);
  assert.equal(r0.length, 2 * 2 * 2);
  assert.equal([...ctx.tasks.values()].filter((t) => t.kind === "iris").length, 2);
  const before = ctx.tasks.size;
  const r1 = planReplicate(exp, pair, 1, ["layer1.0", "layer2.1"], ["slm", "hlm"], m, ctx);
  assert.equal(r1.length, 8);
  assert.ok(r1.every((s) => s.replicate === 1));
  // One new model (A's replicate; B is shared), two IRI sets, eight stitches.
  assert.equal(ctx.tasks.size - before, 1 + 2 + 8);
  const newTrain = [...ctx.tasks.values()].filter((t) => t.kind === "train").at(-1);
  assert.equal(newTrain?.label, "train a rep 1");
  assert.equal((newTrain?.spec as { config: { seed: number } } | undefined)?.config.seed, REPLICATE_SEED_STRIDE);
  // Each invariance-aware stitch depends on its replicate's IRI set; standard ones on none.
  for (const s of r1) {
    const t = ctx.tasks.get(s.key);
    if (s.mode === "iris") assert.ok(s.irisKey && t?.deps.includes(s.irisKey));
    else assert.equal(s.irisKey, null);
  }
  assert.deepEqual(ctx.problems, []);
});

test("planReplicate: a stitching batch larger than what T trains on (real images or IRIs) is a problem before anything runs", () => {
  const problems = (yaml: string) => {
    const exp = parseExperiment(yaml, "exp.yaml");
    const ctx = fresh();
    const m = planModels(exp, "/nowhere", ctx);
    planReplicate(exp, exp.pairs[0] as (typeof exp.pairs)[number], 0, ["layer1.0"], ["slm"], m, ctx);
    return [...new Set(ctx.problems)];
  };
  assert.deepEqual(
    problems(
      EXP.replace("stitch: { limit: 64, epochs: 1, batchSize: 32 }", "stitch: { limit: 64, epochs: 1, batchSize: 64 }"),
    ),
    [],
  );
  assert.deepEqual(
    problems(
      EXP.replace("stitch: { limit: 64, epochs: 1, batchSize: 32 }", "stitch: { limit: 48, epochs: 1, batchSize: 64 }"),
    ),
    [
      "stitch.batchSize 64 is more than the 48 real images standard stitching trains on (stitch.limit): T would have no full batch to train on",
    ],
  );
  assert.deepEqual(
    problems(
      EXP.replace("iris: { limit: 64,", "iris: { limit: 40,").replace(
        "stitch: { limit: 64, epochs: 1, batchSize: 32 }",
        "stitch: { limit: 64, epochs: 1, batchSize: 64 }",
      ),
    ),
    [
      "stitch.batchSize 64 is more than the 40 IRIs per front and point (iris.limit): T would have no full batch to train on",
    ],
  );
});
