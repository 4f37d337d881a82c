// findings/: what turns result rows into statements, with no libtorch and no files of a run: the
// replicate summary and its intervals (summary.ts), the rows it reads (rows.ts), each pair against
// its nulls (chance.ts), the grounding study (grounding.ts), compare's verdicts (verdict.ts), the
// reading, its warnings and the pair contrasts (reading.ts), and the fast protocol's measured
// distance from the settled one (protocol-distance.ts). experiments/ plans and runs; report/ draws.
export * from "./chance.js";
export * from "./grounding.js";
export * from "./reading.js";
export type { IriPreview, ModelRow, StitchMode, StitchRow } from "./rows.js";
export * from "./summary.js";
export * from "./verdict.js";
