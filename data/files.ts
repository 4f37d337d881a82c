// Reading dataset files: one clear error for a missing, unreadable or corrupt file, naming the
// path, what was expected and how to get the data; gzip detected by its magic bytes, not the name.
import { existsSync, readFileSync, statSync } from "node:fs";
import { gunzipSync } from "node:zlib";

/** An error about a dataset file: the path, what was wrong, and how to get the data. */
export class DataError extends Error {
  constructor(path: string, problem: string, howToGet?: string) {
    super(`${path}: ${problem}${howToGet ? `. ${howToGet}` : ""}`);
    this.name = "DataError";
  }
}

export function isGzip(buf: Uint8Array): boolean {
  return buf.length >= 2 && buf[0] === 0x1f && buf[1] === 0x8b;
}

/** The file's bytes, gunzipped when it is gzip; a clear DataError otherwise. */
export function readDataFile(path: string, howToGet: string): Buffer {
  if (!existsSync(path)) throw new DataError(path, "file not found", howToGet);
  let buf: Buffer;
  try {
    buf = readFileSync(path);
  } catch (e) {
    throw new DataError(path, `cannot read: ${(e as Error).message}`, howToGet);
  }
  if (!isGzip(buf)) return buf;
  try {
    return gunzipSync(buf);
  } catch (e) {
    throw new DataError(path, `corrupt gzip data (${(e as Error).message})`, howToGet);
  }
}

export function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}
