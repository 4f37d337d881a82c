// Builds the addon: finds libtorch, writes native/libtorch.gypi and native/build/libtorch.json
// (read by `stitchlab doctor`), then runs node-gyp. Prints what it found so a failed build
// can be traced to the libtorch it used.
//   --force     rebuild even when nothing changed
//   --sanitize  build with AddressSanitizer into native/build-asan/ (the release build is left as
//               it is); load it with STITCHLAB_ADDON=asan and libasan preloaded (test/sanitize.test.ts)
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { findCudaInclude, findLibtorch, linkLibraries } from "./find-libtorch.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const sanitize = process.argv.includes("--sanitize");
// Where node-gyp builds: native/ itself, or for the sanitizer a folder of its own whose
// binding.gyp is the release one with ASan's flags, pointing back at the same sources.
const gypDir = sanitize ? join(here, "build-asan") : here;
let lt;
try {
  lt = findLibtorch();
} catch (e) {
  console.error(`stitchlab build: ${e.message}`);
  process.exit(1);
}
console.log(
  `stitchlab build: libtorch ${lt.version} from ${lt.source} (${lt.libDir}), C++11 ABI=${lt.abi}, CUDA=${lt.cuda}`,
);

const libs = linkLibraries(lt);
// CUDA graphs need the CUDA runtime's headers as well as a CUDA libtorch.
const cudaInclude = lt.cuda ? findCudaInclude(lt) : undefined;
if (lt.cuda)
  console.log(
    cudaInclude
      ? `stitchlab build: CUDA graphs on (CUDA runtime headers in ${cudaInclude})`
      : "stitchlab build: CUDA graphs off: no cuda_runtime_api.h found (set CUDA_HOME to the CUDA toolkit)",
  );
const gypi = {
  variables: {
    libtorch_include_dirs: lt.includeDirs,
    libtorch_lib_dir: lt.libDir,
    libtorch_abi: lt.abi,
    libtorch_libs: libs,
    libtorch_cuda: lt.cuda ? 1 : 0,
    cuda_include_dirs: cudaInclude ? [cudaInclude] : [],
    cuda_graphs: cudaInclude ? 1 : 0,
  },
};
// Skip the (slow) compile when nothing that goes into it changed: the sources, the gyp files,
// the libtorch found, and the Node version. `--force` rebuilds anyway.
const hash = createHash("sha256");
for (const f of [
  "binding.gyp",
  ...readdirSync(join(here, "src"))
    .sort()
    .map((f) => join("src", f)),
])
  hash.update(f).update(readFileSync(join(here, f)));
hash
  .update(JSON.stringify(gypi))
  .update(process.version)
  .update(sanitize ? "asan" : "release");
const stamp = hash.digest("hex");
const stampFile = join(gypDir, "build", "stamp");
const output = join(gypDir, "build", "Release", "stitchlab.node");
if (
  !process.argv.includes("--force") &&
  existsSync(output) &&
  existsSync(stampFile) &&
  readFileSync(stampFile, "utf8") === stamp
) {
  console.log(`stitchlab build: ${output} is up to date`);
  process.exit(0);
}

writeFileSync(join(here, "libtorch.gypi"), JSON.stringify(gypi, null, 2));
mkdirSync(join(gypDir, "build"), { recursive: true });
if (sanitize) writeFileSync(join(gypDir, "binding.gyp"), JSON.stringify(asanBinding(), null, 2));

/**
 * The release binding.gyp for AddressSanitizer: the same sources (from ../src), ASan's compile
 * and link flags, frame pointers and -O1 for readable reports.
 */
function asanBinding() {
  const gyp = JSON.parse(readFileSync(join(here, "binding.gyp"), "utf8"));
  gyp.includes = gyp.includes.map((f) => join("..", f));
  for (const t of gyp.targets) {
    t.sources = t.sources.map((f) => join("..", f));
    t.cflags_cc = [
      ...t.cflags_cc.filter((f) => f !== "-O2"),
      "-O1",
      "-g",
      "-fsanitize=address",
      "-fno-omit-frame-pointer",
    ];
    t.ldflags = [...(t.ldflags ?? []), "-fsanitize=address"];
  }
  return gyp;
}

const require = createRequire(import.meta.url);
const gyp = require.resolve("node-gyp/bin/node-gyp.js");
const jobs = String(Math.max(1, (await import("node:os")).availableParallelism()));
// Build against this Node's own headers when they are installed (as Debian's nodejs and the
// official tarballs do), so node-gyp never needs the network to fetch them.
const nodeRoot = join(dirname(process.execPath), "..");
const nodedir =
  process.env.npm_config_nodedir ??
  (existsSync(join(nodeRoot, "include", "node", "node_api.h")) ? nodeRoot : undefined);
const gypArgs = [gyp, "rebuild", "--directory", gypDir, "--jobs", jobs];
if (nodedir) gypArgs.push(`--nodedir=${nodedir}`);
const r = spawnSync(process.execPath, gypArgs, {
  stdio: "inherit",
});
if (r.status !== 0) {
  console.error("stitchlab build: node-gyp failed (see above)");
  process.exit(r.status ?? 1);
}
// node-gyp rebuild clears build/, so these are written after it.
writeFileSync(join(gypDir, "build", "libtorch.json"), JSON.stringify(lt, null, 2));
writeFileSync(stampFile, stamp);
console.log(`stitchlab build: wrote ${output}`);
