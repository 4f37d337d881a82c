// The ground floor for files: atomic writes, JSON records named on error, writable checks, the
// repository root and stitchlab's version (the one place package.json is read). It imports
// nothing of torch/, so the report, `--version` and other pure-file code use it without libtorch.
import { createHash } from "node:crypto";
import {
  accessSync,
  closeSync,
  constants,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { homedir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** A file's SHA-256 (hex), read in 4 MiB chunks (an IRI set or a checkpoint can be gigabytes). */
export function sha256File(path: string): string {
  const hash = createHash("sha256");
  const buf = Buffer.allocUnsafe(4 << 20);
  const fd = openSync(path, "r");
  try {
    for (let n = readSync(fd, buf); n > 0; n = readSync(fd, buf)) hash.update(buf.subarray(0, n));
  } finally {
    closeSync(fd);
  }
  return hash.digest("hex");
}

/**
 * Writes chunks to path atomically: a temporary sibling file, fsync, then rename. A failure (a
 * full disk's ENOSPC, a read-only file system) names `path` and keeps its code; the file that
 * was there is left whole, and the temporary one is removed.
 */
export function writeFileAtomic(path: string, chunks: (Uint8Array | string)[]): void {
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.${Date.now()}.tmp`);
  let fd: number | undefined;
  try {
    fd = openSync(tmp, "w");
    for (const c of chunks) {
      const b = typeof c === "string" ? Buffer.from(c) : c;
      let off = 0;
      while (off < b.byteLength) off += writeSync(fd, b, off, b.byteLength - off);
    }
    fsyncSync(fd);
    closeSync(fd);
    fd = undefined;
    renameSync(tmp, path);
  } catch (e) {
    if (fd !== undefined) closeSync(fd);
    rmSync(tmp, { force: true });
    // Node's own message names the syscall but not the file ("ENOSPC: no space left on device, write").
    const code = (e as NodeJS.ErrnoException).code;
    throw Object.assign(new Error(`cannot write ${path}: ${(e as Error).message}`), code ? { code } : {});
  }
}

/** The repository root: the folder with native/binding.gyp above this file, in src (io/) and in dist (dist/io/). */
function findRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 4; i++) {
    if (existsSync(join(dir, "native", "binding.gyp"))) return dir;
    dir = resolve(dir, "..");
  }
  return resolve(dirname(fileURLToPath(import.meta.url)), "..");
}

export const repoRoot = findRoot();

/**
 * stitchlab's cache folder: $STITCHLAB_CACHE, else $XDG_CACHE_HOME/stitchlab (~/.cache/stitchlab).
 * Experiments' tasks live in it (unless `--cache` says otherwise) and models from the hubs under hub/.
 */
export function stitchlabCacheDir(): string {
  return process.env.STITCHLAB_CACHE ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "stitchlab");
}

/** stitchlab's version, from package.json. */
export const stitchlabVersion: string = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")).version;

/** A file's bytes; a missing or unreadable file is one error that says what it was for (`what`). */
export function readFileNamed(path: string, what: string): Buffer {
  if (!existsSync(path)) throw new Error(`${what}: file not found: ${path}`);
  try {
    return readFileSync(path);
  } catch (e) {
    throw new Error(`${what}: cannot read ${path}: ${(e as Error).message}`);
  }
}

/**
 * A JSON file's content; a file that cannot be read or parsed is one error naming the file and
 * what it is (`what`: "a checkpoint's sidecar", "an IRI set's record"), not JSON.parse's bare
 * "Expected double-quoted property name".
 */
export function readJsonFile<T>(path: string, what: string): T {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new Error(`cannot read ${what} ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  try {
    return JSON.parse(text) as T;
  } catch (e) {
    throw new Error(
      `${path} (${what}) is not valid JSON: ${(e as Error).message}; it may be truncated or edited by hand`,
    );
  }
}

/**
 * Proves that files can be written in `dir`, so that a command fails before its work, not after
 * it: an --out that is a file, lies under a file, or is on a read-only file system. Folders it
 * had to make for the proof are removed again, so a command refused later leaves nothing behind.
 * `what` names it in the error ("--out").
 */
/**
 * Refuses an output folder that already holds files (an earlier run's results), unless `force`:
 * finished work is never overwritten by accident. Checked before any work.
 */
export function refuseNonEmptyDir(dir: string, what: string, force: boolean, holds: string): void {
  if (!force && existsSync(dir) && readdirSync(dir).length > 0)
    throw new Error(`${what} ${dir} is not empty (${holds}?): give a new folder, or --force to overwrite it`);
}

export function ensureWritableDir(dir: string, what: string): void {
  const probe = join(dir, `.stitchlab-probe-${process.pid}`);
  let made: string | undefined;
  try {
    made = mkdirSync(dir, { recursive: true });
    writeFileSync(probe, "");
    rmSync(probe);
  } catch (e) {
    throw new Error(
      `${what} ${dir} is not a folder stitchlab can write in (${whyNotWritable(dir, e)}); nothing was run`,
    );
  } finally {
    if (made) rmSync(made, { recursive: true, force: true });
  }
}

/**
 * Why a folder cannot be made or written in. Node's recursive mkdir reports a read-only file
 * system as ENOENT (it then looks for the folder it could not make), which reads as a missing
 * parent; so the nearest folder that exists is asked whether it may be written in.
 */
function whyNotWritable(dir: string, e: unknown): string {
  let at = resolve(dir);
  while (!existsSync(at) && dirname(at) !== at) at = dirname(at);
  try {
    accessSync(at, constants.W_OK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "EROFS") return `EROFS: ${at} is on a read-only file system`;
    if (code === "EACCES" || code === "EPERM") return `${code}: no permission to write in ${at}`;
  }
  return (e as NodeJS.ErrnoException).code ?? (e as Error).message;
}

/** JSON with sorted keys and undefined fields dropped: equal values give equal text. */
export function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (v && typeof v === "object")
    return `{${Object.keys(v)
      .filter((k) => (v as Record<string, unknown>)[k] !== undefined)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(",")}}`;
  return JSON.stringify(v);
}
