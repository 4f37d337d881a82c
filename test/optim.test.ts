// Optimisers and learning-rate schedules against Python's torch.optim on the same initial
// parameters and the same sequence of gradients (one Python process for every case), plus the
// closed forms of the schedules, null gradients and the freeing of state.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { torchLoad, torchSave } from "../io/torchsave.js";
import { Adam, AdamW, type Optimizer, SGD } from "../nn/optim.js";
import { CosineAnnealingLR, type LRScheduler, MultiStepLR, StepLR } from "../nn/schedule.js";
import * as torch from "../torch/index.js";
import { PYTHON, skipUnlessPytorch } from "./helpers/pytorch.js";

const SHAPES = [[3, 4], [4], [2, 3, 2]];
const STEPS = 5;
/** Gradients left null (step, parameter): the step must skip that parameter, state and all. */
const NULL_GRADS = new Set(["2/1", "3/1"]);

interface OptCase {
  name: string;
  optim: "SGD" | "Adam" | "AdamW";
  /** Keyword arguments in Python's spelling; mapped to ours below. */
  kwargs: Record<string, number | boolean | number[]>;
  sched?: SchedSpec;
}
type SchedSpec =
  | { kind: "StepLR"; stepSize: number; gamma: number }
  | { kind: "MultiStepLR"; milestones: number[]; gamma: number }
  | { kind: "CosineAnnealingLR"; tMax: number; etaMin: number };

const CASES: OptCase[] = [
  { name: "sgd_plain", optim: "SGD", kwargs: { lr: 0.1 } },
  { name: "sgd_momentum", optim: "SGD", kwargs: { lr: 0.05, momentum: 0.9 } },
  { name: "sgd_dampening", optim: "SGD", kwargs: { lr: 0.05, momentum: 0.8, dampening: 0.3 } },
  { name: "sgd_nesterov_wd", optim: "SGD", kwargs: { lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 5e-4 } },
  { name: "sgd_wd_no_momentum", optim: "SGD", kwargs: { lr: 0.1, weight_decay: 0.01 } },
  { name: "sgd_momentum_wd", optim: "SGD", kwargs: { lr: 0.05, momentum: 0.9, weight_decay: 0.1 } },
  { name: "adam", optim: "Adam", kwargs: { lr: 0.01 } },
  { name: "adam_wd", optim: "Adam", kwargs: { lr: 0.01, betas: [0.8, 0.99], eps: 1e-6, weight_decay: 0.1 } },
  { name: "adamw", optim: "AdamW", kwargs: { lr: 0.01 } },
  { name: "adamw_wd", optim: "AdamW", kwargs: { lr: 0.02, betas: [0.85, 0.95], weight_decay: 0.3 } },
  {
    name: "sgd_steplr",
    optim: "SGD",
    kwargs: { lr: 0.1, momentum: 0.9 },
    sched: { kind: "StepLR", stepSize: 2, gamma: 0.5 },
  },
  {
    name: "adam_cosine",
    optim: "Adam",
    kwargs: { lr: 0.01 },
    sched: { kind: "CosineAnnealingLR", tMax: 4, etaMin: 1e-3 },
  },
];

/** Schedules alone, over more epochs than the optimiser cases (past tMax, repeated milestones). */
const SCHEDULES: { name: string; lr: number; spec: SchedSpec }[] = [
  { name: "step", lr: 0.1, spec: { kind: "StepLR", stepSize: 3, gamma: 0.1 } },
  { name: "step_half", lr: 0.4, spec: { kind: "StepLR", stepSize: 1, gamma: 0.5 } },
  { name: "multistep", lr: 0.1, spec: { kind: "MultiStepLR", milestones: [2, 5, 5, 9], gamma: 0.1 } },
  { name: "cosine", lr: 0.1, spec: { kind: "CosineAnnealingLR", tMax: 7, etaMin: 0 } },
  { name: "cosine_min", lr: 0.05, spec: { kind: "CosineAnnealingLR", tMax: 5, etaMin: 1e-3 } },
];
const EPOCHS = 20;

