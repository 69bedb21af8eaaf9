/** @mesh/provisioner — making resources exist and serving their credentials. */
export { startProvisioner, type Provisioner } from "./provisioner.js";
export { reconcileGrant, targetGeneration } from "./provision.js";
export type { ProvisionDeps } from "./provision-deps.js";
export { handleCredentialFetch } from "./fetch.js";
export { foldReceipts, foldReceipt, foldReceiptKey } from "./receipts.js";
