// A minimal zip reader for the archives torch.save writes: entries are found through the
// central directory and may be stored (PyTorch's way) or deflated (if someone re-zipped one).
// Every offset and length read from the file is checked against the bytes there before use,
// so a damaged or crafted archive gives an error that says what is wrong, never a read
// elsewhere (Buffer's reads throw a bare RangeError past the end; toString and subarray clamp).
// The bytes are checked too, as Python's zipfile does: each entry's local header (or the data
// descriptor after its data, which torch.save writes) must give the central directory's CRC-32
// and sizes, and an entry's data, when read, must have that CRC-32. A stored entry has no other
// check: 4 KB flipped inside a weight's storage would otherwise load as weights (issue 25).
import { constants } from "node:buffer";
import * as zlib from "node:zlib";

export interface ZipEntry {
  name: string;
  /** The entry's bytes, checked against the CRC-32 the central directory gives (an Error if they differ). */
  data(): Uint8Array;
}

const EOCD = 0x06054b50;
const EOCD64 = 0x06064b50;
const EOCD64_LOCATOR = 0x07064b50;
const CENTRAL = 0x02014b50;
const LOCAL = 0x04034b50;
const EOCD_SIZE = 22;
const CENTRAL_SIZE = 46;
const LOCAL_SIZE = 30;
const DESCRIPTOR = 0x08074b50;

/** The CRC-32 table of the zip format's polynomial (0xedb88320), for Node versions without zlib.crc32. */
let crcTable: Uint32Array | undefined;
function crc32Js(b: Uint8Array): number {
  if (!crcTable) {
    crcTable = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      crcTable[n] = c >>> 0;
    }
  }
  let c = ~0;
  for (let i = 0; i < b.length; i++) c = crcTable[(c ^ b[i]) & 0xff] ^ (c >>> 8);
  return ~c >>> 0;
}
// zlib.crc32 is native (Node 20.15 and later); the same values.
const nativeCrc32 = (zlib as { crc32?: (data: Uint8Array) => number }).crc32;
/** The CRC-32 of bytes, as zip records it. */
export const crc32 = (b: Uint8Array): number => (nativeCrc32 ? nativeCrc32(b) >>> 0 : crc32Js(b));
const hex = (n: number) => `0x${n.toString(16).padStart(8, "0")}`;

const damaged = (why: string) => new Error(`damaged zip archive: ${why}`);

/** Where the end-of-central-directory record starts. */
function findEocd(buf: Buffer): number {
  // The record is the last thing in the file but for a comment of at most 64 KiB. A record whose
  // comment ends exactly at the end of the file wins over a signature that lies inside a comment;
  // failing that, the last one whose comment fits in the file (trailing bytes are tolerated).
  let fits = -1;
  let last = -1;
  for (let i = buf.byteLength - EOCD_SIZE; i >= Math.max(0, buf.byteLength - EOCD_SIZE - 0xffff); i--) {
    if (buf.readUInt32LE(i) !== EOCD) continue;
    const end = i + EOCD_SIZE + buf.readUInt16LE(i + 20);
    if (end === buf.byteLength) return i;
    if (last < 0) last = i;
    if (fits < 0 && end <= buf.byteLength) fits = i;
  }
  if (fits >= 0) return fits;
  if (last >= 0)
    throw damaged(
      `the end record at byte ${last} gives a ${buf.readUInt16LE(last + 20)}-byte comment, but only ${buf.byteLength - last - EOCD_SIZE} bytes follow it`,
    );
  throw new Error("no zip end-of-central-directory record (truncated or not a zip file)");
}

