// Downloading one file over HTTP(S) into place, verified, or not at all: the bytes go to a
// temporary sibling of the destination, are checked against what the server (or the file's name)
// promises, and only then renamed to the destination. An error, a dropped connection or a hash
// that differs removes the temporary file, so no partial file is ever left or taken.
//
// What is verified:
// - the byte count against Content-Length and, from a Hugging Face hub, X-Linked-Size;
// - a Hugging Face hub's ETag, as huggingface_hub's hf_hub_download reads it (X-Linked-Etag, else
//   the hub's own ETag; `W/` and quotes stripped): a file stored in git-lfs has its SHA-256 as
//   ETag, a file stored in git its git blob SHA-1 (SHA-1 of "blob <size>\0" and the bytes);
//   X-Repo-Commit is recorded (the commit the revision resolved to);
// - a SHA-256 prefix, as torch.hub's check_hash reads it from a weights file's name
//   (resnet18-f37072fd.pth: the SHA-256 starts with f37072fd);
// - a .safetensors file's structure: the header parses and its tensors fill the data exactly.
//
// What is bounded (downloadLimits), so that no server can keep a download going forever:
// - the bytes: no more than Content-Length or X-Linked-Size promise, and where neither says, no
//   more than a cap: STITCHLAB_DOWNLOAD_MAX_MB where it is set, else 1000 MB for a model's file
//   (job.model: every hub download) and 4096 MB for any other (a size promised above
//   STITCHLAB_DOWNLOAD_MAX_MB, default 4096, is refused before any byte is read);
// - the time: every window of STITCHLAB_DOWNLOAD_RATE_WINDOW seconds (default 60) must bring
//   STITCHLAB_DOWNLOAD_MIN_RATE kB/s (default 10) on average, so a server that trickles a byte
//   now and then (which no idle timeout catches) is stopped too; 0 turns the rate off;
// - the headers: each hop's response headers must be in within STITCHLAB_DOWNLOAD_HEADER_TIMEOUT
//   seconds (default 60) of its request, so a server that trickles the headers (which neither the
//   idle timeout nor the rate, which starts with the body, catches) is stopped too;
// - the bodies not taken: a redirect's or an error's body is not read but its connection closed,
//   so an endless one keeps neither the socket nor the process.
//
// Loading a model is synchronous (models/checkpoint.ts loadCheckpoint), so downloadSync runs the
// download in a child Node process (this file as its entry point) and waits for it; the child's
// stderr is the caller's, so its progress line shows as it goes. The line is this file's own
// display (progressLine): on a terminal one line redrawn as the bytes come, elsewhere (a log) a
// line at the start, one at most every PROGRESS_LOG_EVERY_MS with the bytes so far and the rate,
// and one at the end, so a download whose size the server does not give is never silent while it
// runs. download() takes another display as its second argument (the tests' hook). The code path
// is the same for every server: only the URL differs (models/hub.ts takes the hubs' base URLs from
// the environment).
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  closeSync,
  createWriteStream,
  fsyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
} from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import { basename, dirname, join } from "node:path";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { fileURLToPath, pathToFileURL } from "node:url";
import { stitchlabVersion } from "./files.js";

export interface DownloadJob {
  url: string;
  /** The final path; its folder is made. */
  dest: string;
  /** A SHA-256 the bytes must have (64 hex digits), or a prefix of it (torch.hub's file names). */
  sha256?: string;
  sha256Prefix?: string;
  /** Read and verify a Hugging Face hub's headers (ETag, X-Linked-Etag, X-Linked-Size, X-Repo-Commit). */
  hf?: boolean;
  /** What the progress line calls the file ("hf-hub:timm/resnet18.a1_in1k model.safetensors"). */
  label?: string;
  /** No bytes for this long is an error (ms; default 60 s). */
  idleTimeoutMs?: number;
  /** A model's file (weights, or the config beside them): where the server gives no size, modelMaxBytes caps it. */
  model?: boolean;
  /** At most this many bytes when the server promises no size, and no promise above it (default: downloadLimits()). */
  maxBytes?: number;
  /** At most this many bytes of a model's file whose size the server does not give (default: downloadLimits()). */
  modelMaxBytes?: number;
  /** Fewer bytes per second than this over any window of rateWindowMs is an error (default: downloadLimits(); 0: none). */
  minBytesPerSecond?: number;
  rateWindowMs?: number;
  /** Each hop's response headers must arrive within this long of its request (ms; default: downloadLimits()). */
  headerTimeoutMs?: number;
}

