// The ground floor for files: atomic writes, the repository root and stitchlab's version. It
// loads nothing native, so the report, `--version` and other pure-file code can use it without
// starting libtorch.
import { closeSync, existsSync, fsyncSync, openSync, readFileSync, renameSync, rmSync, writeSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** Writes chunks to path atomically: a temporary sibling file, fsync, then rename. */
export function writeFileAtomic(path: string, chunks: (Uint8Array | string)[]): void {
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.${Date.now()}.tmp`);
  const fd = openSync(tmp, "w");
  try {
    for (const c of chunks) {
      const b = typeof c === "string" ? Buffer.from(c) : c;
      let off = 0;
      while (off < b.byteLength) off += writeSync(fd, b, off, b.byteLength - off);
    }
    fsyncSync(fd);
  } catch (e) {
    closeSync(fd);
    rmSync(tmp, { force: true });
    throw e;
  }
  closeSync(fd);
  renameSync(tmp, path);
}

/** The repository root: two levels above this file in src (torch/) and in dist (dist/torch/). */
function findRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 4; i++) {
    if (existsSync(join(dir, "native", "binding.gyp"))) return dir;
    dir = resolve(dir, "..");
  }
  return resolve(dirname(fileURLToPath(import.meta.url)), "..");
}

export const repoRoot = findRoot();

/** stitchlab's version, from package.json. */
export const stitchlabVersion: string = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")).version;
