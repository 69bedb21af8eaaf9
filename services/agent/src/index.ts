/**
 * @mesh/agent — the node agent: holds the credentials of the parts on its node and writes
 * them as servicebinding.io files.
 */
export { startAgent, agentDurable, type Agent } from "./agent.js";
export type { AgentOptions } from "./agent-options.js";
export {
  writeBinding,
  pruneBinding,
  removeBinding,
  bindingPath,
  partBindingsDir,
  partEnvFile,
  migrateBindings,
  bindingGeneration,
  envName,
  quoteEnvValue,
  renderPartEnv,
  BINDING_KEY_PATTERN,
  DEFAULT_GRACE_MS,
  type BindingWrite,
  type BindingWriteResult,
  type PartBinding,
} from "./bindings-writer.js";
export { planDelivery, type DeliveryPlan } from "./delivery-plan.js";
export { receiptConfirmed, receiptDelivered, receiptFailed, receiptHookFailed, receiptWithdrawn } from "./receipts.js";
export { startProber, probeResultOf, reachabilityChanged, tryConnect, DEFAULT_PROBE_INTERVAL_MS, type Prober, type ProberOptions } from "./prober.js";
export { consumeRotations, partOfConsumer, LOOK_EVERY_MS } from "./rotations.js";
export { endpointAddress, formatAddress, DEFAULT_PORTS } from "./endpoint-address.js";
export { applyRotation, isRotationDue, isHookError, hookNotAllowed, type AgentHooks } from "./rotation-confirm.js";
export {
  runHook,
  hookEnvironment,
  resolveHookPrograms,
  decideHookRunAs,
  lookUpUser,
  HOOK_TIMEOUT_MS,
  DEFAULT_HOOK_USER,
  type HookRunAs,
} from "./hook-runner.js";
