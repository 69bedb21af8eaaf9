/**
 * @mesh/providers — the adapters that make resources exist on providers, all behind
 * {@link ProviderAdapter}, and the registry that picks one per kind.
 */
export type {
  AdapterFactory,
  AdminLoginRequest,
  SetAdminPasswordRequest,
  BindingValues,
  CreateRequest,
  CreateResult,
  DeleteRequest,
  GrantRef,
  LoginRequest,
  LoginResult,
  ObserveRequest,
  ObserveResult,
  ProviderAdapter,
  ProviderConfig,
  RetireRequest,
  SecretMaterial,
  ServerTls,
  Artifact,
  ArtifactContent,
  ArtifactRequest,
  ArtifactSink,
  ArtifactSource,
  BlobArtifact,
  OpenBlob,
  WholeArtifact,
} from "./adapter.js";
export { recordedResource } from "./adapter.js";
export { adapterKinds, createAdapter, hasAdapter } from "./registry.js";
export { meshCaBundleFile, resolveProviderTls, tlsFailure, verifyingFetch, verifyingOptions } from "./provider-tls.js";
export { createSecretAdapter, SECRET_BYTES } from "./secret.js";
export { createMeshCaAdapter, TLS_BINDING } from "./tls-certificate.js";
export {
  BACKDATE_MS,
  CA_LIFETIME_MS,
  beginCaRotation,
  currentCertificateFiles,
  installCertificate,
  caRotationStep,
  certificatesOf,
  dropRetiredAuthorities,
  fingerprintOf,
  switchCaIssuer,
  type CaRotationStep,
  caFiles,
  checkCertificate,
  ensureMeshCa,
  issueCertificate,
  newAuthority,
  newPrivateKeyPem,
  openAuthority,
  openCaKey,
  readAuthority,
  sealCaKey,
  subjectAltNames,
  trustsOf,
  type Authority,
  type CaFiles,
  type CertificateCheck,
  type CertificateSpec,
} from "./mesh-ca.js";
export { NATS_CA_FILE_OPTION } from "./endpoint.js";
export { caCeiling, certificateRequest, isDnsName, DEFAULT_IP_CEILING, DEFAULT_MAX_LIFETIME, type CaCeiling, type CertificateRequest } from "./tls-request.js";
export { createPostgresAdapter, LOGIN_TIMEOUT_MS } from "./postgres.js";
export { PASSWORD_BYTES, generatePassword } from "./password.js";
export { PG_IDENTIFIER, baseName, checkIdentifier, loginRoleName, postgresNames, quoteIdentifier, type PostgresNames } from "./postgres-identifiers.js";
export { createMariadbAdapter } from "./mariadb.js";
export { createRedisAdapter } from "./redis.js";
export { createNatsUserAdapter } from "./nats-user.js";
export { createRabbitmqAdapter } from "./rabbitmq.js";
export { createOciRegistryAdapter } from "./oci-registry.js";
export {
  GRANTED_ACTIONS,
  grantedAccess,
  hashPassword,
  inNamespace,
  isPasswordHash,
  ociNames,
  verifyPassword,
  type OciNames,
  type ResourceActions,
} from "./oci-token-scope.js";
export { createNpmRegistryAdapter, npmNames, npmPasswordHash, npmrcOf, type NpmUserRecord } from "./npm-registry.js";
export {
  CLUSTER_RESOLVER_SYNC,
  accountClaims,
  createOperatorSetup,
  isCreds,
  issueUser,
  jwtOfCreds,
  newUserSeed,
  openSigningKeys,
  operatorServerConfig,
  sealSigningKeys,
  userClaims,
  withRevocations,
  type OperatorSetup,
  type ServerListen,
  type SigningKeys,
} from "./nats-jwt.js";
export {
  ensureOperator,
  operatorConfig,
  operatorFiles,
  prepareOperatorServer,
  readOperator,
  writePrivate,
  type OperatorFiles,
  type OperatorPublic,
} from "./nats-operator-files.js";
export { RECORDS_BUCKET as NATS_IDENTITY_RECORDS_BUCKET } from "./nats-user.js";
export { natsAuth } from "./nats-auth.js";
export { createKvBucketAdapter, createObjectStoreAdapter } from "./jetstream-stores.js";
export { MARIADB_IDENTIFIER, mariadbNames } from "./mariadb-identifiers.js";
export { checkGrantRef } from "./grant-ref.js";
export {
  CredentialStore,
  CredentialRecord,
  isMasterKeyRecord,
  keysOf,
  singleKey,
  type CredentialKeys,
  type StoredAt,
  type StoredCredential,
} from "./credential-store.js";
export { MasterKeyRing, RING_REFRESH_MS, storeKeyRing } from "./master-key-ring.js";
export { AdapterPool, providerConfig } from "./adapter-pool.js";
export { probeAdminSecret, repairAdminSecret, setAdminSecret, withAdminSecret, type AdminSecretDeps, type AdminSecretProbe } from "./admin-secret-engine.js";
export { artifactId, copyArtifacts, copyOrder, sha1Hex, sha256Digest, type CopyHooks, type CopyOutcome, type CopyProgress } from "./artifacts.js";
export { getImage, objectStoreArtifacts, putImage, putPackage } from "./bootstrap-registry.js";
export { SLOTS, slotName, slotOf, type Slot } from "./alternating.js";
