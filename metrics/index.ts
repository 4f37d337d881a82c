// Similarity scores for model stitching (docs/method.md, "Scores"); each module documents its
// definitions and whether larger means more similar.
export { AgreementMeter, type AgreementResult, kappa, NonFiniteLogitsError } from "./agreement.js";
export { type CkaOptions, featureMatrix, linearCka, StreamingCka } from "./cka.js";
export { excessAgreement, maxExcessAgreement } from "./excess.js";
export { rAuA } from "./raua.js";
export { FLOAT32_EPS, type WeightSpectrum, weightMatrix, weightSpectrum } from "./spectrum.js";
