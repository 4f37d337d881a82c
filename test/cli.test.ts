// The command line as a user runs it, and the build's libtorch discovery.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { COMMAND_MODULES, COMMAND_ORDER } from "../cli/commands.js";
import { findCudaInclude, findLibtorch, linkLibraries } from "../native/find-libtorch.mjs";
import * as torch from "../torch/index.js";
import { runCli } from "./helpers/cli.js";
import { PYTHON, pytorchUnavailable } from "./helpers/pytorch.js";

const root = join(import.meta.dirname, "..");

function stitchlab(args: string[], env: Record<string, string> = {}) {
  return runCli(args, {
    cwd: root,
    env: { ...process.env, ...env },
  });
}

/** What Python's PyTorch says of itself: its version, the real path of its lib folder, its ABI and CUDA build. */
function pythonTorch(): { version: string; lib: string; abi: boolean; cuda: boolean } {
  const code =
    "import json, os, torch; print(json.dumps({'version': torch.__version__, " +
    "'lib': os.path.realpath(os.path.join(os.path.dirname(torch.__file__), 'lib')), " +
    "'abi': bool(torch._C._GLIBCXX_USE_CXX11_ABI), 'cuda': torch.version.cuda is not None}))";
  const r = spawnSync(PYTHON, ["-c", code], { encoding: "utf8", cwd: tmpdir() });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

test("stitchlab doctor reports libtorch, threads (all cores by default) and a correct matmul", (t) => {
  const r = stitchlab(["doctor", "--json"]);
  assert.equal(r.status, 0, r.stderr);
  const rep = JSON.parse(r.stdout);
  // Checked against sources the doctor does not read: the files on disk, Node's core count, and
  // (when the libtorch in use is Python's, as setup.sh's is) what Python's PyTorch says of itself.
  assert.ok(existsSync(join(rep.libtorch.libDir, "libtorch_cpu.so")), `libtorch in ${rep.libtorch.libDir}`);
  assert.match(rep.libtorch.version, /^\d+\.\d+\.\d+/);
  if (pytorchUnavailable() === null) {
    const py = pythonTorch();
    if (py.lib === realpathSync(rep.libtorch.libDir)) {
      // Python's version may carry a suffix (Debian's "1.13.0a0"); the release numbers agree.
      assert.equal(rep.libtorch.version.match(/^\d+\.\d+\.\d+/)?.[0], py.version.match(/^\d+\.\d+\.\d+/)?.[0]);
      assert.equal(rep.libtorch.cxx11abi, py.abi, "C++11 ABI");
      assert.equal(rep.libtorch.cudaBuild, py.cuda, "CUDA build");
      if (!py.cuda) assert.equal(rep.libtorch.cudaGraphs, false, "no CUDA graphs without CUDA");
    } else t.diagnostic(`libtorch ${rep.libtorch.libDir} is not Python's (${py.lib}): its version is not compared`);
  }
  // The BLAS this test's own process loaded with the same libtorch (or none, as with MKL built in).
  torch.buildInfo(); // libtorch loaded here
  const maps = readFileSync("/proc/self/maps", "utf8").split("\n");
  const blas = maps.find((l) => /blas/i.test(l) && l.includes("/"));
  assert.equal(rep.build.blas, blas ? blas.slice(blas.indexOf("/")) : "none loaded");
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
  // One thread: convolutions run channels-last where oneDNN runs AVX-512 (torch/layout.ts); two: contiguous.
  const one = JSON.parse(r.stdout).threads;
  assert.equal(one.layout, one.onednnIsa.startsWith("avx512") ? "channels-last" : "contiguous", one.onednnIsa);
  const two = stitchlab(["doctor", "--json"], { STITCHLAB_THREADS: "2" });
  assert.equal(JSON.parse(two.stdout).threads.layout, "contiguous");
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

test("CUDA graphs' headers are found: $CUDA_HOME first, then the nvidia packages beside a pip PyTorch", () => {
  // A pip layout: <site>/torch/lib holds libtorch, <site>/nvidia/cuda_runtime/include the headers.
  const site = mkdtempSync(join(tmpdir(), "stitchlab-cuda-site-"));
  const libDir = join(site, "torch", "lib");
  mkdirSync(libDir, { recursive: true });
  const lt = { source: "python", includeDirs: [], libDir, abi: 1, cuda: true, version: "2.11.0" };
  const saved = { home: process.env.CUDA_HOME, path: process.env.CUDA_PATH };
  delete process.env.CUDA_HOME;
  delete process.env.CUDA_PATH;
  try {
    const pip = join(site, "nvidia", "cuda_runtime", "include");
    mkdirSync(pip, { recursive: true });
    writeFileSync(join(pip, "cuda_runtime_api.h"), "");
    assert.equal(findCudaInclude(lt), pip, "the wheel's own CUDA before any toolkit on the machine");
    const home = join(site, "toolkit");
    mkdirSync(join(home, "include"), { recursive: true });
    writeFileSync(join(home, "include", "cuda_runtime_api.h"), "");
    process.env.CUDA_HOME = home;
    assert.equal(findCudaInclude(lt), join(home, "include"), "CUDA_HOME wins");
  } finally {
    for (const [k, v] of [
      ["CUDA_HOME", saved.home],
      ["CUDA_PATH", saved.path],
    ] as const)
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    rmSync(site, { recursive: true, force: true });
  }
});

test("--help shows pixel-unit defaults as fractions of 255", () => {
  for (const command of ["train", "stitch"]) {
    const r = runCli([command, "--help"]);
    assert.equal(r.status, 0, r.stderr);
    const help = r.stdout.replace(/\s+/g, " ");
    // The default in the option's own entry: up to the next option's flag.
    assert.match(help, /--pgd-eps <x> (?:(?! --)[\s\S])*\(default 8\/255\)/, command);
    assert.match(help, /--pgd-step <x> (?:(?! --)[\s\S])*\(default 2\/255\)/, command);
    // --eps is the shorthand, said so, in both commands.
    assert.match(help, /--eps <x> shorthand for --pgd-eps/, command);
    assert.doesNotMatch(help, /0\.0313/, command);
  }
});

test("--help lists the commands in a reader's order: the jobs, their single steps, then inspection", () => {
  const r = stitchlab(["--help"]);
  assert.equal(r.status, 0, r.stderr);
  const listed = [...r.stdout.matchAll(/^ {2}([a-z]+) /gm)].map((m) => m[1]);
  assert.deepEqual(listed, [...COMMAND_ORDER, "help"]);
  // Every command a module registers has its place.
  assert.deepEqual(COMMAND_MODULES.flatMap((m) => m.names).sort(), [...COMMAND_ORDER].sort());
});

test("--help marks required options and expands the objectives and IRI", () => {
  const r = runCli(["stitch", "--help"]);
  assert.equal(r.status, 0, r.stderr);
  // One entry per option: its lines, up to the next line that starts an option.
  const entries = r.stdout.split(/\n(?= {2}-)/).map((e) => e.replace(/\s+/g, " ").trim());
  const entry = (flag: string) => entries.find((e) => e.startsWith(flag)) ?? "";
  for (const flag of [
    "--front <file>",
    "--back <file>",
    "--point <name>",
    "--objective <o>",
    "--mode <m>",
    "--out <dir>",
  ])
    assert.match(entry(flag), /\(required\)$/, flag);
  assert.doesNotMatch(entry("--limit <n>"), /required/, "an optional option is not marked");
  const help = r.stdout.replace(/\s+/g, " ");
  for (const words of ["hard-label matching", "soft-label matching", "direct matching", "functional latent alignment"])
    assert.ok(help.includes(words), words);
  assert.match(help, /identically represented inputs/);
  assert.doesNotMatch(help, /PROTOCOL\.md/, "help points inside the repository");
});

test("stitch refuses an --out that holds an earlier stitch, before any work, unless --force", () => {
  const out = mkdtempSync(join(tmpdir(), "stitchlab-stitch-out-"));
  try {
    writeFileSync(join(out, "scores.json"), "{}");
    const args = ["stitch", "--front", "f.safetensors", "--back", "b.safetensors", "--point", "layer1.0"];
    const r = runCli([...args, "--objective", "slm", "--mode", "standard", "--dataset", "fashion-mnist", "--out", out]);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /--out .* is not empty \(a stitch made before\?\): give a new folder, or --force/);
    assert.equal(readFileSync(join(out, "scores.json"), "utf8"), "{}", "the earlier stitch is kept");
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test("an unknown objective or weight names the flag (--objective), before any file is read", () => {
  const args = ["stitch", "--front", "f.safetensors", "--back", "b.safetensors", "--point", "layer1.0"];
  for (const [objective, message] of [
    ["xyz", "--objective: unknown objective 'xyz'; objectives: hlm, slm, dm, fula (weighted: hlm:1,fula:0.5)"],
    ["slm:x", "--objective: objective weight 'x' of slm is not a non-negative number"],
  ]) {
    const r = runCli([
      ...args,
      "--objective",
      objective,
      "--mode",
      "standard",
      "--dataset",
      "fashion-mnist",
      "--out",
      "o",
    ]);
    assert.equal(r.status, 1);
    assert.equal(r.stderr, `stitchlab: ${message}\n`);
  }
});
