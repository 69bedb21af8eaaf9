import { X509Certificate, verify } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureSigningKey, type SigningKey } from "./signing-key.js";
import { MAX_TOKEN_LIFETIME_S, REGISTRY_EXP_LEEWAY_S, signToken } from "./token.js";

let dir: string;
let key: SigningKey;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "mesh-oci-key-"));
  key = await ensureSigningKey(dir);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const decode = (part: string) => JSON.parse(Buffer.from(part, "base64url").toString()) as Record<string, unknown>;

describe("signToken", () => {
  it("signs ES256 with the certificate in x5c, and works (exp plus the registry's leeway) exactly the lifetime", () => {
    const now = 1_700_000_000;
    const access = [{ type: "repository" as const, name: "shop/api", actions: ["pull"] }];
    const t = signToken(key, { issuer: "iss", service: "svc", subject: "shop.images", access, lifetimeSeconds: MAX_TOKEN_LIFETIME_S, now });
    const [h, c, s] = t.token.split(".") as [string, string, string];
    const header = decode(h);
    expect(header).toMatchObject({ typ: "JWT", alg: "ES256" });
    const cert = new X509Certificate(Buffer.from((header.x5c as string[])[0]!, "base64"));
    expect(verify("sha256", Buffer.from(`${h}.${c}`), { key: cert.publicKey, dsaEncoding: "ieee-p1363" }, Buffer.from(s, "base64url"))).toBe(true);
    const claims = decode(c);
    expect(claims).toMatchObject({ iss: "iss", aud: "svc", sub: "shop.images", iat: now, nbf: now, access });
    expect((claims.exp as number) + REGISTRY_EXP_LEEWAY_S - now).toBe(MAX_TOKEN_LIFETIME_S);
    expect(t.expiresIn).toBe(MAX_TOKEN_LIFETIME_S);
  });

  it("reads the same key and certificate back on the next start", async () => {
    const again = await ensureSigningKey(dir);
    expect(again.certificateDer.equals(key.certificateDer)).toBe(true);
  });
});
