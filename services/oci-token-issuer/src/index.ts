/** The public surface of the token issuer, for tests and for a launcher that runs it in-process. */
export { startTokenIssuer, type TokenIssuer, type TokenIssuerOptions } from "./issuer.js";
export { MAX_TOKEN_LIFETIME_S, REGISTRY_EXP_LEEWAY_S } from "./token.js";
export { CERTIFICATE_FILE, SIGNING_KEY_FILE } from "./signing-key.js";
export { DEFAULT_LOGIN_LIMITS, type LoginLimits } from "./login-limiter.js";
