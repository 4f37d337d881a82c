// A minimal reader of tar archives (POSIX ustar and GNU long names), enough to take the
// CIFAR-10 batches out of cifar-10-binary.tar.gz without unpacking it or adding a dependency.

export interface TarEntry {
  name: string;
  data: Uint8Array; // a view into the archive buffer, not a copy
}

function field(b: Uint8Array, off: number, len: number): string {
  let end = off;
  while (end < off + len && b[end] !== 0) end++;
  return Buffer.from(b.buffer, b.byteOffset + off, end - off).toString("utf8");
}

function octal(b: Uint8Array, off: number, len: number): number {
  // GNU base-256 for sizes >= 8 GiB: high bit of the first byte set.
  if (b[off] & 0x80) {
    let v = 0;
    for (let i = off + 1; i < off + len; i++) v = v * 256 + b[i];
    return v;
  }
  const s = field(b, off, len).trim();
  return s === "" ? 0 : Number.parseInt(s, 8);
}

/** The regular files of a tar archive held in memory; throws on a truncated or malformed archive. */
export function readTar(archive: Uint8Array): TarEntry[] {
  const out: TarEntry[] = [];
  let off = 0;
  let longName: string | null = null;
  while (off + 512 <= archive.length) {
    const h = archive.subarray(off, off + 512);
    if (h.every((x) => x === 0)) break; // end-of-archive marker
    const size = octal(h, 124, 12);
    if (!Number.isFinite(size)) throw new Error(`malformed tar header at byte ${off}`);
    const type = String.fromCharCode(h[156] || 0x30);
    const magic = field(h, 257, 6);
    let name = field(h, 0, 100);
    if (magic === "ustar") {
      const prefix = field(h, 345, 155);
      if (prefix) name = `${prefix}/${name}`;
    }
    const start = off + 512;
    if (start + size > archive.length)
      throw new Error(
        `tar entry '${name}' needs ${size} bytes but the archive ends ${archive.length - start} bytes later`,
      );
    const data = archive.subarray(start, start + size);
    if (type === "L") longName = field(data, 0, data.length);
    else if (type === "0" || type === "\0" || type === "7") {
      out.push({ name: longName ?? name, data });
      longName = null;
    } else longName = null; // directories, links, pax headers: not needed here
    off = start + Math.ceil(size / 512) * 512;
  }
  return out;
}
