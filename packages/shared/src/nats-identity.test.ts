import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it, onTestFinished } from "vitest";
import { isMeshError } from "./errors.js";
import { createUser } from "@nats-io/nkeys";
import { natsIdentity } from "./connect.js";

/** A temporary directory, removed when the test that made it finishes. */
function scratch(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

describe("natsIdentity", () => {
  it("reads a nats.user binding again on every connect, so a rotated one is used on the next reconnect", () => {
    const dir = scratch("mesh-ident-");
    writeFileSync(join(dir, "username"), "mesh_nats__agent_a\n");
    writeFileSync(join(dir, "password"), "first\n");
    const { authenticator } = natsIdentity({ MESH_NATS_CREDENTIALS: dir });
    const auth = authenticator as (nonce?: string) => unknown;
    expect(auth()).toEqual({ user: "mesh_nats__agent_a", pass: "first" });
    writeFileSync(join(dir, "username"), "mesh_nats__agent_b");
    writeFileSync(join(dir, "password"), "second");
    expect(auth()).toEqual({ user: "mesh_nats__agent_b", pass: "second" });
  });

  it("says what is wrong when the binding is not there", () => {
    let err: unknown;
    try {
      natsIdentity({ MESH_NATS_CREDENTIALS: "/nonexistent/binding" });
    } catch (e) {
      err = e;
    }
    expect(isMeshError(err, "ProviderMisconfigured")).toBe(true);
    expect(String(err)).toMatch(/MESH_NATS_CREDENTIALS=\/nonexistent\/binding: cannot read it \(ENOENT\).*\.creds file.*nats\.user/);
  });

  it("signs with the .creds in a binding (or a .creds file), read again on every connect", () => {
    const dir = scratch("mesh-ident-");
    const creds = (jwt: string, seed: string) =>
      `-----BEGIN NATS USER JWT-----\n${jwt}\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n${seed}\n------END USER NKEY SEED------\n`;
    const first = createUser();
    const second = createUser();
    const seed = (kp: typeof first) => new TextDecoder().decode(kp.getSeed());
    writeFileSync(join(dir, "creds"), creds("eyJ.first.jwt", seed(first)));
    const { authenticator } = natsIdentity({ MESH_NATS_CREDENTIALS: dir });
    const auth = authenticator as (nonce?: string) => { jwt: string; nkey?: string; sig: string };
    // The JWT and the nonce signed with its seed, and no nkey: a server reload closes a JWT user's connection that sent one.
    const signedBy = (kp: typeof first, a: { sig: string }) => kp.verify(new TextEncoder().encode("nonce"), Buffer.from(a.sig, "base64url"));
    const a1 = auth("nonce");
    expect(a1.jwt).toBe("eyJ.first.jwt");
    expect(a1).not.toHaveProperty("nkey");
    expect(signedBy(first, a1)).toBe(true);
    writeFileSync(join(dir, "creds"), creds("eyJ.second.jwt", seed(second)));
    const a2 = auth("nonce");
    expect(a2.jwt).toBe("eyJ.second.jwt");
    expect(signedBy(second, a2)).toBe(true);
    expect(natsIdentity({ MESH_NATS_CREDENTIALS: join(dir, "creds") }).authenticator).toBeTypeOf("function");
    writeFileSync(join(dir, "not.creds"), "hello");
    expect(() => natsIdentity({ MESH_NATS_CREDENTIALS: join(dir, "not.creds") })).toThrow(/holds no user JWT/);
  });

  it("takes a fixed identity, the password from a file, and nothing when no variable is set", () => {
    const dir = scratch("mesh-ident-");
    writeFileSync(join(dir, "pw"), "s3cret\n");
    expect(natsIdentity({ MESH_NATS_USER: "admin", MESH_NATS_PASSWORD_FILE: join(dir, "pw") })).toEqual({ user: "admin", pass: "s3cret" });
    expect(natsIdentity({})).toEqual({});
  });
});
