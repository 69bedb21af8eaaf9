/**
 * @mesh/rotator — moves every holder of a grant from generation k to k+1, and retires k only
 * when all of them confirmed.
 */
export { startRotator, type Rotator } from "./rotator.js";
export { DEFAULT_ROTATION_TIMEOUT_MS, type RotatorOptions, type RotatorTestHooks } from "./rotator-options.js";
export {
  TRANSITIONS,
  IllegalTransition,
  allConfirmed,
  confirmedCount,
  enter,
  holdersOf,
  missingHolders,
  nameHolders,
  newRotation,
  nextStep,
  withAcks,
  withRotatingCondition,
  type RotationStep,
} from "./rotation-machine.js";
export { isDue, isExpiring, startSchedule } from "./schedule.js";
export { type HolderAck } from "./ack-tracker.js";
export { contextOfTraceparent, traceparentOf } from "./trace-context.js";