function makeOptimizer(c: OptCase, params: torch.Tensor[]): Optimizer {
  const k = c.kwargs;
  const num = (name: string) => k[name] as number | undefined;
  if (c.optim === "SGD")
    return new SGD(params, {
      lr: k.lr as number,
      momentum: num("momentum"),
      dampening: num("dampening"),
      nesterov: k.nesterov as boolean | undefined,
      weightDecay: num("weight_decay"),
    });
  const opts = {
    lr: num("lr"),
    betas: k.betas as [number, number] | undefined,
    eps: num("eps"),
    weightDecay: num("weight_decay"),
  };
  return c.optim === "Adam" ? new Adam(params, opts) : new AdamW(params, opts);
}

function makeScheduler(opt: Optimizer, s: SchedSpec): LRScheduler {
  if (s.kind === "StepLR") return new StepLR(opt, s.stepSize, s.gamma);
  if (s.kind === "MultiStepLR") return new MultiStepLR(opt, s.milestones, s.gamma);
  return new CosineAnnealingLR(opt, s.tMax, s.etaMin);
}

/** Initial parameters and STEPS steps of gradients, deterministic. */
function makeInputs(): Record<string, torch.Tensor> {
  torch.manualSeed(1234);
  const out: Record<string, torch.Tensor> = {};
  SHAPES.forEach((s, i) => {
    out[`p${i}`] = torch.randn(s);
  });
  for (let t = 0; t < STEPS; t++)
    SHAPES.forEach((s, i) => {
      if (!NULL_GRADS.has(`${t}/${i}`)) out[`g${t}/${i}`] = torch.randn(s).mul(0.5 + t);
    });
  return out;
}

/** Runs one case here: final parameters and the lr used at each step. */
function runHere(c: OptCase, inputs: Record<string, torch.Tensor>): { params: torch.Tensor[]; lrs: number[] } {
  const params = SHAPES.map((_, i) => torch.keep(inputs[`p${i}`].clone().requiresGrad_()));
  const opt = makeOptimizer(c, params);
  const sched = c.sched ? makeScheduler(opt, c.sched) : null;
  const lrs: number[] = [];
  for (let t = 0; t < STEPS; t++) {
    params.forEach((p, i) => {
      const g = inputs[`g${t}/${i}`]?.clone() ?? null;
      p.grad = g;
      g?.dispose();
    });
    lrs.push(opt.lr);
    opt.step();
    sched?.step();
  }
  opt.dispose();
  return { params, lrs };
}

function runHereSchedule(lr: number, spec: SchedSpec): number[] {
  const p = torch.keep(torch.zeros([1], { requiresGrad: true }));
  const opt = new SGD([p], { lr });
  const sched = makeScheduler(opt, spec);
  const lrs = [opt.lr];
  for (let e = 0; e < EPOCHS; e++) {
    sched.step();
    lrs.push(opt.lr);
  }
  assert.equal(sched.lastEpoch, EPOCHS);
  opt.dispose();
  p.dispose();
  return lrs;
}

const SCRIPT = `
import json, sys, torch
d = sys.argv[1]
spec = json.load(open(d + "/cases.json"))
inp = torch.load(d + "/inputs.pt")
torch.set_num_threads(spec["threads"])
OPT = {"SGD": torch.optim.SGD, "Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW}
def scheduler(opt, s):
    if s["kind"] == "StepLR": return torch.optim.lr_scheduler.StepLR(opt, s["stepSize"], s["gamma"])
    if s["kind"] == "MultiStepLR": return torch.optim.lr_scheduler.MultiStepLR(opt, s["milestones"], s["gamma"])
    return torch.optim.lr_scheduler.CosineAnnealingLR(opt, s["tMax"], s["etaMin"])
out = {}
for c in spec["cases"]:
    params = [inp["p%d" % i].clone().requires_grad_() for i in range(spec["nparams"])]
    kw = dict(c["kwargs"])
    if "betas" in kw: kw["betas"] = tuple(kw["betas"])
    opt = OPT[c["optim"]](params, **kw)
    sched = scheduler(opt, c["sched"]) if c.get("sched") else None
    lrs = []
    for t in range(spec["steps"]):
        for i, p in enumerate(params):
            g = inp.get("g%d/%d" % (t, i))
            p.grad = None if g is None else g.clone()
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        if sched: sched.step()
    for i, p in enumerate(params): out["%s/p%d" % (c["name"], i)] = p.detach().clone()
    out[c["name"] + "/lr"] = torch.tensor(lrs, dtype=torch.float64)
for s in spec["schedules"]:
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=s["lr"])
    sched = scheduler(opt, s["spec"])
    lrs = [opt.param_groups[0]["lr"]]
    for e in range(spec["epochs"]):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    out["sched/" + s["name"]] = torch.tensor(lrs, dtype=torch.float64)
torch.save(out, d + "/outputs.pt")
`;

