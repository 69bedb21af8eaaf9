import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { isMeshError } from "./errors.js";
import { natsIdentity } from "./nats.js";

describe("natsIdentity", () => {
  it("reads a nats.user binding again on every connect, so a rotated one is used on the next reconnect", () => {
    const dir = mkdtempSync(join(tmpdir(), "mesh-ident-"));
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
    expect(String(err)).toMatch(/MESH_NATS_CREDENTIALS=\/nonexistent\/binding: cannot read username \(ENOENT\).*nats\.user/);
  });

  it("takes a fixed identity, the password from a file, and nothing when no variable is set", () => {
    const dir = mkdtempSync(join(tmpdir(), "mesh-ident-"));
    writeFileSync(join(dir, "pw"), "s3cret\n");
    expect(natsIdentity({ MESH_NATS_USER: "admin", MESH_NATS_PASSWORD_FILE: join(dir, "pw") })).toEqual({ user: "admin", pass: "s3cret" });
    expect(natsIdentity({})).toEqual({});
  });
});
