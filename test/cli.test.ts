// The command line as a user runs it, and the build's libtorch discovery.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { findLibtorch, linkLibraries } from "../native/find-libtorch.mjs";
import * as torch from "../torch/index.js";
import { runCli } from "./helpers/cli.js";

const root = join(import.meta.dirname, "..");

function stitchlab(args: string[], env: Record<string, string> = {}) {
  return runCli(args, {
    cwd: root,
    env: { ...process.env, ...env },
  });
}

test("stitchlab doctor reports libtorch, threads (all cores by default) and a correct matmul", () => {
  const r = stitchlab(["doctor", "--json"]);
  assert.equal(r.status, 0, r.stderr);
  const rep = JSON.parse(r.stdout);
  assert.equal(rep.libtorch.version, torch.buildInfo().torch);
  assert.equal(rep.threads.used, availableParallelism());
  assert.equal(rep.matmul.ok, true);
  assert.ok(rep.matmul.maxRelError < 1e-5);
  assert.ok(rep.matmul.gflops > 0);
  assert.equal(typeof rep.device.cudaAvailable, "boolean");
});

test("STITCHLAB_THREADS sets the thread count, and a bad value is a clear error", () => {
  const r = stitchlab(["doctor", "--json"], { STITCHLAB_THREADS: "1" });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(JSON.parse(r.stdout).threads.used, 1);
  const bad = stitchlab(["doctor"], { STITCHLAB_THREADS: "lots" });
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /STITCHLAB_THREADS=lots is not a positive integer/);
});

test("the plain doctor output is readable text", () => {
  const r = stitchlab(["doctor"]);
  assert.equal(r.status, 0, r.stderr);
  for (const key of ["libtorch", "build", "blas", "device", "threads", "matmul"])
    assert.match(r.stdout, new RegExp(`^${key} `, "m"));
});

test("the build names the three ways to provide libtorch when LIBTORCH points nowhere", () => {
  const saved = process.env.LIBTORCH;
  process.env.LIBTORCH = "/nonexistent/libtorch";
  try {
    assert.throws(
      () => findLibtorch(),
      (e: Error) =>
        /LIBTORCH=\/nonexistent\/libtorch/.test(e.message) &&
        /set LIBTORCH/.test(e.message) &&
        /install PyTorch for Python/.test(e.message) &&
        /apt-get install libtorch-dev/.test(e.message),
    );
  } finally {
    if (saved === undefined) delete process.env.LIBTORCH;
    else process.env.LIBTORCH = saved;
  }
});

test("the build finds this machine's libtorch with its ABI flag", () => {
  const lt = findLibtorch();
  assert.equal(lt.version, torch.buildInfo().torch);
  assert.equal(lt.abi === 1, torch.buildInfo().cxx11abi);
});

test("the build recognises a CUDA libtorch (as a PyTorch wheel with CUDA lays it out) and links its CUDA libraries", () => {
  // The layout of a CUDA libtorch archive, with empty files: what the finder looks at.
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-cuda-libtorch-"));
  const inc = join(dir, "include", "torch", "csrc", "api", "include", "torch");
  mkdirSync(inc, { recursive: true });
  writeFileSync(join(inc, "torch.h"), "");
  writeFileSync(join(dir, "include", "torch", "version.h"), '#define TORCH_VERSION "2.5.1+cu124"\n');
  mkdirSync(join(dir, "lib"));
  for (const lib of ["libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so", "libc10_cuda.so"])
    writeFileSync(join(dir, "lib", lib), "");
  mkdirSync(join(dir, "share", "cmake", "Torch"), { recursive: true });
  writeFileSync(
    join(dir, "share", "cmake", "Torch", "TorchConfig.cmake"),
    'set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=0")\n',
  );
  const saved = process.env.LIBTORCH;
  process.env.LIBTORCH = dir;
  try {
    const lt = findLibtorch();
    assert.equal(lt.cuda, true);
    assert.equal(lt.version, "2.5.1+cu124");
    assert.equal(lt.abi, 0, "the ABI flag from TorchConfig.cmake");
    assert.deepEqual(linkLibraries(lt).slice(3), [
      "-Wl,--no-as-needed",
      "-ltorch_cuda",
      "-lc10_cuda",
      "-Wl,--as-needed",
    ]);
    rmSync(join(dir, "lib", "libtorch_cuda.so"));
    assert.equal(findLibtorch().cuda, false, "without libtorch_cuda.so it is a CPU build");
    assert.deepEqual(linkLibraries(findLibtorch()), ["-lc10", "-ltorch_cpu", "-ltorch"]);
  } finally {
    if (saved === undefined) delete process.env.LIBTORCH;
    else process.env.LIBTORCH = saved;
    rmSync(dir, { recursive: true, force: true });
  }
});