/** Lists the entries of a zip archive held in memory. Throws with a reason on a damaged archive. */
export function readZip(buf: Buffer): Map<string, ZipEntry> {
  const eocd = findEocd(buf);
  let count = buf.readUInt16LE(eocd + 10);
  let dirSize = buf.readUInt32LE(eocd + 12);
  let dirOffset = buf.readUInt32LE(eocd + 16);
  // The central directory ends where the record that describes it begins.
  let dirLimit = eocd;
  if (eocd >= 20 && buf.readUInt32LE(eocd - 20) === EOCD64_LOCATOR) {
    // zip64: PyTorch writes it for archives over 4 GiB.
    const rec = Number(buf.readBigUInt64LE(eocd - 20 + 8));
    if (rec + 56 > eocd - 20 || buf.readUInt32LE(rec) !== EOCD64)
      throw damaged(`the zip64 locator points to byte ${rec}, where there is no zip64 end record`);
    count = Number(buf.readBigUInt64LE(rec + 32));
    dirSize = Number(buf.readBigUInt64LE(rec + 40));
    dirOffset = Number(buf.readBigUInt64LE(rec + 48));
    dirLimit = rec;
  }
  if (count === 0) throw new Error("the zip archive holds no entries");
  const dirEnd = dirOffset + dirSize;
  if (dirEnd > dirLimit)
    throw damaged(
      `the central directory (${dirSize} bytes at byte ${dirOffset}) runs past its end record at byte ${dirLimit}`,
    );
  // Each entry's header takes 46 bytes at least, so a count the directory cannot hold is found before any loop.
  if (count * CENTRAL_SIZE > dirSize)
    throw damaged(`a central directory of ${dirSize} bytes cannot hold the ${count} entries it claims`);

  const entries = new Map<string, ZipEntry>();
  let p = dirOffset;
  for (let i = 0; i < count; i++) {
    if (p + CENTRAL_SIZE > dirEnd || buf.readUInt32LE(p) !== CENTRAL)
      throw damaged(`entry ${i} of the central directory has no header at byte ${p}`);
    const flags = buf.readUInt16LE(p + 8);
    const method = buf.readUInt16LE(p + 10);
    const crc = buf.readUInt32LE(p + 16);
    let compressed = buf.readUInt32LE(p + 20);
    let size = buf.readUInt32LE(p + 24);
    const nameLen = buf.readUInt16LE(p + 28);
    const extraLen = buf.readUInt16LE(p + 30);
    const commentLen = buf.readUInt16LE(p + 32);
    let local = buf.readUInt32LE(p + 42);
    const next = p + CENTRAL_SIZE + nameLen + extraLen + commentLen;
    if (next > dirEnd)
      throw damaged(`entry ${i} of the central directory (at byte ${p}) runs past the directory's end at ${dirEnd}`);
    const name = buf.toString("utf8", p + CENTRAL_SIZE, p + CENTRAL_SIZE + nameLen);
    if (flags & 1) throw new Error(`zip entry ${name} is encrypted`);
    // zip64 extended information: the 64-bit values replace those that read 0xffffffff, in order.
    let x = p + CENTRAL_SIZE + nameLen;
    const xEnd = x + extraLen;
    while (x + 4 <= xEnd) {
      const id = buf.readUInt16LE(x);
      const fieldEnd = x + 4 + buf.readUInt16LE(x + 2);
      if (fieldEnd > xEnd) throw damaged(`zip entry ${name} has an extra field that runs past its header`);
      if (id === 1) {
        let q = x + 4;
        const wide = (what: string): number => {
          if (q + 8 > fieldEnd) throw damaged(`zip entry ${name}'s zip64 field lacks its ${what}`);
          const v = Number(buf.readBigUInt64LE(q));
          q += 8;
          return v;
        };
        if (size === 0xffffffff) size = wide("size");
        if (compressed === 0xffffffff) compressed = wide("compressed size");
        if (local === 0xffffffff) local = wide("offset");
      }
      x = fieldEnd;
    }
    // The local header and the data after it lie before the central directory.
    if (local + LOCAL_SIZE > dirOffset || buf.readUInt32LE(local) !== LOCAL)
      throw damaged(`zip entry ${name} has no local header at byte ${local}`);
    const start = local + LOCAL_SIZE + buf.readUInt16LE(local + 26) + buf.readUInt16LE(local + 28);
    if (start + compressed > dirOffset)
      throw damaged(
        `zip entry ${name}'s ${compressed} bytes at byte ${start} run past the entries' end at byte ${dirOffset}`,
      );
    if (method === 0 && compressed !== size)
      throw damaged(`zip entry ${name} is stored, yet its sizes differ (${compressed} and ${size} bytes)`);
    checkLocalRecord(buf, name, local, start, dirOffset, { crc, compressed, size });
    const csize = compressed;
    const usize = size;
    const inflate = (): Uint8Array => {
      const raw = buf.subarray(start, start + csize);
      if (method === 0) return raw;
      if (method === 8) {
        if (usize > constants.MAX_LENGTH) throw new Error(`zip entry ${name} claims ${usize} bytes, too many to hold`);
        let out: Buffer;
        try {
          // Bounded by the stated size, so that a small entry cannot inflate without end.
          out = zlib.inflateRawSync(raw, { maxOutputLength: Math.max(1, usize) });
        } catch (e) {
          throw damaged(`zip entry ${name} does not inflate to its ${usize} bytes (${(e as Error).message})`);
        }
        if (out.byteLength !== usize) throw damaged(`zip entry ${name} inflated to the wrong size`);
        return out;
      }
      throw new Error(`zip entry ${name} uses unsupported compression method ${method}`);
    };
    // Checked once, on the first read (a stored entry is a view of the file: nothing is copied).
    let checked: Uint8Array | undefined;
    entries.set(name, {
      name,
      data(): Uint8Array {
        if (checked) return checked;
        const out = inflate();
        const got = crc32(out);
        if (got !== crc)
          throw damaged(`zip entry ${name}: its bytes have CRC-32 ${hex(got)}, the central directory says ${hex(crc)}`);
        checked = out;
        return out;
      },
    });
    p = next;
  }
  return entries;
}

