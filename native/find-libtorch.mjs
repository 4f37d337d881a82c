// Locates a libtorch to build the addon against, in the order the README gives:
//   1. $LIBTORCH (an unpacked libtorch archive: include/ and lib/),
//   2. the libtorch bundled in a Python PyTorch install (pip wheels ship headers and libraries),
//   3. the system's (Debian/Ubuntu `libtorch-dev`).
// Also works out the C++ ABI flag the libraries were built with and whether they carry CUDA,
// because compiling against the wrong _GLIBCXX_USE_CXX11_ABI links but fails at load time.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

const HOW =
  "libtorch was not found. Provide it in one of three ways:\n" +
  "  1. set LIBTORCH to an unpacked libtorch archive (a folder with include/ and lib/),\n" +
  "  2. install PyTorch for Python (its wheel bundles libtorch; set PYTHON if it is not python3),\n" +
  "  3. on Debian/Ubuntu: apt-get install libtorch-dev (or run scripts/setup.sh).";

function hasHeaders(inc) {
  return existsSync(join(inc, "torch", "csrc", "api", "include", "torch", "torch.h"));
}

function abiFromCmake(paths) {
  for (const p of paths) {
    if (!existsSync(p)) continue;
    const m = readFileSync(p, "utf8").match(/_GLIBCXX_USE_CXX11_ABI=([01])/);
    if (m) return Number(m[1]);
  }
  return undefined;
}

function abiFromSymbols(libDir) {
  // A library built with the new ABI exports std::__cxx11 symbols; one built with the old does not.
  try {
    const out = execFileSync("nm", ["-DC", join(libDir, "libc10.so")], {
      encoding: "utf8",
      maxBuffer: 1 << 28,
    });
    return out.includes("__cxx11") ? 1 : 0;
  } catch {
    return 1;
  }
}

function fromRoot(root, source, abiHint) {
  const inc = join(root, "include");
  const lib = join(root, "lib");
  if (!hasHeaders(inc) || !existsSync(join(lib, "libc10.so"))) return undefined;
  const abi =
    abiHint ?? abiFromCmake([join(root, "share", "cmake", "Torch", "TorchConfig.cmake")]) ?? abiFromSymbols(lib);
  return describe(source, [inc, join(inc, "torch", "csrc", "api", "include")], lib, abi);
}

function describe(source, includeDirs, libDir, abi) {
  const cuda = existsSync(join(libDir, "libtorch_cuda.so"));
  let version = "unknown";
  for (const inc of includeDirs) {
    const v = join(inc, "torch", "version.h");
    if (existsSync(v)) {
      const m = readFileSync(v, "utf8").match(/#define TORCH_VERSION\s+\\?\s*"([^"]+)"/);
      if (m) version = m[1];
    }
  }
  return { source, includeDirs, libDir, abi, cuda, version };
}

function fromPython() {
  const candidates = [process.env.PYTHON, "python3", "/usr/bin/python3"].filter(Boolean);
  const script =
    "import torch, os; print(os.path.dirname(torch.__file__)); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))";
  for (const py of [...new Set(candidates)]) {
    try {
      const [dir, abi] = execFileSync(py, ["-c", script], {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "ignore"],
      })
        .trim()
        .split("\n");
      const found = fromRoot(dir, `python (${py})`, Number(abi));
      if (found) return found;
    } catch {
      // not this interpreter
    }
  }
  return undefined;
}

function fromSystem() {
  for (const inc of ["/usr/include", "/usr/local/include"]) {
    if (!hasHeaders(inc)) continue;
    const libDirs = ["/usr/lib", "/usr/local/lib"];
    for (const base of ["/usr/lib", "/usr/local/lib"]) {
      if (!existsSync(base)) continue;
      for (const d of readdirSync(base)) if (d.endsWith("-linux-gnu")) libDirs.push(join(base, d));
    }
    const lib = libDirs.find((d) => existsSync(join(d, "libtorch.so")));
    if (!lib) continue;
    const abi = abiFromCmake([join(lib, "cmake", "Torch", "TorchConfig.cmake")]) ?? abiFromSymbols(lib);
    return describe("system", [inc, join(inc, "torch", "csrc", "api", "include")], lib, abi);
  }
  return undefined;
}

export function findLibtorch() {
  if (process.env.LIBTORCH) {
    const found = fromRoot(process.env.LIBTORCH, "LIBTORCH");
    if (!found)
      throw new Error(
        `LIBTORCH=${process.env.LIBTORCH} does not hold include/torch/csrc/api/include/torch/torch.h and lib/libc10.so.\n${HOW}`,
      );
    return found;
  }
  const found = fromPython() ?? fromSystem();
  if (!found) throw new Error(HOW);
  return found;
}

/**
 * The folder holding the CUDA runtime's headers (cuda_runtime_api.h), which CUDA graphs
 * (native/src/graphs.cc) need and libtorch's own headers do not carry. In this order: $CUDA_HOME
 * (or $CUDA_PATH), the nvidia-* Python packages next to a pip PyTorch's libtorch (the CUDA that
 * libtorch was built with), then the usual toolkit folders. Undefined when none is found: the
 * addon is then built without CUDA graphs, and says so.
 */
export function findCudaInclude(lt) {
  const candidates = [];
  for (const v of [process.env.CUDA_HOME, process.env.CUDA_PATH]) if (v) candidates.push(join(v, "include"));
  // A pip PyTorch: libDir is <site-packages>/torch/lib; the runtime headers sit in
  // <site-packages>/nvidia/<package>/include.
  const nvidia = join(lt.libDir, "..", "..", "nvidia");
  if (existsSync(nvidia)) for (const d of readdirSync(nvidia).sort()) candidates.push(join(nvidia, d, "include"));
  candidates.push("/usr/local/cuda/include", "/usr/include");
  return candidates.find((d) => existsSync(join(d, "cuda_runtime_api.h")));
}

/** The linker flags for a found libtorch: the CPU libraries, and the CUDA ones when it has them. */
export function linkLibraries(lt) {
  const libs = ["-lc10", "-ltorch_cpu", "-ltorch"];
  // libtorch_cuda registers its kernels from static initialisers; nothing we call names it
  // directly, so --no-as-needed keeps the linker from dropping it.
  if (lt.cuda) libs.push("-Wl,--no-as-needed", "-ltorch_cuda", "-lc10_cuda", "-Wl,--as-needed");
  return libs;
}
