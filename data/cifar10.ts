// CIFAR-10 in its official binary format: data_batch_1..5.bin (train) and test_batch.bin (test),
// each 10,000 records of 1 label byte + 3,072 pixel bytes (the R, G and B planes of a 32x32
// image, row-major), which is already the channels-first layout we keep. Read from the extracted
// folder cifar-10-batches-bin/ or from cifar-10-binary.tar.gz itself.
import { existsSync } from "node:fs";
import { basename, join } from "node:path";
import { type Dataset, fromBytes, type Split } from "./dataset.js";
import { DataError, isDirectory, isGzip, readDataFile } from "./files.js";
import { readTar } from "./tar.js";

export const CIFAR10_CLASSES = [
  "airplane",
  "automobile",
  "bird",
  "cat",
  "deer",
  "dog",
  "frog",
  "horse",
  "ship",
  "truck",
];

export const CIFAR10_HOW_TO_GET =
  "Download the binary version, cifar-10-binary.tar.gz, from the official CIFAR-10 site " +
  "(https://www.cs.toronto.edu/~kriz/cifar.html) and pass its path, or the folder it unpacks to " +
  "(cifar-10-batches-bin/), or a folder holding either, as the root (--root)";

const RECORD = 1 + 3 * 32 * 32;
const PER_FILE = 10000;
const ARCHIVE = "cifar-10-binary.tar.gz";
const FOLDER = "cifar-10-batches-bin";

function batchFiles(split: Split): string[] {
  return split === "train" ? [1, 2, 3, 4, 5].map((i) => `data_batch_${i}.bin`) : ["test_batch.bin"];
}

/** Where the files come from: a folder of .bin files, or the entries of the archive. */
type Source = { kind: "folder"; dir: string } | { kind: "archive"; path: string; entries: Map<string, Uint8Array> };

function openSource(root: string): Source {
  if (!existsSync(root)) throw new DataError(root, "not found", CIFAR10_HOW_TO_GET);
  if (isDirectory(root)) {
    if (existsSync(join(root, "test_batch.bin")) || existsSync(join(root, "data_batch_1.bin")))
      return { kind: "folder", dir: root };
    if (isDirectory(join(root, FOLDER))) return { kind: "folder", dir: join(root, FOLDER) };
    if (existsSync(join(root, ARCHIVE))) return openSource(join(root, ARCHIVE));
    throw new DataError(
      root,
      `holds neither the CIFAR-10 batches (data_batch_1.bin ... test_batch.bin), nor ${FOLDER}/, nor ${ARCHIVE}`,
      CIFAR10_HOW_TO_GET,
    );
  }
  const raw = readDataFile(root, CIFAR10_HOW_TO_GET); // gunzipped here when gzip
  let entries: Map<string, Uint8Array>;
  try {
    entries = new Map(readTar(raw).map((e) => [basename(e.name), e.data]));
  } catch (e) {
    throw new DataError(root, `is not a readable tar archive (${(e as Error).message})`, CIFAR10_HOW_TO_GET);
  }
  if (!isGzip(raw) && entries.size === 0)
    throw new DataError(root, `expected ${ARCHIVE} (a gzipped tar archive) or a folder`, CIFAR10_HOW_TO_GET);
  return { kind: "archive", path: root, entries };
}

function readBatch(src: Source, file: string): { bytes: Uint8Array; where: string } {
  if (src.kind === "folder") {
    const p = join(src.dir, file);
    return { bytes: readDataFile(p, CIFAR10_HOW_TO_GET), where: p };
  }
  const where = `${src.path} (entry ${FOLDER}/${file})`;
  const bytes = src.entries.get(file);
  if (!bytes) throw new DataError(where, "entry missing from the archive", CIFAR10_HOW_TO_GET);
  return { bytes, where };
}

function readClasses(src: Source): string[] {
  let text: string | null = null;
  if (src.kind === "folder") {
    const p = join(src.dir, "batches.meta.txt");
    if (existsSync(p)) text = readDataFile(p, CIFAR10_HOW_TO_GET).toString("utf8");
  } else {
    const b = src.entries.get("batches.meta.txt");
    if (b) text = Buffer.from(b).toString("utf8");
  }
  const names = text
    ?.split(/\r?\n/)
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  // The meta file is informative only; the label bytes define the classes, so fall back quietly.
  return names && names.length === 10 ? names : CIFAR10_CLASSES;
}

/** Reads a CIFAR-10 split (the first `limit` images when given) from a folder or the .tar.gz. */
export function readCifar10(root: string, split: Split, limit?: number): Dataset {
  const src = openSource(root);
  const files = batchFiles(split);
  const wanted = Math.min(limit ?? Number.POSITIVE_INFINITY, files.length * PER_FILE);
  const n = wanted;
  const pixels = new Uint8Array(n * (RECORD - 1));
  const labels = new Uint8Array(n);
  let i = 0;
  for (const file of files) {
    if (i >= n) break;
    const { bytes, where } = readBatch(src, file);
    if (bytes.length !== PER_FILE * RECORD)
      throw new DataError(
        where,
        `${bytes.length} bytes, expected ${PER_FILE * RECORD} bytes (${PER_FILE} records of ${RECORD}); ` +
          "the file is truncated or not a CIFAR-10 binary batch (the Python-pickle version is not read)",
        CIFAR10_HOW_TO_GET,
      );
    const take = Math.min(PER_FILE, n - i);
    for (let r = 0; r < take; r++, i++) {
      const off = r * RECORD;
      const label = bytes[off];
      if (label > 9)
        throw new DataError(where, `record ${r} has label byte ${label}, expected 0..9`, CIFAR10_HOW_TO_GET);
      labels[i] = label;
      pixels.set(bytes.subarray(off + 1, off + RECORD), i * (RECORD - 1));
    }
  }
  return fromBytes(pixels, labels, [n, 3, 32, 32], readClasses(src), `cifar10/${split}`);
}