function runPython(inputs: Record<string, torch.Tensor>): Record<string, torch.Tensor> {
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-optim-"));
  try {
    torchSave(join(dir, "inputs.pt"), inputs);
    writeFileSync(
      join(dir, "cases.json"),
      JSON.stringify({
        cases: CASES,
        schedules: SCHEDULES,
        steps: STEPS,
        epochs: EPOCHS,
        nparams: SHAPES.length,
        threads: torch.getNumThreads(),
      }),
    );
    writeFileSync(join(dir, "run.py"), SCRIPT);
    // cwd outside the repository, where `import torch` would find our torch/ folder.
    const r = spawnSync(PYTHON, [join(dir, "run.py"), dir], { encoding: "utf8", timeout: 120_000, cwd: dir });
    if (r.status !== 0)
      throw new Error(`${PYTHON} failed (status ${r.status}): ${r.error?.message ?? ""}\n${r.stderr}`);
    return torchLoad(join(dir, "outputs.pt")) as Record<string, torch.Tensor>;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function assertClose(got: ArrayLike<number>, want: ArrayLike<number>, what: string, rtol = 1e-6, atol = 1e-12): void {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    const a = got[i];
    const b = want[i];
    assert.ok(Math.abs(a - b) <= rtol * Math.abs(b) + atol, `${what}[${i}]: got ${a}, want ${b}`);
  }
}

const skip = skipUnlessPytorch();
let inputs: Record<string, torch.Tensor> = {};
let ref: Record<string, torch.Tensor> = {};

before(() => {
  inputs = makeInputs();
  if (!skip) ref = runPython(inputs);
});
after(() => {
  torch.dispose(inputs);
  torch.dispose(ref);
});

for (const c of CASES) {
  test(`${c.name} matches torch.optim.${c.optim}${c.sched ? ` with ${c.sched.kind}` : ""}`, { skip }, () => {
    const { params, lrs } = runHere(c, inputs);
    assertClose(lrs, ref[`${c.name}/lr`].toTypedArray() as Float64Array, `${c.name} lr`);
    params.forEach((p, i) => {
      const want = ref[`${c.name}/p${i}`];
      assert.deepEqual(p.shape, want.shape);
      const got = torch.tidy(() => p.detach().toTypedArray() as Float32Array);
      assertClose(got, want.toTypedArray() as Float32Array, `${c.name} p${i}`);
      // Parameters changed (gradients are nonzero), so the comparison is not vacuous.
      assert.ok(!torch.tidy(() => p.eq(inputs[`p${i}`]).all().item()), `${c.name} p${i} did not move`);
    });
    torch.dispose(params);
  });
}

for (const s of SCHEDULES) {
  test(`${s.spec.kind} (${s.name}) lr sequence matches PyTorch and the closed form`, () => {
    const lrs = runHereSchedule(s.lr, s.spec);
    const closed = Array.from({ length: EPOCHS + 1 }, (_, t) => {
      const sp = s.spec;
      if (sp.kind === "StepLR") return s.lr * sp.gamma ** Math.floor(t / sp.stepSize);
      if (sp.kind === "MultiStepLR") return s.lr * sp.gamma ** sp.milestones.filter((m) => m <= t).length;
      return sp.etaMin + ((s.lr - sp.etaMin) * (1 + Math.cos((Math.PI * t) / sp.tMax))) / 2;
    });
    assertClose(lrs, closed, `${s.name} closed form`, 1e-12, 1e-15);
    if (!skip) assertClose(lrs, ref[`sched/${s.name}`].toTypedArray() as Float64Array, `${s.name} vs PyTorch`);
  });
}

test("a parameter whose grad is null is left unchanged and gets no state", () => {
  for (const make of [
    (ps: torch.Tensor[]) => new SGD(ps, { lr: 0.1, momentum: 0.9, weightDecay: 0.1 }),
    (ps: torch.Tensor[]) => new Adam(ps, { weightDecay: 0.1 }),
    (ps: torch.Tensor[]) => new AdamW(ps),
  ]) {
    torch.manualSeed(7);
    const a = torch.keep(torch.randn([5]).requiresGrad_());
    const b = torch.keep(torch.randn([2, 2]).requiresGrad_());
    const b0 = torch.keep(b.detach().clone());
    const opt = make([a, b]);
    const ga = torch.onesLike(a);
    a.grad = ga;
    ga.dispose();
    opt.step();
    opt.step();
    assert.equal(b.grad, null);
    assert.ok(
      torch.tidy(() => b.eq(b0).all().item()),
      `${opt.constructor.name} changed a parameter without grad`,
    );
    // One parameter with state: SGD one buffer, Adam two moments.
    const perParam = opt instanceof SGD ? 1 : 2;
    assert.equal(opt.stateTensors().length, perParam);
    opt.dispose();
    torch.dispose([a, b, b0]);
  }
});

test("zeroGrad zeroes gradients in place (or sets them to null); dispose frees every state buffer", () => {
  torch.manualSeed(8);
  const ps = SHAPES.map((s) => torch.keep(torch.randn(s).requiresGrad_()));
  const x = torch.keep(torch.randn([4]));
  const lossOf = () => torch.tidy(() => ps[0].matmul(x).square().sum().add(ps[1].sum()).add(ps[2].square().sum()));
  for (const opt of [
    new SGD(ps, { lr: 0.01, momentum: 0.9, nesterov: true, weightDecay: 1e-4 }),
    new Adam(ps, { weightDecay: 1e-2 }),
    new AdamW(ps),
  ]) {
    for (let i = 0; i < 3; i++) {
      opt.zeroGrad();
      const loss = lossOf();
      loss.backward();
      loss.dispose();
      opt.step();
    }
    opt.zeroGrad();
    for (const p of ps) {
      const g = p.grad!;
      assert.ok(g !== null);
      assert.equal(
        torch.tidy(() => g.abs().sum().item()),
        0,
      );
      g.dispose();
    }
    opt.zeroGrad(true);
    for (const p of ps) assert.equal(p.grad, null);
    // Grads are null again and every temporary is gone: only the state remains, then nothing.
    const perParam = opt instanceof SGD ? 1 : 2;
    const state = opt.stateTensors();
    assert.equal(state.length, perParam * ps.length);
    assert.ok(state.every((t) => !t.isDisposed));
    opt.dispose();
    assert.ok(
      state.every((t) => t.isDisposed),
      "dispose frees every state buffer",
    );
    assert.throws(() => opt.step(), /disposed/);
  }
  torch.dispose([ps, x]);
});

test("options are checked as torch.optim checks them", () => {
  const p = torch.keep(torch.zeros([2], { requiresGrad: true }));
  assert.throws(() => new SGD([p], { lr: 0.1, nesterov: true }), /Nesterov/);
  assert.throws(() => new SGD([p], { lr: -1 }), /learning rate/);
  assert.throws(() => new Adam([p], { betas: [1, 0.9] }), /beta/);
  assert.throws(() => new AdamW([p, p]), /more than once/);
  torch.tidy(() => assert.throws(() => new SGD([p.mul(2)], { lr: 0.1 }), /non-leaf/));
  assert.equal(new Adam([p]).lr, 1e-3);
  assert.equal(new AdamW([p]).weightDecay, 1e-2);
  p.dispose();
});
