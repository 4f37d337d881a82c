// The scores of metrics/: closed forms, a hand-computed example, streaming against one batch,
// and Python's PyTorch on the same random inputs.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  AgreementMeter,
  type AgreementResult,
  excessAgreement,
  linearCka,
  maxExcessAgreement,
  rAuA,
  StreamingCka,
  weightSpectrum,
} from "../metrics/index.js";
import * as torch from "../torch/index.js";
import { runReference, skipUnlessPytorch } from "./helpers/pytorch.js";
import { ints, make, normal } from "./helpers/tensors.js";

function close(actual: number, expected: number, tol = 1e-12, label = "") {
  assert.ok(
    Math.abs(actual - expected) <= tol * Math.max(1, Math.abs(expected)),
    `${label}${actual} != expected ${expected} (tol ${tol})`,
  );
}

function meterOf(s: torch.Tensor, b: torch.Tensor, y: torch.Tensor): AgreementResult {
  const m = new AgreementMeter();
  m.update(s, b, y);
  return m.result();
}

/** Logits whose softmax is exactly (up to rounding) the given probabilities. */
const logitsOf = (p: number[][]) => torch.tensor(p, { dtype: "float64" }).log();
/** Float64 logits whose softmax is one-hot (exactly, after rounding) at the seeded random classes. */
const oneHotLogits = (n: number, K: number, seed: number) =>
  torch
    .eye(K, { dtype: "float64" })
    .indexSelect(0, make(ints([n], 0, K), seed))
    .mul(100);

