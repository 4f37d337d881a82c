"""The PyTorch side of the per-call overhead benchmark (bench/overhead.ts): the same small
operators on the same shapes, each timed as a loop of --calls calls, so that the time per call is
mostly the host's cost of one operator call (argument parsing, dispatch, the result's wrapper
and its release), not the arithmetic.

Answers one JSON command per stdin line: {"op": "step", "name": n} -> {"ms": time of --calls
calls of operator n}, after a greeting {"threads": t, "torch": version, "ops": names}.
"""

import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F


def workloads():
    torch.manual_seed(0)
    one = torch.rand(1)
    one_b = torch.rand(1)
    k = torch.rand(1024)
    k_b = torch.rand(1024)
    m = torch.rand(16, 16)
    m_b = torch.rand(16, 16)
    x = torch.rand(1, 4, 8, 8)
    w = torch.rand(4, 4, 3, 3)
    acc = torch.zeros(1024)
    # Each is the call a user writes; its result is dropped at once, as in a loop body.
    return {
        "add_1": lambda: one + one_b,
        "add_1k": lambda: k + k_b,
        "mul_scalar_1k": lambda: k * 2.0,
        "matmul_16": lambda: m @ m_b,
        "conv2d_small": lambda: F.conv2d(x, w, padding=1),
        "relu_1k": lambda: k.relu(),
        "add__inplace_1k": lambda: acc.add_(k),
        "sum_1k": lambda: k.sum(),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True, help="the TypeScript side's torch.getNumThreads()")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ops = workloads()
    print(json.dumps({"threads": torch.get_num_threads(), "torch": torch.__version__, "ops": list(ops)}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] != "step":
            raise ValueError(f"unknown command {cmd}")
        op = ops[cmd["name"]]
        t0 = time.perf_counter()
        for _ in range(a.calls):
            op()
        ms = (time.perf_counter() - t0) * 1000
        print(json.dumps({"ms": ms}), flush=True)


if __name__ == "__main__":
    main()
