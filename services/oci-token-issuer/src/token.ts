/**
 * The registry token itself: a JWT signed ES256 with the issuer's key, its certificate in the
 * `x5c` header, in the form the distribution registry verifies (registry/auth/token/token.go).
 * Hand-written over node:crypto rather than a JOSE library: it is one header, one claim set and
 * one signature, and node:crypto makes the JOSE form of an ECDSA signature itself (ieee-p1363).
 */
import { randomBytes, sign } from "node:crypto";
import type { ResourceActions } from "@mesh/providers";
import type { SigningKey } from "./signing-key.js";

/**
 * The distribution registry (2.8) accepts a token until 60 s past its `exp` (its fixed clock
 * skew `Leeway`), so the `exp` written is this much earlier than when the token should stop
 * working: a token then lives exactly the lifetime asked for, and a retired generation's last
 * token stops working at most that long after the retire.
 */
export const REGISTRY_EXP_LEEWAY_S = 60;
/** The longest a token may work, end to end: a retired generation pulls and pushes at most this long after its retire. */
export const MAX_TOKEN_LIFETIME_S = 60;

export interface TokenRequest {
  issuer: string;
  service: string;
  subject: string;
  access: ResourceActions[];
  /** How long the registry accepts the token, in seconds, at most {@link MAX_TOKEN_LIFETIME_S}. */
  lifetimeSeconds: number;
  /** Unix seconds. */
  now: number;
}

/** A signed token and what the token endpoint answers with. */
export function signToken(key: SigningKey, req: TokenRequest): { token: string; expiresIn: number; issuedAt: string } {
  const header = { typ: "JWT", alg: "ES256", x5c: [key.certificateDer.toString("base64")] };
  const claims = {
    iss: req.issuer,
    sub: req.subject,
    aud: req.service,
    iat: req.now,
    nbf: req.now,
    exp: req.now + req.lifetimeSeconds - REGISTRY_EXP_LEEWAY_S,
    jti: randomBytes(16).toString("base64url"),
    access: req.access,
  };
  const enc = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");
  const signed = `${enc(header)}.${enc(claims)}`;
  const signature = sign("sha256", Buffer.from(signed), { key: key.privateKey, dsaEncoding: "ieee-p1363" }).toString("base64url");
  return { token: `${signed}.${signature}`, expiresIn: req.lifetimeSeconds, issuedAt: new Date(req.now * 1000).toISOString() };
}
