/**
 * @mesh/shared — the one place for schemas, subjects, bucket names, conditions, errors,
 * logging, tracing, crypto and NATS plumbing used by every other package.
 */
export * from "./names.js";
export * from "./kinds.js";
export * from "./subjects.js";
export * from "./inboxes.js";
export * from "./errors.js";
export * from "./duration.js";
export * from "./limits.js";
export * from "./conditions.js";
export * from "./schemas/manifest.js";
export * from "./schemas/grant.js";
export * from "./schemas/verification.js";
export * from "./schemas/rotation.js";
export * from "./verification.js";
export {
  ApplyRequest,
  ApplyReply,
  DeleteRequest,
  DeleteReply,
  AppliedDocument,
  Delivery,
  CredentialFetchRequest,
  CredentialFetchReply,
  CredentialListReply,
  ErrorReply,
  NodeRecord,
} from "./schemas/events.js";
export * from "./module-state.js";
export * from "./delivery.js";
export * from "./removal.js";
export * from "./provider-catalog.js";
export * from "./crypto.js";
export * from "./credential-fetch.js";
export * from "./request-json.js";
export * from "./logger.js";
export * from "./tracing.js";
export * from "./keyed-queue.js";
export * from "./backoff.js";
export * from "./membership.js";
export * from "./connect.js";
export * from "./store.js";
export * from "./jetstream-retry.js";
export * from "./kv-records.js";
export * from "./kv-names.js";
export * from "./serve-json.js";
export * from "./bucket-limits.js";
export * from "./stream-consumers.js";
export * from "./service-main.js";
export * from "./control-plane.js";
export * from "./part-identity.js";
export * from "./state-dir.js";
export * from "./admin-password-policy.js";
export * from "./admin-secret.js";
export * from "./nats-ceiling.js";
export * from "./allowed-hooks.js";
export * from "./nats-permissions.js";
export { matches, overlap, uncovered, within } from "./subject-containment.js";
export * from "./holder-streams.js";
export * from "./holder-acks.js";
export * from "./part-rotation-key.js";
export { noteRevision } from "./read-floors.js";
