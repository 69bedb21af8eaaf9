import { describe, expect, it } from "vitest";
import { mkdtempSync, readFileSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { inspect } from "node:util";
import { createSealingKey, decrypt, encrypt, generateSecret, loadMasterKey, openFrom, parseMasterKey, sealTo } from "./crypto.js";
import { isMeshError } from "./errors.js";

const key = parseMasterKey("11".repeat(32));

describe("encryption at rest", () => {
  it("round-trips and hides the plaintext", () => {
    const e = encrypt(key, '{"password":"hunter2"}', "shop.db.g1");
    expect(JSON.stringify(e)).not.toContain("hunter2");
    expect(decrypt(key, e, "shop.db.g1")).toBe('{"password":"hunter2"}');
  });
  it("refuses a record moved to another key, a tampered one, and another master key", () => {
    const e = encrypt(key, "secret", "shop.db.g1");
    expect(() => decrypt(key, e, "shop.db.g2")).toThrow(/does not decrypt/);
    expect(() => decrypt(key, { ...e, data: Buffer.from("x").toString("base64") }, "shop.db.g1")).toThrow(/does not decrypt/);
    expect(() => decrypt(parseMasterKey("22".repeat(32)), e, "shop.db.g1")).toThrow(/same MESH_MASTER_KEY/);
  });
  it("never prints the master key", () => {
    expect(JSON.stringify({ key })).not.toContain("1111");
    expect(inspect(key)).toBe(`MasterKey(${key.id})`);
  });
});

describe("master key", () => {
  it("accepts hex and base64, refuses other lengths with a hint", () => {
    expect(parseMasterKey(Buffer.alloc(32, 7).toString("base64")).key).toHaveLength(32);
    try {
      parseMasterKey("abcd");
      expect.unreachable();
    } catch (e) {
      expect(isMeshError(e, "MasterKey")).toBe(true);
      expect((e as Error).message).toMatch(/openssl rand -hex 32/);
    }
  });
  it("creates a key file with mode 0600 on first start, then reuses it", () => {
    const file = join(mkdtempSync(join(tmpdir(), "mk-")), "sub", "master.key");
    const a = loadMasterKey({}, file);
    expect(a.created).toBe(true);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const b = loadMasterKey({ MESH_MASTER_KEY_FILE: file }, "/nonexistent");
    expect(b.created).toBe(false);
    expect(b.key.id).toBe(a.key.id);
    expect(readFileSync(file, "utf8").trim()).toHaveLength(64);
    expect(loadMasterKey({ MESH_MASTER_KEY: "33".repeat(32) }, file).source).toBe("MESH_MASTER_KEY");
  });
});

describe("sealing in transit", () => {
  it("opens only for the recipient", () => {
    const sender = createSealingKey();
    const me = createSealingKey();
    const other = createSealingKey();
    const sealed = sealTo(sender, me.getPublicKey(), { password: "p" });
    expect(openFrom(me, sender.getPublicKey(), sealed)).toEqual({ password: "p" });
    expect(() => openFrom(other, sender.getPublicKey(), sealed)).toThrow(/not sealed to this holder/);
  });
});

describe("generateSecret", () => {
  it("is URL-safe, long and different every time", () => {
    const seen = new Set(Array.from({ length: 1000 }, () => generateSecret()));
    expect(seen.size).toBe(1000);
    for (const s of seen) expect(s).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });
});
