// How far the fast protocol (the demo's and compare's defaults) stands from the settled one, as
// the protocol study measured it (`npm run bench -- protocol`, bench/protocol.ts: every cut grown
// to its largest at once, 768 IRIs and images per set and 1,920 steps of T). The study's record,
// bench/results/protocol-SCALE.json, is read where the answer is given, so the line a user reads
// is the measured one; a record whose shipped settings are no longer the defaults is not used,
// and the line says the defaults are unchecked instead.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import { canonical, repoRoot } from "../io/files.js";

/** What the study's record holds that the line needs. */
export interface ProtocolRecord {
  scale: string;
  replicates: number;
  /** The settings the "shipped" setting ran: the scale's defaults when the study ran. */
  shipped?: { iris: Record<string, unknown>; stitch: Record<string, unknown> };
  distances: { setting: string; maxAbs: number; at: string; differ: string[] }[];
}

/** The record of one scale of the study, or null where none was written. */
export function protocolRecord(scale: "demo" | "full", root = repoRoot): ProtocolRecord | null {
  const path = join(root, "bench", "results", `protocol-${scale}.json`);
  return existsSync(path) ? (JSON.parse(readFileSync(path, "utf8")) as ProtocolRecord) : null;
}

/**
 * The shipped setting's distance from the settled one in a record whose shipped settings are
 * `current` (the defaults now), or null: no record, no shipped or settled run in it, or
 * defaults changed since.
 */
export function shippedDistance(
  record: ProtocolRecord | null,
  current: { iris: Record<string, unknown>; stitch: Record<string, unknown> },
): ProtocolRecord["distances"][number] | null {
  if (!record?.shipped || canonical(record.shipped) !== canonical(current)) return null;
  return record.distances.find((d) => d.setting === "shipped") ?? null;
}

/** The distance in words: "within 0.04 of the settled protocol ..., every verdict the same". */
export function distanceWords(d: ProtocolRecord["distances"][number], on: string): string {
  const verdicts = d.differ.length
    ? `${d.differ.length === 1 ? "1 verdict differs" : `${d.differ.length} verdicts differ`} (${d.differ.join("; ")})`
    : "every verdict the same";
  return `within ${d.maxAbs.toFixed(3)} of the settled protocol (768 IRIs and images per set, T 1,920 steps, IRIs from noise) on ${on} (largest at ${d.at}), ${verdicts}`;
}

type Settings = { iris: Record<string, unknown>; stitch: Record<string, unknown> };

const STUDY = "npm run bench -- protocol";

/** The demo's IRI and stitching settings as presets/demo.yaml ships them. */
export function demoSettings(root = repoRoot): Settings {
  const demo = parseYaml(readFileSync(join(root, "presets", "demo.yaml"), "utf8")) as Settings;
  return { iris: demo.iris, stitch: demo.stitch };
}

/** The demo's plan line: its defaults' distance from the settled protocol on its own pairs. */
export function demoProtocolLine(root = repoRoot): string {
  const d = shippedDistance(protocolRecord("demo", root), demoSettings(root));
  return d
    ? `  protocol   fast: ${distanceWords(d, "the demo's pairs (three fronts each)")}`
    : `  protocol   fast: these defaults are not yet checked against the settled protocol (${STUDY} --scale demo)`;
}

/**
 * compare's plan line at the fast protocol's sizes: the defaults' distance from the settled
 * protocol at full width where the study ran there with them; else that it did not, and the
 * demo's recipe's distance on its pairs (compare's recipe but T's rate and its replicates).
 */
export function compareProtocolLine(compare: Settings, root = repoRoot): string {
  const full = shippedDistance(protocolRecord("full", root), compare);
  if (full) return `  protocol   fast: ${distanceWords(full, "two full-width ResNet-18s of other seeds")}`;
  const small = shippedDistance(protocolRecord("demo", root), demoSettings(root));
  return (
    `  protocol   fast: not checked against the settled protocol at full width (${STUDY} --scale full)` +
    (small ? `; the demo's recipe (T's rate aside) stands ${distanceWords(small, "the demo's width-1/8 pairs")}` : "")
  );
}