describe("AgreementMeter", () => {
  test("identical one-hot-like logits: every agreement score is 1", () => {
    torch.tidy(() => {
      const s = oneHotLogits(40, 7, 1);
      const y = make(ints([40], 0, 7), 2);
      const r = meterOf(s, s, y);
      close(r.agreementProbability, 1);
      close(r.hardAgreement, 1);
      close(r.labelAgreement, 1);
      close(r.hardErrorConsistency, 1);
      close(r.softErrorConsistency, 1);
      // Accuracy counted here: the share of images whose one-hot class is the label.
      const cls = make(ints([40], 0, 7), 1).tolist() as number[];
      const labels = y.tolist() as number[];
      const right = cls.filter((c, i) => c === labels[i]).length / 40;
      assert.ok(right > 0 && right < 1, `a draw with right and wrong images (${right})`);
      close(r.accuracy, right);
      close(r.backAccuracy, right);
    });
  });

  test("accuracy and B's accuracy, each against the labels: 3 of 4 and 2 of 4 on one-hot logits", () => {
    torch.tidy(() => {
      const y = torch.tensor([0, 1, 2, 0], { dtype: "int64" });
      const oneHot = (classes: number[]) =>
        torch
          .eye(4, { dtype: "float64" })
          .indexSelect(0, torch.tensor(classes, { dtype: "int64" }))
          .mul(100);
      // Stitched: right on images 1-3, wrong on 4; B: right on images 1 and 4 only.
      const r = meterOf(oneHot([0, 1, 2, 3]), oneHot([0, 2, 0, 0]), y);
      close(r.accuracy, 3 / 4);
      close(r.backAccuracy, 2 / 4);
      // Both right on image 1, one right and one wrong on the others; the same class on image 1 only.
      close(r.hardAgreement, 1 / 4);
      close(r.labelAgreement, 1 / 4);
    });
  });

  test("identical soft logits: agreement probability, hard agreement and both kappas are 1", () => {
    torch.tidy(() => {
      const s = make(normal([30, 5]), 3);
      const r = meterOf(s, s.clone(), make(ints([30], 0, 5), 4));
      close(r.agreementProbability, 1, 1e-9);
      close(r.hardAgreement, 1);
      close(r.hardErrorConsistency, 1);
      // The reference's soft c_obs is the normalised agreement probability, so a model stitched
      // with itself scores 1 however unsure it is (the unnormalised dot product gave 0.40 here).
      close(r.softErrorConsistency, 1, 1e-9);
    });
  });

  test("two images by hand", () => {
    torch.tidy(() => {
      // Image 1 (y = 0): stitched right, B wrong (predicts 1). Image 2 (y = 2): both right.
      const s = logitsOf([
        [0.5, 0.25, 0.25],
        [0.1, 0.1, 0.8],
      ]);
      const b = logitsOf([
        [0.25, 0.5, 0.25],
        [0.2, 0.2, 0.6],
      ]);
      const r = meterOf(s, b, torch.tensor([0, 2], { dtype: "int64" }));
      assert.equal(r.n, 2);
      assert.equal(r.numClasses, 3);
      close(r.accuracy, 1);
      close(r.backAccuracy, 0.5);
      close(r.hardAgreement, 0.5);
      close(r.labelAgreement, 0.5);
      // Image 1: dot 0.3125, norms² 0.375 and 0.375; image 2: dot 0.52, norms² 0.66 and 0.44.
      close(r.agreementProbability, (0.3125 / 0.375 + 0.52 / 0.66) / 2, 1e-12);
      // c_exp = 1 * 0.5 + 0 * 0.5 = 0.5 = c_obs.
      close(r.hardErrorConsistency, 0);
      close(r.softAccuracy, (0.5 + 0.8) / 2);
      close(r.backSoftAccuracy, (0.25 + 0.6) / 2);
      close(r.softObservedConsistency, (0.3125 + 0.52) / 2);
      // c_exp = 0.65 * 0.425 + 0.35 * 0.575 / 2 = 0.376875; c_obs = the agreement probability.
      const cObs = (0.3125 / 0.375 + 0.52 / 0.66) / 2;
      close(r.softErrorConsistency, (cObs - 0.376875) / (1 - 0.376875), 1e-12);
    });
  });

  test("hard kappa by hand: errors on the same images, and on disjoint images", () => {
    torch.tidy(() => {
      const y = torch.tensor([0, 0, 0, 0], { dtype: "int64" });
      const right = [5, 0];
      const wrong = [0, 5];
      // Both wrong on image 4 only: a = 0.75 each, c_obs = 1, kappa = 1.
      const same = meterOf(torch.tensor([right, right, right, wrong]), torch.tensor([right, right, right, wrong]), y);
      close(same.hardErrorConsistency, 1);
      // Stitched wrong on 1 and 2, B on 3 and 4: a = 0.5 each, c_obs = 0, c_exp = 0.5, kappa = -1.
      const apart = meterOf(torch.tensor([wrong, wrong, right, right]), torch.tensor([right, right, wrong, wrong]), y);
      close(apart.hardAgreement, 0);
      close(apart.hardErrorConsistency, -1);
      // Always right: c_exp = 1, and the reference scores that 1.
      const always = meterOf(torch.tensor([right]), torch.tensor([right]), y.slice(0, 0, 1));
      close(always.hardErrorConsistency, 1);
      close(always.softErrorConsistency, 1);
    });
  });

  test("one-hot probabilities: soft scores become the hard ones (exactly the hard kappa for K = 2)", () => {
    torch.tidy(() => {
      for (const K of [2, 6]) {
        const s = oneHotLogits(50, K, 10 + K);
        const b = oneHotLogits(50, K, 20 + K);
        const r = meterOf(s, b, make(ints([50], 0, K), 30 + K));
        close(r.softAccuracy, r.accuracy);
        close(r.backSoftAccuracy, r.backAccuracy);
        close(r.softObservedConsistency, r.labelAgreement);
        if (K === 2) {
          close(r.labelAgreement, r.hardAgreement);
          close(r.softErrorConsistency, r.hardErrorConsistency);
        }
      }
    });
  });

  test("several batches equal one batch, and no tensors are left behind", () => {
    torch.tidy(() => {
      const s = make(normal([64, 10]), 5);
      const b = make(normal([64, 10]), 6);
      const y = make(ints([64], 0, 10), 7);
      const whole = meterOf(s, b, y);
      const batches = [
        [0, 10],
        [10, 0],
        [10, 20],
        [30, 34],
      ].map(([start, len]) => [s.narrow(0, start, len), b.narrow(0, start, len), y.narrow(0, start, len)] as const);
      const before = torch.memory().liveHandles;
      const m = new AgreementMeter();
      for (const [bs, bb, by] of batches) m.update(bs, bb, by);
      assert.equal(torch.memory().liveHandles, before, "update leaves no tensors");
      const parts = m.result();
      for (const k of Object.keys(whole) as (keyof AgreementResult)[]) close(parts[k], whole[k], 1e-12, `${k}: `);
    });
  });

  test("rejects mismatched shapes and empty results", () => {
    torch.tidy(() => {
      const m = new AgreementMeter();
      assert.throws(() => m.result());
      const y = torch.zeros([3], { dtype: "int64" });
      assert.throws(() => m.update(torch.zeros([3, 4]), torch.zeros([3, 5]), y), RangeError);
      assert.throws(() => m.update(torch.zeros([3, 4]), torch.zeros([3, 4]), torch.zeros([2], { dtype: "int64" })));
      m.update(torch.zeros([3, 4]), torch.zeros([3, 4]), y);
      assert.throws(() => m.update(torch.zeros([3, 5]), torch.zeros([3, 5]), y), RangeError);
    });
  });
});

