// Builds the addon: finds libtorch, writes native/libtorch.gypi and native/build/libtorch.json
// (read by `stitchlab doctor`), then runs node-gyp. Prints what it found so a failed build
// can be traced to the libtorch it used.
import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { findLibtorch } from "./find-libtorch.mjs";

const here = dirname(fileURLToPath(import.meta.url));
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

const libs = ["-lc10", "-ltorch_cpu", "-ltorch"];
// libtorch_cuda registers its kernels from static initialisers; nothing we call names it
// directly, so --no-as-needed keeps the linker from dropping it.
if (lt.cuda) libs.push("-Wl,--no-as-needed", "-ltorch_cuda", "-lc10_cuda", "-Wl,--as-needed");
const gypi = {
  variables: {
    libtorch_include_dirs: lt.includeDirs,
    libtorch_lib_dir: lt.libDir,
    libtorch_abi: lt.abi,
    libtorch_libs: libs,
    libtorch_cuda: lt.cuda ? 1 : 0,
  },
};
writeFileSync(join(here, "libtorch.gypi"), JSON.stringify(gypi, null, 2));
mkdirSync(join(here, "build"), { recursive: true });
writeFileSync(join(here, "build", "libtorch.json"), JSON.stringify(lt, null, 2));

const require = createRequire(import.meta.url);
const gyp = require.resolve("node-gyp/bin/node-gyp.js");
const jobs = String(Math.max(1, (await import("node:os")).availableParallelism()));
const r = spawnSync(process.execPath, [gyp, "rebuild", "--directory", here, "--jobs", jobs], {
  stdio: "inherit",
});
if (r.status !== 0) {
  console.error("stitchlab build: node-gyp failed (see above)");
  process.exit(r.status ?? 1);
}
console.log(`stitchlab build: wrote ${join(here, "build", "Release", "stitchlab.node")}`);