/** The bounds of a download (see the top of this file), from the environment, each checked. */
export interface DownloadLimits {
  maxBytes: number;
  modelMaxBytes: number;
  minBytesPerSecond: number;
  rateWindowMs: number;
  headerTimeoutMs: number;
}

/**
 * The cap on a model's file whose size the server does not give, in MB, where
 * STITCHLAB_DOWNLOAD_MAX_MB is not set. The largest weights file the zoo loads is torchvision's
 * vgg16_bn (vgg16_bn-6c64b313.pth, about 550 MB; timm's ViT-B about 350 MB, a ResNet-50 about
 * 100 MB), so 1000 MB takes each of them with room to spare, while a body that never ends stops
 * after 1 GB of disk and time rather than 4 GB. A file beyond it comes with its size from any
 * real hub; a mirror that sends none needs STITCHLAB_DOWNLOAD_MAX_MB raised, which the error says.
 */
export const MODEL_FILE_MAX_MB = 1000;

/**
 * The bounds the environment sets: STITCHLAB_DOWNLOAD_MAX_MB (default 4096: ViT-B's weights are
 * 350 MB; where set, also the cap of a model's file of unknown size, else MODEL_FILE_MAX_MB),
 * STITCHLAB_DOWNLOAD_MIN_RATE in kB/s (default 10; 0: no minimum) and
 * STITCHLAB_DOWNLOAD_RATE_WINDOW in seconds (default 60), and STITCHLAB_DOWNLOAD_HEADER_TIMEOUT
 * in seconds (default 60: each hop's headers). A value that is not a number is an error naming
 * the variable.
 */
export function downloadLimits(env: NodeJS.ProcessEnv = process.env): DownloadLimits {
  const read = (name: string, fallback: number, zero: boolean, unit: string): number => {
    const text = env[name];
    if (text === undefined || text.trim() === "") return fallback;
    const v = Number(text);
    if (!Number.isFinite(v) || v < 0 || (!zero && v === 0))
      throw new Error(`${name} is '${text}': expected a number of ${unit} ${zero ? ">= 0" : "> 0"}`);
    return v;
  };
  const given = env.STITCHLAB_DOWNLOAD_MAX_MB !== undefined && env.STITCHLAB_DOWNLOAD_MAX_MB.trim() !== "";
  const maxBytes = read("STITCHLAB_DOWNLOAD_MAX_MB", 4096, false, "megabytes") * 1e6;
  return {
    maxBytes,
    // The setting, where given, is the one cap for every file: it raises a model's as well as lowers it.
    modelMaxBytes: given ? maxBytes : MODEL_FILE_MAX_MB * 1e6,
    minBytesPerSecond: read("STITCHLAB_DOWNLOAD_MIN_RATE", 10, true, "kB/s") * 1e3,
    rateWindowMs: read("STITCHLAB_DOWNLOAD_RATE_WINDOW", 60, false, "seconds") * 1e3,
    headerTimeoutMs: read("STITCHLAB_DOWNLOAD_HEADER_TIMEOUT", 60, false, "seconds") * 1e3,
  };
}

