/** @mesh/provisioner — making resources exist and serving their credentials. */
export { startProvisioner, type Provisioner } from "./provisioner.js";
export { reconcileGrant, targetGeneration, type ProvisionDeps } from "./provision.js";
export { handleCredentialFetch } from "./fetch.js";
export { foldReceipts, foldReceipt, foldReceiptKey } from "./receipts.js";
