/**
 * The built-in adapter of kind `secret`: a random value and nothing else. There is no
 * external system, so the resource always "exists", delete has nothing to do, and a login
 * can only check that the value is there.
 */
import { ErrorCodes, Kinds, MeshError, generateSecret } from "@mesh/shared";
import type { AdapterFactory, CreateResult, LoginResult, ObserveResult, ProviderAdapter, ProviderConfig } from "./adapter.js";
import { checkGrantRef } from "./grant-ref.js";

/** Bytes of randomness in a generated secret value (base64url-encoded: 43 characters). */
export const SECRET_BYTES = 32;

/** Makes the `secret` adapter of `provider` (its name goes into the bindings). */
export const createSecretAdapter: AdapterFactory = (provider: ProviderConfig): ProviderAdapter => ({
  kinds: [Kinds.Secret],

  generate: () => ({ value: generateSecret(SECRET_BYTES) }),

  async observe(req): Promise<ObserveResult> {
    checkGrantRef(req.grant);
    return { exists: true, details: {} };
  },

  async create(req): Promise<CreateResult> {
    checkGrantRef(req.grant);
    const value = req.secret.value;
    if (typeof value !== "string" || value === "") {
      throw new MeshError(ErrorCodes.InvalidRequest, `secret material of ${req.grant.module}/${req.grant.requirement} has no value; make it with generate()`);
    }
    return { resource: {}, bindings: { type: "secret", provider: provider.name, value } };
  },

  async delete(req): Promise<void> {
    checkGrantRef(req.grant);
  },

  async retire(req): Promise<void> {
    // Nothing to do on a backend: holders stop accepting the old value once they confirmed the new one.
    checkGrantRef(req.grant);
  },

  async login(req): Promise<LoginResult> {
    const value = req.bindings.value;
    return typeof value === "string" && value !== "" ? { ok: true } : { ok: false, reason: "rejected", message: "the secret binding has no value" };
  },

  async close(): Promise<void> {},
});
