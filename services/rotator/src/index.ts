/**
 * @mesh/rotator — moves every holder of a grant from generation k to k+1, and retires k only
 * when all of them confirmed.
 */
export { startRotator, type Rotator } from "./rotator.js";
export { DEFAULT_ROTATION_TIMEOUT_MS, type RotatorOptions } from "./rotator-options.js";
export {
  allConfirmed,
  applyConfirmations,
  enter,
  holdersOf,
  missingHolders,
  nameHolders,
  newRotation,
  nextStep,
  refusal,
  withRotatingCondition,
  type ConfirmationOutcome,
  type RotationStep,
} from "./rotation-machine.js";
export { isDue, isExpiring, startSchedule } from "./schedule.js";
export { contextOfTraceparent, traceparentOf } from "./trace-context.js";
