// What T does not touch, computed once per run. When A and B are frozen in eval mode and the
// training images are the same every epoch (no augmentation, no markers painted per batch: the
// invariance-aware runs, docs/method.md "Standard versus invariance-aware"), A's features at the
// point and B's targets (logits, and the features DM and FuLA compare) are the same numbers in
// every epoch. They are computed in one pass over the training set and each step then runs only
// T, B's tail and the backward.
//
// Standard runs with batch-norm mode "adapt" cannot do this: A's running statistics move with
// every step, so A's features do too. "batch" mode cannot either (a row's features depend on
// the rest of its batch, which the shuffle changes).
//
// The rows stay in memory (on the batches' device) when they fit `budgetBytes`, else they are
// written to a scratch file and read back, row by row, for each batch.
import { closeSync, mkdtempSync, openSync, readSync, rmSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { batches, type Dataset, datasetSize, type Normalization } from "../data/index.js";
import * as torch from "../torch/index.js";
import type { ObjectiveWeights } from "./config.js";
import { type StitchTargets, stitchTargets } from "./objectives.js";
import type { StitchedModel } from "./stitched.js";

type Tensor = torch.Tensor;

/** Default in-memory budget for the frozen rows: 2 GiB, or STITCHLAB_FROZEN_CACHE_MB. */
export function defaultFrozenBudget(): number {
  const mb = Number(process.env.STITCHLAB_FROZEN_CACHE_MB);
  return Number.isFinite(mb) && mb >= 0 ? mb * 2 ** 20 : 2 * 2 ** 30;
}

export interface FrozenOptions {
  weights: ObjectiveWeights;
  normalization: Normalization;
  batchSize: number;
  device?: torch.Device;
  /** Rows above this many bytes in all go to a scratch file (default defaultFrozenBudget()). */
  budgetBytes?: number;
  /** Where the scratch file goes (default the system's temporary directory); removed on dispose. */
  scratchDir?: string;
}

/** One tensor per name, row i belonging to training image i. */
interface RowStore {
  gather(indices: Int32Array): Record<string, Tensor>;
  dispose(): void;
}

class MemoryRows implements RowStore {
  #parts: Record<string, Tensor[]> = {};
  #rows: Record<string, Tensor> = {};
  append(named: Record<string, Tensor>): void {
    for (const [k, t] of Object.entries(named)) {
      const parts = this.#parts[k] ?? [];
      parts.push(torch.keep(t.clone()));
      this.#parts[k] = parts;
    }
  }
  finish(): void {
    for (const [k, parts] of Object.entries(this.#parts)) {
      this.#rows[k] = torch.keep(torch.cat(parts, 0));
      torch.dispose(parts);
    }
    this.#parts = {};
  }
  gather(indices: Int32Array): Record<string, Tensor> {
    const idx = torch.tensor(BigInt64Array.from(indices, (i) => BigInt(i)));
    const out: Record<string, Tensor> = {};
    for (const [k, t] of Object.entries(this.#rows)) out[k] = t.indexSelect(0, idx.to(t.device));
    return out;
  }
  dispose(): void {
    for (const parts of Object.values(this.#parts)) torch.dispose(parts);
    torch.dispose(Object.values(this.#rows));
  }
}

/** What a named row set holds, in words (for an error about its file). */
const describeRows = (k: string): string =>
  k === "front" ? "A's features" : k === "logits" ? "B's logits" : `B's features at ${k.replace(/^feature:/, "")}`;

class FileRows implements RowStore {
  readonly #dir: string;
  #files: Record<string, { fd: number; path: string; shape: number[]; rowFloats: number }> = {};
  constructor(
    scratchDir: string,
    readonly device: torch.Device,
  ) {
    this.#dir = mkdtempSync(join(scratchDir, "stitchlab-frozen-"));
  }
  append(named: Record<string, Tensor>): void {
    for (const [k, t] of Object.entries(named)) {
      if (!this.#files[k]) {
        const shape = t.shape.slice(1);
        const path = join(this.#dir, `${Object.keys(this.#files).length}.f32`);
        const fd = openSync(path, "w+");
        this.#files[k] = { fd, path, shape, rowFloats: shape.reduce((a, b) => a * b, 1) };
      }
      const data = t.contiguous().to("cpu").toTypedArray() as Float32Array;
      const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
      const f = this.#files[k];
      try {
        // A write may take fewer bytes than asked: the rest follows, or the rows would shift.
        for (let off = 0; off < bytes.byteLength; ) off += writeSync(f.fd, bytes, off, bytes.byteLength - off);
      } catch (e) {
        // Node names the syscall, not the file ("ENOSPC: no space left on device, write").
        const code = (e as NodeJS.ErrnoException).code;
        throw Object.assign(
          new Error(
            `cannot write ${f.path} (the stitch's rows of ${describeRows(k)}, kept on disk above the in-memory budget, STITCHLAB_FROZEN_CACHE_MB): ${(e as Error).message}`,
          ),
          code ? { code } : {},
        );
      }
    }
  }
  gather(indices: Int32Array): Record<string, Tensor> {
    const out: Record<string, Tensor> = {};
    for (const [k, f] of Object.entries(this.#files)) {
      const rowBytes = f.rowFloats * 4;
      const buf = new Float32Array(indices.length * f.rowFloats);
      const bytes = new Uint8Array(buf.buffer);
      for (let j = 0; j < indices.length; j++)
        readSync(f.fd, bytes, j * rowBytes, rowBytes, (indices[j] as number) * rowBytes);
      const t = torch.tensor(buf, { shape: [indices.length, ...f.shape] });
      out[k] = t.to(this.device);
    }
    return out;
  }
  dispose(): void {
    for (const f of Object.values(this.#files)) closeSync(f.fd);
    this.#files = {};
    rmSync(this.#dir, { recursive: true, force: true });
  }
}

/** A's features at the point ("front") and B's targets for every training image, computed once. */
export class FrozenOutputs {
  private constructor(
    readonly store: RowStore,
    /** "memory" or "file": where the rows are kept. */
    readonly where: "memory" | "file",
    readonly bytes: number,
  ) {}

  /**
   * One pass over `train` in eval mode (the caller has set A and B so). The first batch gives
   * the row size, and so whether all rows fit the budget.
   */
  static build(s: StitchedModel, train: Dataset, opts: FrozenOptions): FrozenOutputs {
    const n = datasetSize(train);
    const budget = opts.budgetBytes ?? defaultFrozenBudget();
    // A holder, as the first batch (inside a tidy callback) picks the store.
    const made: { store: MemoryRows | FileRows | null; where: "memory" | "file"; bytes: number } = {
      store: null,
      where: "memory",
      bytes: 0,
    };
    try {
      for (const b of batches(train, {
        batchSize: opts.batchSize,
        normalization: opts.normalization,
        device: opts.device,
      })) {
        torch.tidy(() => {
          const target = stitchTargets(s, b.x, opts.weights);
          const named: Record<string, Tensor> = {
            front: s.frontFeatures(b.x, { y: b.y, indices: b.indices, split: "train" }),
            logits: target.logits,
          };
          for (const [p, f] of Object.entries(target.features)) named[`feature:${p}`] = f;
          if (!made.store) {
            const rowBytes = Object.values(named).reduce((sum, t) => sum + (t.numel() / (t.shape[0] as number)) * 4, 0);
            made.bytes = rowBytes * n;
            made.where = made.bytes <= budget ? "memory" : "file";
            made.store =
              made.where === "memory"
                ? new MemoryRows()
                : new FileRows(opts.scratchDir ?? tmpdir(), opts.device ?? torch.DEFAULT_DEVICE);
          }
          made.store.append(named);
        });
        torch.dispose(b);
      }
      if (!made.store) throw new Error("FrozenOutputs: no training images");
      if (made.store instanceof MemoryRows) made.store.finish();
      return new FrozenOutputs(made.store, made.where, made.bytes);
    } catch (e) {
      made.store?.dispose();
      throw e;
    }
  }

  /** A's features and B's targets for these training images, in this order. */
  gather(indices: Int32Array): { front: Tensor; target: StitchTargets } {
    const rows = this.store.gather(indices);
    const features: Record<string, Tensor> = {};
    for (const [k, t] of Object.entries(rows)) if (k.startsWith("feature:")) features[k.slice(8)] = t;
    return { front: rows.front as Tensor, target: { logits: rows.logits as Tensor, features } };
  }

  dispose(): void {
    this.store.dispose();
  }
}
