import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { decode, fromSeed } from "@nats-io/jwt";
import { credsAuthenticator } from "@nats-io/transport-node";
import { MeshError, parseMasterKey } from "@mesh/shared";
import {
  accountClaims,
  createOperatorSetup,
  isCreds,
  issueUser,
  jwtOfCreds,
  newUserSeed,
  openSigningKeys,
  operatorServerConfig,
  publicKeyOf,
  sealSigningKeys,
  userKey,
  withRevocations,
} from "./nats-jwt.js";

const enc = (s: string) => new TextEncoder().encode(s);
const mk = () => parseMasterKey(randomBytes(32).toString("hex"));

describe("nats-jwt", () => {
  it("signs with Node's Ed25519 exactly as the nkeys library does, and derives the same public key", () => {
    for (let i = 0; i < 20; i++) {
      const seed = newUserSeed();
      const ours = userKey(seed);
      const theirs = fromSeed(enc(seed));
      expect(ours.getPublicKey()).toBe(theirs.getPublicKey());
      const data = randomBytes(1 + i * 7);
      expect(Buffer.from(ours.sign(data)).equals(Buffer.from(theirs.sign(data)))).toBe(true);
      expect(theirs.verify(data, ours.sign(data))).toBe(true);
    }
  });

  it("refuses a secret that is not a user seed", () => {
    expect(() => userKey("not a seed")).toThrow(MeshError);
    expect(() => userKey("SAAGNWK5QJ5ZBYPVSMSRBBRSFOHIGUKPZBV2U3YPUU3NZAAQOVRGRSYKOA")).toThrow(/not the seed of a user nkey|not an nkey seed/);
  });

  it("issues a user JWT signed by the account's signing key, with its permissions and expiry, in a standard .creds", async () => {
    const setup = await createOperatorSetup();
    const seed = newUserSeed();
    const u = await issueUser(setup.signing, { name: "shop_bus_1", seed, permissions: { publish: ["app.shop.>"], subscribe: [] }, expiresAt: 2_000_000_000 });
    const c = decode<{ pub: unknown; sub: unknown; issuer_account: string }>(u.jwt);
    expect(c.sub).toBe(fromSeed(enc(seed)).getPublicKey());
    expect(c.iss).toBe(publicKeyOf(setup.signing.accountSigningSeed));
    expect(c.exp).toBe(2_000_000_000);
    expect(c.nats).toMatchObject({ pub: { allow: ["app.shop.>"] }, sub: { deny: [">"] }, issuer_account: setup.signing.account });
    expect(isCreds(u.creds)).toBe(true);
    expect(jwtOfCreds(u.creds)).toBe(u.jwt);
    expect(u.creds).toContain(seed);
    // Read back trimmed (a password file loses its last newline; readers trim), it still signs in.
    const auth = credsAuthenticator(new TextEncoder().encode(u.creds.trim())) as (nonce?: string) => { jwt: string; nkey: string };
    expect(auth("nonce")).toMatchObject({ jwt: u.jwt, nkey: c.sub });
  });

  it("re-signs the account JWT with revocations and keeps every other claim", async () => {
    const setup = await createOperatorSetup();
    const before = accountClaims(setup.accountJwt);
    const revoked = await withRevocations(setup.accountJwt, setup.signing.operatorSigningSeed, { UABC: 1_700_000_000 });
    const after = accountClaims(revoked);
    expect(after).toMatchObject({ name: before.name, subject: before.subject, signingKeys: before.signingKeys, revocations: { UABC: 1_700_000_000 } });
    expect(decode<{ limits: unknown }>(revoked).nats.limits).toEqual(decode<{ limits: unknown }>(setup.accountJwt).nats.limits);
    expect(decode(revoked).iss).toBe(publicKeyOf(setup.signing.operatorSigningSeed));
    expect(accountClaims(await withRevocations(revoked, setup.signing.operatorSigningSeed, {})).revocations).toEqual({});
  });

  it("keeps the signing keys sealed under the master key: no seed in the file, and another key cannot open it", async () => {
    const setup = await createOperatorSetup();
    const key = mk();
    const file = sealSigningKeys(key, setup.signing);
    for (const v of [setup.signing.operatorSigningSeed, setup.signing.accountSigningSeed]) expect(file).not.toContain(v);
    expect(openSigningKeys(key, file)).toEqual(setup.signing);
    expect(() => openSigningKeys(mk(), file)).toThrow();
    expect(() => openSigningKeys(key, "{}")).toThrow(/not a file of the mesh's NATS signing keys/);
  });

  it("writes a server config with the operator, the system account and the full resolver, every string quoted", async () => {
    const setup = await createOperatorSetup();
    const text = operatorServerConfig(
      { ...setup, systemAccount: setup.signing.systemAccount, account: setup.signing.account },
      { host: "127.0.0.1", port: 4222, storeDir: "/var/lib/nats store", resolverDir: "/var/lib/jwt" },
    );
    for (const storeDir of ['/var/lib/x"y', "/var/lib/x\\y", "/var/lib/x\ny"]) {
      expect(() =>
        operatorServerConfig(
          { ...setup, systemAccount: setup.signing.systemAccount, account: setup.signing.account },
          { host: "h", port: 1, storeDir, resolverDir: "/r" },
        ),
      ).toThrow(/cannot be written into a NATS config/);
    }
    expect(text).toContain(`operator: "${setup.operatorJwt}"`);
    expect(text).toContain(`system_account: "${setup.signing.systemAccount}"`);
    expect(text).toMatch(/resolver: \{ type: full, dir: "\/var\/lib\/jwt", allow_delete: false/);
    expect(text).toContain('store_dir: "/var/lib/nats store"');
    // A slow client's handshake is not cut at nats-server's default 2 s.
    expect(text).toContain("authorization { timeout: 5 }");
    expect(text).toContain(`${setup.signing.account}: "${setup.accountJwt}"`);
  });
});
