/**
 * @mesh/shared: the mesh's vocabulary, pure: names, kinds, subjects, errors, durations, limits,
 * conditions, schemas, permissions and the rules over them. Nothing here opens a connection,
 * logs or reads YAML; the CLI's pure code imports this entry alone. Talking to NATS is
 * `@mesh/shared/runtime` (the SDK's other import), a service's process `@mesh/shared/service`,
 * manifest files `@mesh/shared/manifest-text`.
 */
export {
  BINDING_KEY_PATTERN,
  bindingGenerationDirPattern,
  bindingGenerationsDirName,
  CONTROL_PLANE_MODULE,
  IDENTITY_BINDING,
  isReservedRequirementName,
  isValidName,
  NAME_MAX_LENGTH,
  NAME_PATTERN,
  NAME_PATTERN_PORTABLE,
  NAME_RULE,
  parseBindingGenerationDir,
  partEnvFileName,
} from "./names.js";
export {
  BUILTIN_SECRET_PROVIDER,
  MESH_CA_PROVIDER,
  SELF_EXPIRING_KINDS,
  DATA_KINDS,
  TLS_PROVIDER_KINDS,
  type DeletionPolicy,
  deletionPolicyOf,
  type Kind,
  KIND_LIST,
  Kinds,
  NATS_KINDS,
  REGISTRY_KINDS,
  servedByNats,
} from "./kinds.js";
export {
  type BucketName,
  Buckets,
  Durables,
  grantId,
  keys,
  moduleSubjectPattern,
  parseGrantId,
  parseReceiptKey,
  QueueGroups,
  SOURCE_OF_RECORD,
  Streams,
  subjects,
  SubjectTemplates,
} from "./subjects.js";
export { confineToInbox, INBOX_ROOT_PATTERNS, InboxRoots, isInboxSubject } from "./inboxes.js";
export { type ErrorCode, ErrorCodes, errorMessage, isMeshError, MeshError } from "./errors.js";
export { readableRecord, RECORD_VERSION, RECORD_VERSION_FIELD, recordJson, RecordTooNewError, recordVersionOf } from "./record-version.js";
export { DURATION_PATTERN, durationAtMost, formatAge, parseDuration, parseTimerDuration } from "./duration.js";
export {
  AUDIT_LIMITS,
  BUCKET_LIMITS,
  type BucketLimits,
  CREDENTIAL_HISTORY,
  formatBytes,
  IDENTITY_RECORDS_LIMITS,
  Limits,
  MAX_ROTATE_EVERY_MS,
  MAX_TIMER_MS,
  STORE_FILL_SHARE,
  STORE_SCALE,
} from "./limits.js";
export { Condition, ConditionStatus, type ConditionType, ConditionTypes, getCondition, isTrue, type Reason, Reasons, setCondition } from "./conditions.js";
export {
  formatPath,
  formatProblems,
  MANIFEST_API_VERSION,
  ManifestDoc,
  ModuleDoc,
  Name,
  type ParseResult,
  PartDoc,
  type Problem,
  ProviderDoc,
  ProviderOptions,
  ProviderTls,
  RequirementDoc,
  RequirementOptions,
  validateDocuments,
} from "./schemas/manifest.js";
export {
  MAX_HISTORY,
  MAX_REPLICAS,
  MAX_SUBJECT_LENGTH,
  MAX_SUBJECTS,
  MIN_TTL_MS,
  CERTIFICATE_USAGES,
  DEFAULT_CERTIFICATE_LIFETIME,
  DEFAULT_DNS_CEILING,
  MESH_DOMAIN,
  MIN_CERTIFICATE_LIFETIME_MS,
  type CertificateUsage,
  REQUIREMENT_OPTIONS,
  requirementOptionNames,
} from "./schemas/requirement-options.js";
export {
  DeliveryReceipt,
  Grant,
  GrantTarget,
  holderKey,
  HolderState,
  type ModuleState,
  ModuleStates,
  ModuleStatus,
  RECEIPT_MESSAGE_MAX,
} from "./schemas/grant.js";
export {
  CheckFailureReason,
  CheckResult,
  ProbeReply,
  ProbeReport,
  ProbeRequest,
  ProbeResult,
  ReachabilityRecord,
  REPAIR_HISTORY_LIMIT,
  RepairEvent,
  RepairPolicies,
  RepairPolicy,
  Verification,
  VerifyPolicy,
  VerifyReply,
  VerifyRequest,
} from "./schemas/verification.js";
export {
  EvictRequest,
  HOLDER_HEARTBEAT_MS,
  HOLDER_STALE_MS,
  HolderProgress,
  HolderRegistration,
  isHolderPending,
  isRotationRunning,
  parseHolderId,
  parseRotationId,
  RotatePolicy,
  RotateReply,
  RotateRequest,
  Rotation,
  RotationBroadcast,
  rotationId,
  type RotationState,
  RotationStates,
  sdkHolderId,
} from "./schemas/rotation.js";
export {
  AppliedDocument,
  ApplyReply,
  ApplyRequest,
  CredentialFetchReply,
  CredentialFetchRequest,
  CredentialListReply,
  CredentialValues,
  DeleteReply,
  DeleteRequest,
  Delivery,
  ErrorReply,
  NodeRecord,
} from "./schemas/events.js";
export { type CurrentProbe, currentProbes, describeLastCheck, lastCheck, probeStaleAfter } from "./verification.js";
export { type DerivedState, deriveModuleState } from "./module-state.js";
export { deliveryMsgId, isTarget, undelivered, withDeliveredCondition } from "./delivery.js";
export {
  deletedModuleState,
  dropRetainedHint,
  dropsResource,
  isRevoked,
  isUnneeded,
  pendingWithdrawals,
  removalDone,
  removalRemains,
  validAfterRevocation,
  revocationDue,
  withRemoval,
} from "./removal.js";
export {
  createSealingKey,
  decrypt,
  encrypt,
  type Encrypted,
  GCM_IV_BYTES,
  GCM_TAG_BYTES,
  generateSecret,
  type KeyPair,
  loadMasterKey,
  type MasterKey,
  meshSealingKey,
  openFrom,
  parseMasterKey,
  sealingKeyFromSeed,
  sealTo,
} from "./crypto.js";
export { type Backoff, backoffMs, CONFIRM_FAILURE_MS, confirmFailure, DEFAULT_JITTER, sleep } from "./backoff.js";
export { KeyedQueue } from "./keyed-queue.js";
export { kvFilter, kvKeyOf, kvStream } from "./kv-names.js";
export { BINDING_KEYS, ENV_NAME_PATTERN, type EnvMapping, envDigest, mappedEnv } from "./binding-env.js";
export {
  type BucketLimitsPlan,
  fillLimit,
  isBucketFull,
  isValueTooLarge,
  planBucketLimits,
  storedSize,
  storeWrite,
  type StoreWriteOptions,
  type StreamLimitsNow,
} from "./bucket-limits.js";
export { DEFAULT_BINDINGS_ROOT, DEFAULT_STATE_DIR, OPERATOR_ADMIN_CREDS, StateFiles } from "./state-dir.js";
export { meshVersion } from "./release-version.js";
export {
  endpointName,
  MICRO_VERBS,
  MicroEndpoints,
  microPermissions,
  microResponse,
  microSubjects,
  type MicroEndpointStats,
  type MicroService,
  type MicroVerb,
} from "./micro.js";
export {
  agentDurable,
  agentPart,
  BOOTSTRAP_PROVIDER,
  bootstrapProvider,
  meshCaProvider,
  CONTROL_PLANE_SERVICES,
  NATS_SERVER_PART,
  type ControlPlaneLayout,
  controlPlaneManifest,
  operatorPermissions,
  ControlPlaneRequirements,
  type ControlPlaneService,
  identityRequirement,
  MASTER_KEY_GRANT,
  microServiceName,
  RECORDS_GRANT,
  servesModule,
  servicePermissions,
} from "./control-plane.js";
export {
  bindingNameOf,
  type PartIdentityOptions,
  partIdentityPermissions,
  partIdentityRequirement,
  partIdentityRequirements,
  requirementOfBinding,
} from "./part-identity.js";
export {
  adminPasswordPolicy,
  type AdminPasswordPolicy,
  type AdminPasswordProblem,
  adminSecretOf,
  type AdminSecretRef,
  checkAdminPassword,
  realPath,
} from "./admin-password-policy.js";
export {
  type AdminLogin,
  adminSecretAdvice,
  type AdminSecretFinding,
  adminSecretGenerations,
  type AdminSecretTrials,
  classifyAdminSecret,
} from "./admin-secret.js";
export {
  CeilingOptions,
  DEFAULT_NATS_CEILING,
  EVERY_MODULE,
  MODULE_PLACEHOLDER,
  type NatsCeiling,
  parseCeilingEntry,
  RESPONSES_CEILING_OPTION,
  scopedToModule,
} from "./nats-ceiling.js";
export {
  type AllowedHooks,
  allowedHooksOf,
  formatHookList,
  HOOK_LIST_SEPARATOR,
  HOOK_PATH,
  HookOptionError,
  parseAllowedHooks,
  parseAllowHook,
  splitHookList,
} from "./allowed-hooks.js";
export {
  type CeilingBreach,
  ceilingBreaches,
  ceilingFor,
  ceilingRefusal,
  checkSubjectPattern,
  checkWithinCeiling,
  identityPermissions,
  inboxRefusal,
  natsCeiling,
  natsPermissions,
  type NatsPermissions,
  responsesAllowed,
  SUBJECT_RULE,
  subscribeReach,
} from "./nats-permissions.js";
export { matches, overlap, uncovered, within } from "./subject-containment.js";
export {
  agentHolderStream,
  broadcastKey,
  consumerMismatch,
  HOLDER_ACK_WAIT_MS,
  HOLDER_STREAM_PREFIX,
  holderAckedOn,
  holderConsumerConfig,
  holderEndpoint,
  type HolderEndpoint,
  holderStreamConfig,
  holderStreamUse,
  partHolderStream,
  SDK_CONSUMER_INACTIVE_MS,
} from "./holder-streams.js";
export { broadcastTargets, type HolderConsumerState, readHolderAcks } from "./holder-acks.js";
export { decryptForPart, encryptForPart, partRotationKey } from "./part-rotation-key.js";
export { hostForUrl, isLoopback, parseHostPort, type ListenAddress } from "./host-port.js";
export {
  AuditedRequests,
  type AuditedRequest,
  AuditRecord,
  type AuditTarget,
  checkOperatorName,
  consoleAuditSubject,
  isConsoleAuditSubject,
  OPERATOR_TOKEN,
  operatorOfInboxPrefix,
  operatorOfRequirement,
  operatorRequestSubjects,
  operatorRequirement,
  operatorSubject,
  operatorSubjectsOf,
  type Requester,
  requesterName,
  requesterOf,
} from "./audit.js";
export { type GrantSummary, storeGauges, summarizeGrant } from "./store-gauges.js";
