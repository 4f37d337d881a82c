// A minimal zip reader for the archives torch.save writes: entries are found through the
// central directory and may be stored (PyTorch's way) or deflated (if someone re-zipped one).
import { inflateRawSync } from "node:zlib";

export interface ZipEntry {
  name: string;
  data(): Uint8Array;
}

const EOCD = 0x06054b50;
const EOCD64_LOCATOR = 0x07064b50;
const CENTRAL = 0x02014b50;
const LOCAL = 0x04034b50;

function findEocd(buf: Buffer): number {
  // The end-of-central-directory record sits in the last 64 KiB + 22 bytes (comment at most 64 KiB).
  for (let i = buf.byteLength - 22; i >= Math.max(0, buf.byteLength - 65557); i--) {
    if (buf.readUInt32LE(i) === EOCD) return i;
  }
  throw new Error("no zip end-of-central-directory record (truncated or not a zip file)");
}

/** Lists the entries of a zip archive held in memory. Throws with a reason on a damaged archive. */
export function readZip(buf: Buffer): Map<string, ZipEntry> {
  const eocd = findEocd(buf);
  let count = buf.readUInt16LE(eocd + 10);
  let dirOffset = buf.readUInt32LE(eocd + 16);
  if (eocd >= 20 && buf.readUInt32LE(eocd - 20) === EOCD64_LOCATOR) {
    // zip64: PyTorch writes it for archives over 4 GiB.
    const rec = Number(buf.readBigUInt64LE(eocd - 20 + 8));
    count = Number(buf.readBigUInt64LE(rec + 32));
    dirOffset = Number(buf.readBigUInt64LE(rec + 48));
  }
  const entries = new Map<string, ZipEntry>();
  let p = dirOffset;
  for (let i = 0; i < count; i++) {
    if (p + 46 > buf.byteLength || buf.readUInt32LE(p) !== CENTRAL) throw new Error("damaged zip central directory");
    const method = buf.readUInt16LE(p + 10);
    let compressed = buf.readUInt32LE(p + 20);
    let size = buf.readUInt32LE(p + 24);
    const nameLen = buf.readUInt16LE(p + 28);
    const extraLen = buf.readUInt16LE(p + 30);
    const commentLen = buf.readUInt16LE(p + 32);
    let local = buf.readUInt32LE(p + 42);
    const name = buf.toString("utf8", p + 46, p + 46 + nameLen);
    // zip64 extended information: the 64-bit values replace those that read 0xffffffff, in order.
    let x = p + 46 + nameLen;
    const xEnd = x + extraLen;
    while (x + 4 <= xEnd) {
      const id = buf.readUInt16LE(x);
      const len = buf.readUInt16LE(x + 2);
      if (id === 1) {
        let q = x + 4;
        if (size === 0xffffffff) {
          size = Number(buf.readBigUInt64LE(q));
          q += 8;
        }
        if (compressed === 0xffffffff) {
          compressed = Number(buf.readBigUInt64LE(q));
          q += 8;
        }
        if (local === 0xffffffff) local = Number(buf.readBigUInt64LE(q));
      }
      x += 4 + len;
    }
    const localOffset = local;
    const csize = compressed;
    const usize = size;
    entries.set(name, {
      name,
      data(): Uint8Array {
        if (buf.readUInt32LE(localOffset) !== LOCAL) throw new Error(`damaged zip entry ${name}`);
        const start = localOffset + 30 + buf.readUInt16LE(localOffset + 26) + buf.readUInt16LE(localOffset + 28);
        if (start + csize > buf.byteLength) throw new Error(`zip entry ${name} runs past the end of the file`);
        const raw = buf.subarray(start, start + csize);
        if (method === 0) return raw;
        if (method === 8) {
          const out = inflateRawSync(raw);
          if (out.byteLength !== usize) throw new Error(`zip entry ${name} inflated to the wrong size`);
          return out;
        }
        throw new Error(`zip entry ${name} uses unsupported compression method ${method}`);
      },
    });
    p += 46 + nameLen + extraLen + commentLen;
  }
  return entries;
}
