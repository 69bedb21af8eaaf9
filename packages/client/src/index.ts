/**
 * @mesh/client — the SDK a TypeScript module uses. It wraps the same NATS subjects a module in
 * any language can use with a plain NATS client: declare a manifest, and watch a part's
 * credentials as an async iterator.
 */
export { declare, ManifestRejectedError, isManifestRejectedError, type DeclareOptions, type Declared } from "./declare.js";
export { watchCredentials, type CredentialWatch, type CredentialUpdate, type WatchCredentialsOptions } from "./watch-credentials.js";
export { MeshError, isMeshError, ErrorCodes, type ErrorCode, type Problem, type CredentialValues } from "@mesh/shared";
export { holdCredential, type CredentialHolder, type HeldCredential, type HoldCredentialOptions } from "./hold-credential.js";
export {
  connectWithIdentity,
  readIdentityBinding,
  type ConnectWithIdentityOptions,
  type IdentityBinding,
  type IdentityConnection,
} from "./connect-with-identity.js";
export { natsUserConnectOptions } from "./nats-user-binding.js";
// The SDK's spans go to the tracer provider registered with its copy of @opentelemetry/api; an
// application whose own copy is another minor version registers through this, or they go nowhere.
export { registerTracing } from "@mesh/shared/runtime";