export interface DownloadResult {
  url: string;
  /** Where the bytes came from, after redirects. */
  from: string;
  path: string;
  bytes: number;
  sha256: string;
  /** The hub's ETag, normalised, and the commit its revision resolved to (Hugging Face). */
  etag?: string;
  commit?: string;
  /** What was checked, in words ("SHA-256 = X-Linked-Etag", "safetensors structure"). */
  verified: string[];
}

/** Why a download failed, for the caller's message: the server could not be reached, the file is not there, or anything else. */
export type DownloadFailure = "unreachable" | "not-found" | "failed";

export class DownloadError extends Error {
  constructor(
    message: string,
    readonly kind: DownloadFailure,
    readonly url: string,
  ) {
    super(message);
    this.name = "DownloadError";
  }
}

/** Network errors that mean the server cannot be reached at all (offline, no route, no DNS). */
const UNREACHABLE = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ENETUNREACH",
  "EHOSTUNREACH",
  "ENETDOWN",
  "ETIMEDOUT",
  "ECONNRESET_BEFORE_RESPONSE",
]);

const MAX_REDIRECTS = 10;

/** huggingface_hub's _normalize_etag: `W/"abc"` -> abc. */
export const normalizeEtag = (etag: string): string => etag.replace(/^W\//, "").replace(/^"|"$/g, "");

/** The git blob SHA-1 of bytes: what git (and a Hugging Face hub's ETag for a file not in lfs) names them by. */
export const gitBlobSha1 = (bytes: Uint8Array): string =>
  createHash("sha1").update(`blob ${bytes.byteLength}\0`).update(bytes).digest("hex");

const mb = (n: number): string =>
  n < 1e3 ? `${Math.round(n)} B` : n < 1e6 ? `${(n / 1e3).toFixed(1)} kB` : `${(n / 1e6).toFixed(1)} MB`;

interface Response {
  res: http.IncomingMessage;
  req: http.ClientRequest;
  /** Every hop's URL and headers, the first (the one asked) first. */
  hops: { url: string; status: number; headers: http.IncomingHttpHeaders }[];
}

const header = (h: http.IncomingHttpHeaders, name: string): string | undefined => {
  const v = h[name.toLowerCase()];
  return Array.isArray(v) ? v[0] : v;
};

/**
 * GET `url`, following redirects (relative ones too, as huggingface_hub does for a renamed
 * repository). Each hop's headers must be in within headerMs of its request; a redirect's body is
 * not read (its connection is closed).
 */
function get(url: string, idleMs: number, headerMs: number): Promise<Response> {
  const hops: Response["hops"] = [];
  const once = (u: string, left: number): Promise<Response> =>
    new Promise((resolvePromise, reject) => {
      let parsed: URL;
      try {
        parsed = new URL(u);
      } catch {
        reject(new DownloadError(`${u} is not a URL`, "failed", url));
        return;
      }
      const lib = parsed.protocol === "https:" ? https : parsed.protocol === "http:" ? http : null;
      if (!lib) {
        reject(new DownloadError(`${u}: only http and https URLs are fetched`, "failed", url));
        return;
      }
      let deadline: NodeJS.Timeout | undefined;
      const req = lib.get(
        parsed,
        { headers: { "Accept-Encoding": "identity", "User-Agent": `stitchlab/${stitchlabVersion}` } },
        (res) => {
          clearTimeout(deadline);
          const status = res.statusCode ?? 0;
          hops.push({ url: u, status, headers: res.headers });
          const location = header(res.headers, "location");
          if (status >= 300 && status < 400 && location) {
            // Not drained (an endless body would keep the socket, and the process, going): closed.
            res.on("error", () => {});
            res.destroy();
            if (left <= 0) {
              reject(new DownloadError(`${url}: more than ${MAX_REDIRECTS} redirects`, "failed", url));
              return;
            }
            once(new URL(location, u).href, left - 1).then(resolvePromise, reject);
            return;
          }
          resolvePromise({ res, req, hops });
        },
      );
      // The headers' deadline: the idle timeout restarts with every byte, so headers sent a byte
      // at a time would never end the request.
      deadline = setTimeout(() => {
        reject(
          new DownloadError(
            `${url}: no response headers${u === url ? "" : ` from ${u}`} within ${headerMs / 1000} s of the request (STITCHLAB_DOWNLOAD_HEADER_TIMEOUT): stopped; nothing was kept`,
            "failed",
            url,
          ),
        );
        req.destroy();
      }, headerMs);
      req.setTimeout(idleMs, () =>
        req.destroy(Object.assign(new Error(`no answer for ${idleMs / 1000} s`), { code: "ETIMEDOUT" })),
      );
      req.on("error", (e: NodeJS.ErrnoException) => {
        clearTimeout(deadline);
        const code = e.code === "ECONNRESET" ? "ECONNRESET_BEFORE_RESPONSE" : (e.code ?? "");
        const kind = UNREACHABLE.has(code) ? "unreachable" : "failed";
        const why = e.code && !e.message.includes(e.code) ? `${e.code}: ${e.message}` : e.message;
        reject(new DownloadError(`cannot reach ${u} (${why})`, kind, url));
      });
    });
  return once(url, MAX_REDIRECTS);
}

/** What a download tells its display as it goes. */
export interface DownloadDisplay {
  /** Bytes in so far: called with every chunk, before the next is read. */
  tick(got: number): void;
  /** The bytes are all in (not yet verified). */
  received(got: number): void;
  /** Stopped by an error (the error says what happened). */
  stopped(): void;
  /** Verified and in place. */
  done(got: number, verified: string[]): void;
}

/** What a display is started with: the file's label, the size the server gives (if it does) and the most bytes taken. */
export interface DownloadStart {
  label: string;
  total: number | undefined;
  /** The most bytes taken: the size given, else the cap of a file whose size is not given. */
  cap: number;
}

/**
 * A log's line at most this often (ms) while bytes come: often enough that a download of unknown
 * size is seen to move, rarely enough that a long one does not fill a batch job's log.
 */
export const PROGRESS_LOG_EVERY_MS = 5_000;

/** Where progressLine writes and what time it reads (stderr and the clock; a test's own). */
export interface ProgressOutput {
  tty: boolean;
  write: (text: string) => void;
  now: () => number;
}

const stderrOutput = (): ProgressOutput => ({
  tty: process.stderr.isTTY === true,
  write: (text) => process.stderr.write(text),
  now: Date.now,
});

/**
 * The progress line on stderr (the default display): on a terminal rewritten in place at most
 * every 200 ms; otherwise a line at the start, a line with the bytes so far and the rate at most
 * every PROGRESS_LOG_EVERY_MS, and one at the end. A file whose size the server does not give
 * says so and the cap it stops at, since only the cap ends it.
 */
export function progressLine(start: DownloadStart, out: ProgressOutput = stderrOutput()): DownloadDisplay {
  const { label, total, cap } = start;
  const { tty, write, now } = out;
  const t0 = now();
  let last = t0;
  let open = false;
  const unknown = `size not given; stops at ${mb(cap)}`;
  const line = (got: number) => {
    const secs = Math.max((now() - t0) / 1000, 1e-3);
    const share = total ? ` (${Math.floor((100 * got) / total)}%)` : "";
    const of = total !== undefined ? ` of ${mb(total)}${share}` : ` so far (${unknown})`;
    return `downloading ${label}: ${mb(got)}${of}, ${mb(got / secs)}/s`;
  };
  if (!tty) write(`downloading ${label} (${total !== undefined ? mb(total) : unknown})\n`);
  return {
    tick(got) {
      const every = tty ? 200 : PROGRESS_LOG_EVERY_MS;
      if (now() - last < every) return;
      last = now();
      if (tty) {
        open = true;
        write(`\r${line(got)}\x1b[K`);
      } else write(`${line(got)}\n`);
    },
    received(got) {
      if (tty) {
        open = false;
        write(`\r${line(got)}\x1b[K\n`);
      }
    },
    stopped() {
      if (tty && open) write("\n");
      open = false;
    },
    done(got, verified) {
      const secs = ((now() - t0) / 1000).toFixed(1);
      write(
        `downloaded ${label}: ${mb(got)} in ${secs} s${verified.length ? `, verified (${verified.join("; ")})` : ""}\n`,
      );
    },
  };
}

const ST_ITEM_SIZE: Record<string, number> = {
  F64: 8,
  F32: 4,
  F16: 2,
  BF16: 2,
  I64: 8,
  I32: 4,
  I16: 2,
  I8: 1,
  U8: 1,
  BOOL: 1,
  F8_E4M3: 1,
  F8_E5M2: 1,
  U16: 2,
  U32: 4,
  U64: 8,
};

/**
 * Why a file is not a whole safetensors file, or null: the header's length, the header as JSON,
 * each tensor's byte range against its dtype and shape, and the data section's size against the
 * ranges (they must fill it exactly, as the format requires).
 */
export function safetensorsProblem(path: string): string | null {
  const size = statSync(path).size;
  if (size < 8) return `${size} bytes: too short for a safetensors header`;
  const fd = openSync(path, "r");
  try {
    const lenBuf = Buffer.alloc(8);
    readSync(fd, lenBuf, 0, 8, 0);
    const n = Number(lenBuf.readBigUInt64LE(0));
    if (n > size - 8 || n > 100_000_000) return `header length ${n} exceeds the file's ${size} bytes`;
    const head = Buffer.alloc(n);
    readSync(fd, head, 0, n, 8);
    let json: Record<string, { dtype?: string; shape?: number[]; data_offsets?: [number, number] }>;
    try {
      json = JSON.parse(head.toString("utf8"));
    } catch (e) {
      return `the header is not JSON (${(e as Error).message})`;
    }
    const dataBytes = size - 8 - n;
    let covered = 0;
    let end = 0;
    for (const [name, t] of Object.entries(json)) {
      if (name === "__metadata__") continue;
      const [b, e] = t.data_offsets ?? [Number.NaN, Number.NaN];
      const item = ST_ITEM_SIZE[t.dtype ?? ""];
      if (!item) return `tensor ${name}: unknown dtype ${t.dtype}`;
      const want = item * (t.shape ?? []).reduce((a, d) => a * d, 1);
      if (!(Number.isInteger(b) && Number.isInteger(e) && b >= 0 && e >= b) || e - b !== want)
        return `tensor ${name}: byte range [${b}, ${e}] does not hold ${t.dtype} [${t.shape}] (${want} bytes)`;
      covered += e - b;
      end = Math.max(end, e);
    }
    if (end !== dataBytes || covered !== dataBytes)
      return `the tensors cover ${covered} bytes up to ${end}, but the data section has ${dataBytes}`;
    return null;
  } finally {
    closeSync(fd);
  }
}

/**
 * Downloads job.url to job.dest, verified (see the top of this file), through a temporary file
 * renamed into place, shown as it goes by `display` (progressLine on stderr by default). Throws a
 * DownloadError naming the URL; the temporary file is removed.
 */
export async function download(
  job: DownloadJob,
  display: (start: DownloadStart) => DownloadDisplay = progressLine,
): Promise<DownloadResult> {
  const { url, dest } = job;
  const label = job.label ?? url;
  mkdirSync(dirname(dest), { recursive: true });
  rmStalePartials(dest);
  const tmp = join(dirname(dest), `.${basename(dest)}.${process.pid}.${Date.now()}.part`);
  inFlight.add(tmp);
  const fail = (why: string, kind: DownloadFailure = "failed"): never => {
    throw new DownloadError(`${url}: ${why}`, kind, url);
  };
  try {
    const limits = { ...downloadLimits(), ...definedOf(job) };
    const { res, hops } = await get(url, job.idleTimeoutMs ?? 60_000, limits.headerTimeoutMs);
    const status = res.statusCode ?? 0;
    if (status !== 200) {
      // Its body is not read but its connection closed, as a redirect's.
      res.on("error", () => {});
      res.destroy();
      const hubSays = header(res.headers, "x-error-message");
      const where = hops.length > 1 ? ` (redirected to ${hops[hops.length - 1].url})` : "";
      fail(
        `HTTP ${status} ${res.statusMessage ?? ""}${where}${hubSays ? `: ${hubSays}` : ""}`.trim(),
        status === 404 ? "not-found" : "failed",
      );
    }
    // What the server promises. From a Hugging Face hub, the first hop that names a linked (lfs)
    // file's etag and size wins (the redirect to its storage); a file in git has them on the hub's own 200.
    const length = Number(header(res.headers, "content-length") ?? Number.NaN);
    let etag: string | undefined;
    let linkedSize: number | undefined;
    let commit: string | undefined;
    if (job.hf) {
      const origin = new URL(url).origin;
      for (const h of hops) {
        commit ??= header(h.headers, "x-repo-commit");
        const linked = header(h.headers, "x-linked-etag");
        if (linked && etag === undefined) etag = normalizeEtag(linked);
        const ls = header(h.headers, "x-linked-size");
        if (ls !== undefined && linkedSize === undefined) linkedSize = Number(ls);
      }
      const last = hops[hops.length - 1];
      const own = header(last.headers, "etag");
      if (etag === undefined && own && new URL(last.url).origin === origin) etag = normalizeEtag(own);
      if (etag === undefined)
        fail(
          "the hub sent no ETag (X-Linked-Etag or ETag): the file cannot be verified, as huggingface_hub also refuses",
        );
    }
    const total = Number.isFinite(length) ? length : linkedSize;
    // The most bytes taken: what the server promises, else the cap; a promise above the cap is
    // refused before any byte is read.
    const mbCap = `${mb(limits.maxBytes)} (STITCHLAB_DOWNLOAD_MAX_MB)`;
    if (total !== undefined && total > limits.maxBytes) {
      res.destroy();
      fail(`the server says ${mb(total)}, more than the cap of ${mbCap}; raise it to fetch this file`);
    }
    // A model's file of unknown size has the smaller cap (MODEL_FILE_MAX_MB says why); the error
    // names the setting that raises it, the one way past it.
    const unknownCap = job.model ? Math.min(limits.maxBytes, limits.modelMaxBytes) : limits.maxBytes;
    const cap =
      total !== undefined
        ? {
            bytes: total,
            says: `the ${mb(total)} its ${Number.isFinite(length) ? "Content-Length" : "X-Linked-Size"} gives`,
            raise: "",
          }
        : {
            bytes: unknownCap,
            says: `the cap of ${mb(unknownCap)} (STITCHLAB_DOWNLOAD_MAX_MB) for a ${job.model ? "model's file" : "file"} whose size the server does not give`,
            raise: `; set STITCHLAB_DOWNLOAD_MAX_MB (megabytes) above ${Math.round(unknownCap / 1e6)} to take a larger file`,
          };
    const bar = display({ label, total, cap: cap.bytes });
    const sha = createHash("sha256");
    let got = 0;
    const tap = new Transform({
      transform(chunk: Buffer, _enc, done) {
        sha.update(chunk);
        got += chunk.byteLength;
        if (got > cap.bytes) {
          done(
            new DownloadError(
              `${url}: more bytes than ${cap.says}: stopped; nothing was kept${cap.raise}`,
              "failed",
              url,
            ),
          );
          return;
        }
        bar.tick(got);
        done(null, chunk);
      },
    });
    // The minimum rate, over consecutive windows: a trickle that keeps the socket awake is stopped.
    let before = 0;
    const slow = limits.minBytesPerSecond
      ? setInterval(() => {
          const need = (limits.minBytesPerSecond * limits.rateWindowMs) / 1000;
          if (got - before < need)
            tap.destroy(
              new DownloadError(
                `${url}: ${mb(got - before)} in the last ${limits.rateWindowMs / 1000} s, slower than the minimum ${mb(limits.minBytesPerSecond)}/s (STITCHLAB_DOWNLOAD_MIN_RATE, over STITCHLAB_DOWNLOAD_RATE_WINDOW): stopped after ${got} of ${total ?? "?"} bytes; nothing was kept`,
                "failed",
                url,
              ),
            );
          before = got;
        }, limits.rateWindowMs)
      : undefined;
    const out = createWriteStream(tmp, { flags: "wx" });
    try {
      await pipeline(res, tap, out);
    } catch (e) {
      bar.stopped();
      if (e instanceof DownloadError) throw e;
      const code = (e as NodeJS.ErrnoException).code;
      fail(
        `the connection dropped after ${got} of ${total ?? "?"} bytes (${code ?? (e as Error).message}); nothing was kept`,
      );
    } finally {
      clearInterval(slow);
    }
    bar.received(got);
    if (Number.isFinite(length) && got !== length)
      fail(`the connection ended after ${got} of ${length} bytes (Content-Length); nothing was kept`);
    if (linkedSize !== undefined && got !== linkedSize)
      fail(`got ${got} bytes, but the hub's X-Linked-Size says ${linkedSize}; nothing was kept`);
    const fd = openSync(tmp, "r+");
    fsyncSync(fd);
    closeSync(fd);
    const digest = sha.digest("hex");
    const verified: string[] = [];
    if (job.sha256 !== undefined) {
      if (digest !== job.sha256.toLowerCase())
        fail(`hash mismatch: SHA-256 ${digest}, expected ${job.sha256}; nothing was kept`);
      verified.push("SHA-256");
    }
    if (job.sha256Prefix !== undefined) {
      // torch.hub's check_hash: the digest must start with the hex digits of the file's name.
      if (!digest.startsWith(job.sha256Prefix.toLowerCase()))
        fail(
          `hash mismatch: SHA-256 ${digest} does not start with ${job.sha256Prefix}, the hash its file name gives (as torch.hub checks it); nothing was kept`,
        );
      verified.push(`SHA-256 prefix ${job.sha256Prefix} (file name)`);
    }
    if (job.hf && etag !== undefined) {
      if (/^[0-9a-f]{64}$/.test(etag)) {
        if (digest !== etag)
          fail(
            `hash mismatch: SHA-256 ${digest}, but the hub's ETag (the file's SHA-256) is ${etag}; nothing was kept`,
          );
        verified.push("SHA-256 = the hub's ETag");
      } else if (/^[0-9a-f]{40}$/.test(etag)) {
        const blob = gitBlobSha1(readFileSync(tmp));
        if (blob !== etag)
          fail(
            `hash mismatch: git blob SHA-1 ${blob}, but the hub's ETag (the file's git SHA-1) is ${etag}; nothing was kept`,
          );
        verified.push("git blob SHA-1 = the hub's ETag");
      } else if (!dest.endsWith(".safetensors")) {
        fail(
          `the hub's ETag ${etag} is neither a SHA-256 (a file in git-lfs) nor a git SHA-1: the file cannot be verified; nothing was kept`,
        );
      }
    }
    if (dest.endsWith(".safetensors")) {
      const why = safetensorsProblem(tmp);
      if (why) fail(`not a whole safetensors file: ${why}; nothing was kept`);
      verified.push("safetensors structure");
    }
    renameSync(tmp, dest);
    bar.done(got, verified);
    return {
      url,
      from: hops[hops.length - 1].url,
      path: dest,
      bytes: got,
      sha256: digest,
      ...(etag !== undefined ? { etag } : {}),
      ...(commit !== undefined ? { commit } : {}),
      verified,
    };
  } catch (e) {
    rmSync(tmp, { force: true });
    if (e instanceof DownloadError) throw e;
    throw new DownloadError(`${url}: ${(e as Error).message}; nothing was kept`, "failed", url);
  } finally {
    inFlight.delete(tmp);
  }
}

/** The bounds a job sets itself (undefined fields left to the environment's). */
const definedOf = (job: DownloadJob): Partial<DownloadLimits> =>
  Object.fromEntries(
    (["maxBytes", "modelMaxBytes", "minBytesPerSecond", "rateWindowMs", "headerTimeoutMs"] as const)
      .filter((k) => job[k] !== undefined)
      .map((k) => [k, job[k]]),
  );

const here = fileURLToPath(import.meta.url);

/**
 * download(job), synchronously: in a child Node process running this file, whose stderr (the
 * progress line) is this process's. Throws the child's DownloadError.
 */
export function downloadSync(job: DownloadJob): DownloadResult {
  const node = here.endsWith(".ts") ? ["--import", import.meta.resolve("tsx"), here] : [here];
  const r = spawnSync(process.execPath, [...node, JSON.stringify(job)], {
    stdio: ["ignore", "pipe", "inherit"],
    encoding: "utf8",
    maxBuffer: 1 << 20,
  });
  const last = (r.stdout ?? "").trim().split("\n").pop() ?? "";
  let answer: { ok: true; result: DownloadResult } | { ok: false; message: string; kind: DownloadFailure };
  try {
    answer = JSON.parse(last);
  } catch {
    rmStalePartials(job.dest);
    throw new DownloadError(
      `${job.url}: the download process ended without an answer (${r.error?.message ?? (r.signal ? `signal ${r.signal}` : `exit code ${r.status}`)}); nothing was kept`,
      "failed",
      job.url,
    );
  }
  if (!answer.ok) throw new DownloadError(answer.message, answer.kind, job.url);
  return answer.result;
}

/** Temporary files of downloads in flight in this process, removed if it is interrupted. */
const inFlight = new Set<string>();

/**
 * Removes the temporary files beside dest that a download process killed outright left behind
 * (their names hold its pid; one still running is left alone).
 */
function rmStalePartials(dest: string): void {
  const prefix = `.${basename(dest)}.`;
  let names: string[] = [];
  try {
    names = readdirSync(dirname(dest));
  } catch {
    return;
  }
  for (const f of names) {
    const pid = Number(f.slice(prefix.length).split(".")[0]);
    if (!f.startsWith(prefix) || !f.endsWith(".part") || !Number.isInteger(pid)) continue;
    let alive = pid === process.pid;
    try {
      if (!alive) process.kill(pid, 0);
      alive = true;
    } catch (e) {
      alive = (e as NodeJS.ErrnoException).code === "EPERM";
    }
    if (!alive) rmSync(join(dirname(dest), f), { force: true });
  }
}

// The child: `node io/download.js JOB_JSON` prints one JSON line, the result or the error.
if (process.argv[1] && pathToFileURL(process.argv[1]).href === import.meta.url) {
  const job = JSON.parse(process.argv[2] ?? "{}") as DownloadJob;
  // Interrupted (Ctrl-C reaches the whole process group): the partial file goes with it.
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const)
    process.on(signal, () => {
      for (const t of inFlight) rmSync(t, { force: true });
      process.exit(128 + (signal === "SIGINT" ? 2 : signal === "SIGTERM" ? 15 : 1));
    });
  download(job).then(
    (result) => {
      process.stdout.write(`${JSON.stringify({ ok: true, result })}\n`);
    },
    (e: unknown) => {
      const kind = e instanceof DownloadError ? e.kind : "failed";
      process.stdout.write(`${JSON.stringify({ ok: false, message: (e as Error).message, kind })}\n`);
      process.exitCode = 1;
    },
  );
}
