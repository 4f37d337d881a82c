"""Which convolutions oneDNN runs safely in channels-last on this CPU (issue 36; torch/layout.ts),
and with --layout blocked, in oneDNN's blocked layout (mkldnn tensors; models/onnx/blocked.ts).

Plain PyTorch (Debian's torch 1.13 and its oneDNN 2.6), one thread, under glibc's malloc checks
(libc_malloc_debug.so.0 with glibc.malloc.check=3), so that a heap write out of bounds aborts
instead of passing unseen. For every pair of channel counts, one process runs forward and
backward (input and weight gradients) of each kernel size, stride, spatial size and batch in
channels-last, and compares it with the contiguous kernels. A process that dies names the last
case it started.

  /usr/bin/python3 bench/layout_safety.py [--isa AVX2|ALL ...] [--layout channels-last|blocked]
      [--channels N ...]   (default: AVX2 and ALL, channels-last, 1 3 4 5 7 8 12 16)

The blocked layout serves forward passes with no gradient only, so that mode runs what
models/onnx/blocked.ts runs: the input reordered to a mkldnn tensor, the convolution with its weight
reordered once (mkldnn_reorder_conv2d_weight), then batch norm in eval mode, ReLU, the addition of
two maps, a max pool and a global average pool on mkldnn tensors, and back to dense; compared with
the same on dense tensors; kernels 1, 3 (also dilated by 2) and 7, strides 1 and 2.

Prints one line per failing case and a summary per ISA; the figures are quoted in torch/layout.ts
and docs/benchmarks.md ("Layout safety").
"""
import argparse
import os
import subprocess
import sys

CHANNELS = [1, 3, 4, 5, 7, 8, 12, 16]
CASES = [(k, s, hw, n) for k in (1, 3) for s in (1, 2) for hw in (15, 16, 32) for n in (1, 8)]
# The blocked path also runs a 7x7 stem and dilated convolutions: (kernel, dilation) pairs.
BLOCKED_CASES = [
    (k, d, s, hw, n) for k, d in ((1, 1), (3, 1), (3, 2), (7, 1)) for s in (1, 2) for hw in (15, 16, 32) for n in (1, 8)
]
MALLOC_DEBUG = next(
    (p for p in ("/usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0", "/lib/x86_64-linux-gnu/libc_malloc_debug.so.0") if os.path.exists(p)),
    None,
)


def blocked_child(ic: int, oc: int) -> None:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.manual_seed(0)
    for k, d, s, hw, n in BLOCKED_CASES:
        print(f"start k={k} d={d} s={s} hw={hw} n={n}", flush=True)
        x = torch.randn(n, ic, hw, hw)
        w = torch.randn(oc, ic, k, k)
        bn = torch.nn.BatchNorm2d(oc).eval()
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        p = d * (k // 2)
        with torch.no_grad():
            def block(y):
                y = torch.relu(bn(y))
                y = F.max_pool2d(y + y, 3, 2, 1)
                return y, F.adaptive_avg_pool2d(y, 1)

            dense = block(F.conv2d(x, w, None, s, p, d))
            wb = torch._C._nn.mkldnn_reorder_conv2d_weight(w.to_mkldnn(), [p, p], [s, s], [d, d], 1)
            for _ in range(3):  # repeated: a corrupted heap shows at a later free
                y = torch.mkldnn_convolution(x.to_mkldnn(), wb, None, [p, p], [s, s], [d, d], 1)
                out = [t.to_dense() for t in block(y)]
        for o, r in zip(out, dense):
            err = ((o - r).abs().max() / r.abs().max().clamp_min(1e-30)).item()
            if not err < 1e-4:
                print(f"DIFF k={k} d={d} s={s} hw={hw} n={n}: {err:.2e}", flush=True)
    print("done", flush=True)


def child(ic: int, oc: int) -> None:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.manual_seed(0)
    for k, s, hw, n in CASES:
        print(f"start k={k} s={s} hw={hw} n={n}", flush=True)
        x = torch.randn(n, ic, hw, hw)
        w = torch.randn(oc, ic, k, k)
        outs = []
        for fmt in (torch.channels_last, torch.contiguous_format):
            xi = x.clone().to(memory_format=fmt).requires_grad_(True)
            wi = w.clone().requires_grad_(True)
            for _ in range(3):  # repeated, as training repeats: a corrupted heap shows at a later free
                xi.grad = wi.grad = None
                y = F.conv2d(xi, wi, None, s, k // 2)
                y.square().sum().backward()
            outs.append((y.detach(), xi.grad, wi.grad))
        for a, b in zip(*outs):
            err = ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()
            if not err < 1e-4:
                print(f"DIFF k={k} s={s} hw={hw} n={n}: {err:.2e}", flush=True)
    print("done", flush=True)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        (blocked_child if sys.argv[4] == "blocked" else child)(int(sys.argv[2]), int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--isa", nargs="+", default=["AVX2", "ALL"])
    ap.add_argument("--layout", choices=["channels-last", "blocked"], default="channels-last")
    ap.add_argument("--channels", type=int, nargs="+", default=CHANNELS)
    args = ap.parse_args()
    if MALLOC_DEBUG is None:
        print("warning: glibc's libc_malloc_debug.so.0 not found; running without malloc checks", file=sys.stderr)
    for isa in args.isa:
        env = dict(os.environ, DNNL_MAX_CPU_ISA=isa, OMP_NUM_THREADS="1")
        if MALLOC_DEBUG:
            env.update(LD_PRELOAD=MALLOC_DEBUG, GLIBC_TUNABLES="glibc.malloc.check=3")
        bad = 0
        for ic in args.channels:
            for oc in args.channels:
                r = subprocess.run(
                    [sys.executable, __file__, "--child", str(ic), str(oc), args.layout],
                    env=env,
                    capture_output=True,
                    text=True,
                )
                lines = r.stdout.splitlines()
                diffs = [l for l in lines if l.startswith("DIFF")]
                if r.returncode != 0 or diffs or not lines or lines[-1] != "done":
                    bad += 1
                    last = next((l for l in reversed(lines) if l.startswith("start")), "before the first case")
                    why = f"rc {r.returncode} ({(r.stderr.strip().splitlines() or [''])[-1][:60]}) at {last[6:]}" if r.returncode else "; ".join(diffs)
                    print(f"{isa} {ic}->{oc}: {why}", flush=True)
        total = len(args.channels) ** 2
        print(f"{isa} {args.layout}: {total - bad} of {total} channel pairs clean over {len(BLOCKED_CASES if args.layout == 'blocked' else CASES)} cases each", flush=True)


if __name__ == "__main__":
    main()