/**
 * An entry's local record against the central directory: the CRC-32 and sizes in its local
 * header, or, when flag bit 3 is set (torch.save's way: the header holds zeros), in the data
 * descriptor after its data (its signature optional; 8-byte sizes when the local header has a
 * zip64 field). A disagreement means the archive was damaged or patched.
 */
function checkLocalRecord(
  buf: Buffer,
  name: string,
  local: number,
  start: number,
  limit: number,
  central: { crc: number; compressed: number; size: number },
): void {
  const flags = buf.readUInt16LE(local + 6);
  const compare = (where: string, crc: number, compressed: number, size: number) => {
    if (crc !== central.crc)
      throw damaged(
        `zip entry ${name}: its ${where} says CRC-32 ${hex(crc)}, the central directory ${hex(central.crc)}`,
      );
    if (compressed !== central.compressed)
      throw damaged(
        `zip entry ${name}: its ${where} says ${compressed} bytes, the central directory ${central.compressed}`,
      );
    if (size !== central.size)
      throw damaged(
        `zip entry ${name}: its ${where} says ${size} bytes uncompressed, the central directory ${central.size}`,
      );
  };
  if (!(flags & 8)) {
    // A zip64 local header holds 0xffffffff here and the sizes in its extra field.
    const csize = buf.readUInt32LE(local + 18);
    const usize = buf.readUInt32LE(local + 22);
    compare(
      "local header",
      buf.readUInt32LE(local + 14),
      csize === 0xffffffff ? central.compressed : csize,
      usize === 0xffffffff ? central.size : usize,
    );
    return;
  }
  // Does the local header carry a zip64 field (id 1)? Then the descriptor's sizes take 8 bytes.
  let zip64 = false;
  const extraStart = local + LOCAL_SIZE + buf.readUInt16LE(local + 26);
  const extraEnd = extraStart + buf.readUInt16LE(local + 28);
  // (The extra field lies before the data, which readZip has checked lies before `limit`.)
  for (let x = extraStart; x + 4 <= extraEnd; x += 4 + buf.readUInt16LE(x + 2))
    if (buf.readUInt16LE(x) === 1) zip64 = true;
  let d = start + central.compressed;
  const wide = zip64 ? 8 : 4;
  if (d + 4 <= limit && buf.readUInt32LE(d) === DESCRIPTOR) d += 4;
  if (d + 4 + 2 * wide > limit)
    throw damaged(`zip entry ${name}'s data descriptor at byte ${d} runs past the entries' end at byte ${limit}`);
  const read = (at: number) => (zip64 ? Number(buf.readBigUInt64LE(at)) : buf.readUInt32LE(at));
  compare("data descriptor", buf.readUInt32LE(d), read(d + 4), read(d + 4 + wide));
}
