/** @mesh/provisioner — making resources exist and serving their credentials. */
export { startProvisioner, type Provisioner } from "./provisioner.js";
export { reconcileGrant, targetGeneration, type ProvisionDeps } from "./provision.js";
export { CredentialStore, CredentialRecord, type CredentialValues } from "./credential-store.js";
export { AdapterPool, providerConfig } from "./adapter-pool.js";
export { handleCredentialFetch } from "./fetch.js";
