import { describe, expect, it } from "vitest";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { inspect } from "node:util";
import { createSealingKey, decrypt, encrypt, generateSecret, loadMasterKey, meshSealingKey, openFrom, parseMasterKey, sealTo } from "./crypto.js";
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
  it("takes a tag of exactly 16 bytes and a nonce of 12: a truncated tag is refused, not checked on fewer bits", () => {
    const e = encrypt(key, "secret", "shop.db.g1");
    const tag = Buffer.from(e.tag, "base64");
    expect(tag).toHaveLength(16);
    expect(decrypt(key, e, "shop.db.g1")).toBe("secret");
    // The first 4 bytes of the right tag: Node's decipher alone would accept them.
    for (const short of [tag.subarray(0, 4), tag.subarray(0, 15)]) {
      expect(() => decrypt(key, { ...e, tag: short.toString("base64") }, "shop.db.g1")).toThrow(/its tag \d+ .*must be 12 and 16/);
    }
    expect(() => decrypt(key, { ...e, tag: Buffer.concat([tag, Buffer.alloc(1)]).toString("base64") }, "shop.db.g1")).toThrow(/tag 17/);
    expect(() => decrypt(key, { ...e, iv: Buffer.alloc(16).toString("base64") }, "shop.db.g1")).toThrow(/nonce is 16 bytes/);
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

  it("gives every process that starts at once the same key, and none fails (services start together)", async () => {
    const file = join(mkdtempSync(join(tmpdir(), "mk-")), "master.key");
    // Each process loads the module, then spins until a common instant, so all look for the
    // file within the same fraction of a millisecond.
    const script = `import { loadMasterKey } from ${JSON.stringify(new URL("../dist/crypto.js", import.meta.url).href)}; const at = Number(process.argv[2]); while (Date.now() < at); process.stdout.write(loadMasterKey({}, process.argv[1]).key.id);`;
    const at = String(Date.now() + 1_500);
    const run = () =>
      new Promise<string>((resolve, reject) => {
        const p = spawn(process.execPath, ["--input-type=module", "-e", script, file, at], { stdio: ["ignore", "pipe", "pipe"] });
        let out = "";
        let err = "";
        p.stdout.on("data", (d: Buffer) => (out += d.toString()));
        p.stderr.on("data", (d: Buffer) => (err += d.toString()));
        p.once("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`exit ${code}: ${err}`))));
      });
    const ids = await Promise.all(Array.from({ length: 8 }, run));
    expect(new Set(ids).size).toBe(1);
    expect(readdirSync(dirname(file))).toEqual(["master.key"]);
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

describe("the mesh's sealing key", () => {
  it("is the same for every instance with the master key, another for another key, and seals so that a holder opens it", () => {
    const hex = "11".repeat(32);
    const a = meshSealingKey(parseMasterKey(hex));
    const again = meshSealingKey(parseMasterKey(hex));
    const other = meshSealingKey(parseMasterKey("22".repeat(32)));
    expect(a.getPublicKey()).toMatch(/^X[A-Z2-7]{55}$/);
    expect(again.getPublicKey()).toBe(a.getPublicKey());
    expect(other.getPublicKey()).not.toBe(a.getPublicKey());
    const holder = createSealingKey();
    expect(openFrom(holder, a.getPublicKey(), sealTo(again, holder.getPublicKey(), { v: 1 }))).toEqual({ v: 1 });
    expect(() => openFrom(holder, other.getPublicKey(), sealTo(a, holder.getPublicKey(), { v: 1 }))).toThrow(/did not open/);
  });
});