describe("excess agreement and rAuA", () => {
  test("excess agreement is the difference of agreement probabilities; summary is the maximum", () => {
    close(excessAgreement(0.9, 0.6), 0.3);
    close(
      excessAgreement(
        { agreementProbability: 0.5 } as AgreementResult,
        { agreementProbability: 0.75 } as AgreementResult,
      ),
      -0.25,
    );
    assert.deepEqual(maxExcessAgreement([0.1, 0.4, -0.2, 0.4]), { value: 0.4, index: 1 });
    assert.throws(() => maxExcessAgreement([]), RangeError);
  });

  test("rAuA is the mean over the points given, optionally without the last", () => {
    close(rAuA([1, 0.5, 0.75]), 0.75);
    close(rAuA([1, 0.5, 0.75], { excludeLast: true }), 0.75);
    close(rAuA([0.2, 0.4, 1], { excludeLast: true }), 0.3);
    assert.throws(() => rAuA([1], { excludeLast: true }), RangeError);
  });
});

describe("linear CKA", () => {
  test("is 1 under column permutation, scaling, sign and shift; invariant to sample order in both", () => {
    torch.tidy(() => {
      for (const [n, d] of [
        [30, 8],
        [6, 20],
      ]) {
        const x = make(normal([n, d]), 40 + d);
        const perm = torch.tensor(
          Array.from({ length: d }, (_, i) => (i * 3 + 1) % d),
          { dtype: "int64" },
        );
        close(linearCka(x, x), 1, 1e-12);
        close(linearCka(x, x.indexSelect(1, perm).mul(-2.5).add(7)), 1, 1e-12);
        // Sample order: the same permutation of the rows of both leaves the score as it was; for
        // a y that is no transform of x (a score well below 1), so that a changed score shows.
        const y = make(normal([n, 5]), 70 + d).add(x.narrow(1, 0, 5));
        const cka = linearCka(x, y);
        assert.ok(cka > 0.05 && cka < 0.95, `CKA of the unpermuted pair ${cka}`);
        const rows = torch.tensor(
          Array.from({ length: n }, (_, i) => (i * 7 + 3) % n),
          { dtype: "int64" },
        );
        close(linearCka(x.indexSelect(0, rows), y.indexSelect(0, rows)), cka, 1e-10, "rows permuted in both: ");
        // Permuting one side only breaks the pairing of samples: the score changes.
        assert.ok(Math.abs(linearCka(x.indexSelect(0, rows), y) - cka) > 1e-3, "rows permuted in one only");
      }
    });
  });

  test("spatial positions as samples: a [N,C,H,W] map against a 1x1-conv transform of itself", () => {
    torch.tidy(() => {
      const x = make(normal([3, 4, 5, 5]), 50);
      const y = x.mul(3).sub(1);
      close(linearCka(x, y, { spatialAsSamples: true }), 1, 1e-12);
      assert.throws(() => linearCka(x.flatten(1), y.flatten(1), { spatialAsSamples: true }), RangeError);
    });
  });

  test("streaming equals the one-shot value", () => {
    torch.tidy(() => {
      const x = make(normal([40, 6]), 60);
      const y = make(normal([40, 4]), 61).add(x.narrow(1, 0, 4));
      const s = new StreamingCka();
      for (let i = 0; i < 40; i += 15)
        s.update(x.narrow(0, i, Math.min(15, 40 - i)), y.narrow(0, i, Math.min(15, 40 - i)));
      close(s.result(), linearCka(x, y), 1e-10);
      s.dispose();
      const m = make(normal([4, 3, 2, 2]), 62);
      const n = make(normal([4, 5, 2, 2]), 63);
      const sp = new StreamingCka({ spatialAsSamples: true });
      sp.update(m.narrow(0, 0, 1), n.narrow(0, 0, 1));
      sp.update(m.narrow(0, 1, 3), n.narrow(0, 1, 3));
      close(sp.result(), linearCka(m, n, { spatialAsSamples: true }), 1e-10);
      sp.dispose();
    });
  });
});

