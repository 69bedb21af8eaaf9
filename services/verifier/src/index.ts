/** @mesh/verifier — re-checks every grant against the world, and repairs drift by policy. */
export { startVerifier, type Verifier } from "./verifier.js";
export type { VerifierStats, VerifyOutcome } from "./run.js";
export type { VerifierOptions } from "./verifier-options.js";
export { classifyCheck, type CheckInputs, type Classification, type Observation } from "./classify.js";
export { foldVerified, verificationBasis, advice, probeWorthStoring, type FoldInput } from "./fold.js";
export { repairAction, appendRepair, describeRepair, type RepairAction } from "./repair-plan.js";
export {
  DEFAULT_VERIFY_INTERVAL_MS,
  WINDOW,
  FRESH_SHARE,
  CheckTimeline,
  LeadEstimator,
  globalInterval,
  intervalOf,
  isFresh,
  type Placement,
} from "./schedule.js";
export { checkGrant, repairGrant, OLDER_GENERATIONS_TRIED, type CheckDeps } from "./check.js";
