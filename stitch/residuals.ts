// What an IRI's relative residual means, in a module without tensors: the report reads it too.

/**
 * An IRI is good at a relative residual of at most this: A represents x' within a tenth of its
 * representation of x. A convention of stitchlab's reports, not the method's (neither the paper nor
 * its code names such a number); what decides a verdict is the set's mean (findings/reading.ts
 * IRI_VERDICT_MAX_RESIDUAL), measured. Each set records the share of its images at or below
 * it (ResidualSummary.below01), and the report shows a previewed image's residual in red above it.
 */
export const GOOD_IRI_RESIDUAL = 0.1;