describe("weight spectrum", () => {
  test("diagonal examples: rank, relative rank and condition number", () => {
    torch.tidy(() => {
      const d = weightSpectrum(torch.eye(4).mul(torch.tensor([3, 2, 1, 0])));
      assert.equal(d.rank, 3);
      close(d.relativeRank, 0.75);
      assert.equal(d.conditionNumber, Number.POSITIVE_INFINITY);
      const w = weightSpectrum(
        torch
          .tensor([
            [4, 0, 0],
            [0, -2, 0],
          ])
          .reshape(2, 3, 1, 1),
      );
      assert.deepEqual(w.singularValues, [4, 2]);
      assert.equal(w.rank, 2);
      close(w.relativeRank, 1);
      close(w.conditionNumber, 2);
      // Below the tolerance max(S) * max(out, in) * eps(float32) the value does not count.
      assert.equal(weightSpectrum(torch.eye(2).mul(torch.tensor([1, 1e-7]))).rank, 1);
      assert.throws(() => weightSpectrum(torch.zeros([2, 3, 3, 3])), RangeError);
    });
  });
});

describe("against Python's PyTorch", { skip: skipUnlessPytorch() }, () => {
  const P = "F.softmax(s.double(),1)";
  const Q = "F.softmax(b.double(),1)";
  const cka = (X: string, Y: string) =>
    `(lambda X,Y: (Y.T@X).pow(2).sum()/(torch.linalg.norm(X.T@X)*torch.linalg.norm(Y.T@Y)))` +
    `((lambda t: t-t.mean(0))(${X}),(lambda t: t-t.mean(0))(${Y}))`;
  const cases = [
    {
      name: "agreement",
      inputs: ["s", "b", "y"],
      expr: `(lambda p,q: ((p*q).sum(1)/torch.maximum((p*p).sum(1),(q*q).sum(1))).mean())(${P},${Q})`,
    },
    {
      name: "hard",
      inputs: ["s", "b", "y"],
      expr:
        "(lambda rs,rb: (lambda a,c,o: (lambda e: torch.stack([a,c,o,(o-e)/(1-e)]))(a*c+(1-a)*(1-c)))" +
        "(rs.double().mean(),rb.double().mean(),(rs==rb).double().mean()))(s.argmax(1)==y,b.argmax(1)==y)",
    },
    {
      name: "soft",
      inputs: ["s", "b", "y"],
      expr:
        "(lambda p,q,K: (lambda a,c,o,g: (lambda e: torch.stack([a,c,o,(g-e)/(1-e)]))(a*c+(1-a)*(1-c)/(K-1)))" +
        "(p.gather(1,y[:,None]).mean(),q.gather(1,y[:,None]).mean(),(p*q).sum(1).mean()," +
        `((p*q).sum(1)/torch.maximum((p*p).sum(1),(q*q).sum(1))).mean()))(${P},${Q},s.shape[1])`,
    },
    { name: "cka gram", inputs: ["x", "y"], expr: cka("x.double().flatten(1)", "y.double().flatten(1)") },
    { name: "cka features", inputs: ["x", "y"], expr: cka("x.double()", "y.double()") },
    {
      name: "cka spatial",
      inputs: ["x", "y"],
      expr: cka(
        "x.double().permute(0,2,3,1).reshape(-1,x.shape[1])",
        "y.double().permute(0,2,3,1).reshape(-1,y.shape[1])",
      ),
    },
    { name: "rank", inputs: ["w"], expr: "torch.linalg.matrix_rank(w)" },
    {
      name: "cond",
      inputs: ["w"],
      expr: "torch.stack([torch.linalg.matrix_rank(w).double(), torch.linalg.cond(w).double()])",
    },
    {
      name: "cond conv",
      inputs: ["w"],
      expr: "torch.stack([torch.linalg.matrix_rank(w.flatten(1)).double(), torch.linalg.cond(w.flatten(1)).double()])",
    },
  ];
  const inputs: Record<string, torch.Tensor> = torch.tidy(() => {
    const logits = {
      s: make(normal([200, 10], "float32", 2), 70),
      b: make(normal([200, 10], "float32", 2), 71),
      y: make(ints([200], 0, 10), 72),
    };
    const fx = make(normal([12, 4, 3, 3]), 73);
    const fy = make(normal([40, 6]), 75);
    return {
      "agreement/s": logits.s,
      "agreement/b": logits.b,
      "agreement/y": logits.y,
      "hard/s": logits.s,
      "hard/b": logits.b,
      "hard/y": logits.y,
      "soft/s": logits.s,
      "soft/b": logits.b,
      "soft/y": logits.y,
      "cka gram/x": fx,
      "cka gram/y": fx.relu().add(make(normal([12, 4, 3, 3], "float32", 0.5), 74)),
      "cka features/x": fy,
      "cka features/y": fy
        .narrow(1, 0, 3)
        .tanh()
        .add(make(normal([40, 3], "float32", 0.3), 76)),
      "cka spatial/x": fx.narrow(0, 0, 3),
      "cka spatial/y": make(normal([3, 5, 3, 3]), 77).add(fx.narrow(0, 0, 3).sum(1, true)),
      "rank/w": make(normal([8, 3]), 78).mm(make(normal([3, 12]), 79)),
      "cond/w": make(normal([6, 10]), 80),
      "cond conv/w": make(normal([7, 5, 1, 1]), 81),
    };
  });
  for (const t of Object.values(inputs)) torch.keep(t);
  const ref = runReference(cases, inputs);
  const num = (name: string, i?: number) => {
    assert.equal(ref.errors[name], undefined, ref.errors[name]);
    const v = ref.outputs[name].toTypedArray();
    return Number(v[i ?? 0]);
  };
  const x = (k: string) => inputs[k];

  test("agreement probability, accuracies, hard agreement and both kappas", () => {
    const r = meterOf(x("agreement/s"), x("agreement/b"), x("agreement/y"));
    close(r.agreementProbability, num("agreement"), 1e-10, "agreementProbability: ");
    close(r.accuracy, num("hard", 0), 1e-12, "accuracy: ");
    close(r.backAccuracy, num("hard", 1), 1e-12, "backAccuracy: ");
    close(r.hardAgreement, num("hard", 2), 1e-12, "hardAgreement: ");
    close(r.hardErrorConsistency, num("hard", 3), 1e-10, "hard kappa: ");
    close(r.softAccuracy, num("soft", 0), 1e-10, "softAccuracy: ");
    close(r.backSoftAccuracy, num("soft", 1), 1e-10, "backSoftAccuracy: ");
    close(r.softObservedConsistency, num("soft", 2), 1e-10, "soft c_obs: ");
    close(r.softErrorConsistency, num("soft", 3), 1e-10, "soft kappa: ");
  });

  test("linear CKA (Gram form, feature form, spatial samples)", () => {
    close(linearCka(x("cka gram/x"), x("cka gram/y")), num("cka gram"), 1e-10);
    close(linearCka(x("cka features/x"), x("cka features/y")), num("cka features"), 1e-10);
    close(linearCka(x("cka spatial/x"), x("cka spatial/y"), { spatialAsSamples: true }), num("cka spatial"), 1e-10);
  });

  test("numerical rank (torch.linalg.matrix_rank) and condition number (torch.linalg.cond)", () => {
    const low = weightSpectrum(x("rank/w"));
    assert.equal(low.rank, num("rank"));
    assert.equal(low.rank, 3);
    close(low.relativeRank, 3 / 8);
    for (const name of ["cond", "cond conv"]) {
      const s = weightSpectrum(x(`${name}/w`));
      assert.equal(s.rank, num(name, 0));
      close(s.relativeRank, 1);
      close(s.conditionNumber, num(name, 1), 1e-4, `${name}: `);
    }
  });
});
