/**
 * @mesh/shared/runtime: talking to NATS the mesh's way: connecting on an identity, requests and
 * replies, the store and its records, retries over JetStream's gaps, consumers, tracing, metrics,
 * membership. Used by the services and the SDK; loads neither a logger nor a YAML parser.
 */
export { connectNats, DEFAULT_NATS_URL, type NatsConnection, isUntrustedServer, jwtAuthenticator, natsIdentity, natsTls } from "./connect.js";
export { errorFromReply, requestJson, type RequestJsonOptions } from "./request-json.js";
export { serveJson, type ServedRequest } from "./serve-json.js";
export { AuditLog } from "./audit-log.js";
export {
  credentialFetchSubject,
  type CredentialFetchTarget,
  fetchCredential,
  type FetchCredentialOptions,
  type FetchedCredential,
} from "./credential-fetch.js";
export {
  ensureBucketLimits,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
  type KV,
  openBucket,
  openStore,
  type OpenStoreOptions,
  stderrStoreLog,
  type Store,
  type StoreLog,
  storeReplicas,
} from "./store.js";
export {
  isJetStreamGap,
  isJetStreamTimeout,
  isStoreCreateFailure,
  JETSTREAM_GAP_RIDE_OUT_MS,
  jetStreamTimeoutMessage,
  jetStreamUnavailable,
  type JetStreamUnavailable,
  retryJetStreamGap,
  retryJetStreamIdempotent,
  retryJetStreamSetup,
} from "./jetstream-retry.js";
export { lostStream, streamsLostMessage } from "./lost-streams.js";
export { microEndpoints, serveMicro } from "./micro-service.js";
export {
  CAS_ATTEMPTS,
  type CasModified,
  casModify,
  type CasModifyOptions,
  casUpdate,
  casWrite,
  entryJson,
  getAtFloor,
  isCasConflict,
  listJson,
  mutateJson,
  READ_FLOOR_WAIT_MS,
  readJson,
  readJsonIfValid,
  RecordSchemaError,
  type Record_,
  watchedJson,
} from "./kv-records.js";
export { noteRevision } from "./read-floors.js";
export {
  CONSUME_EXPIRES_MS,
  consumeKeys,
  consumeMessages,
  type Consumption,
  DEFAULT_ACK_WAIT_MS,
  type Disposition,
  listConsumers,
  type MessageStream,
  orderedMessages,
  REDELIVERY_BACKOFF,
  retryDelayMs,
  type StartAt,
} from "./stream-consumers.js";
export { deliveryCountOf, holderPullExpiresMs, OnePull, type PulledMessage, type PullEnd, pullStatusAction, SETTLING_MS } from "./one-pull.js";
export { ProviderCatalog } from "./provider-catalog.js";
export {
  contextFrom,
  contextOfTraceparent,
  holderSpanAttributes,
  messagingAttributes,
  type MessagingOperation,
  natsHeaderGetter,
  propagating,
  registerTracing,
  SEMCONV_SCHEMA_URL,
  SEMCONV_VERSION,
  startConsumerSpan,
  startProducerSpan,
  traceHeaders,
  traceparentOf,
  tracer,
  withConsumerSpan,
  withProducerSpan,
} from "./tracing.js";
export {
  type GaugeValue,
  MetricNames,
  observeStore,
  recordProvisioning,
  recordRepair,
  recordRequest,
  recordRotation,
  recordVerification,
  registerMetrics,
  type StoreGauges,
} from "./metrics.js";
export { type Heartbeat, HEARTBEAT_MS, JOIN_TIMEOUT_MS, joinMembership, liveMembers, memberKey, type Membership, ownerOf, STALE_MS } from "./membership.js";
export { servedCertificate, type ServedCertificate } from "./nats-server-certificate.js";
export { restoreStream, snapshotStream, type StreamSnapshot } from "./stream-snapshot.js";
