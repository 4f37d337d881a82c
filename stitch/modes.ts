// The stitching modes in a reader's words, so that the report, the reading and the commands word a
// mode alike. A leaf with no imports: the report (which loads without libtorch) reads it from here.

/** The legend's words for the modes: "iris" (the data's and the CLI's name) is shown as "invariance-aware". */
export const MODE_LABELS: Record<string, string> = { standard: "standard", iris: "invariance-aware" };

/** A mode in a reader's words: "standard" or "invariance-aware". */
export const stitchModeWords = (mode: string): string => MODE_LABELS[mode] ?? mode;
