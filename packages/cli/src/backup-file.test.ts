import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { parseMasterKey } from "@mesh/shared";
import { backupOrder, isMeshStream, movedServerWarning } from "./backup-command.js";
import { BACKUP_FORMAT, openBackup, readBackupHeader, sealBackup } from "./backup-file.js";

const key = () => parseMasterKey(randomBytes(32).toString("hex"));
const header = { createdAt: "2026-12-07T00:00:00.000Z", meshVersion: "1.2.3", recordVersion: 1, streams: [{ name: "KV_mesh-grants", messages: 2, bytes: 3 }] };
const contents = {
  masterKey: "ab".repeat(32),
  files: [{ path: "nats-operator/admin.creds", data: Buffer.from("-----BEGIN NATS USER JWT-----") }],
  streams: [{ config: { name: "KV_mesh-grants" } as never, state: { messages: 2 } as never, data: Uint8Array.from([1, 2, 3]) }],
};

describe("a backup file", () => {
  it("opens under its key to what was sealed, and says what it is without it", () => {
    const k = key();
    const file = sealBackup(k, header, contents);
    expect(readBackupHeader("b", file).header).toEqual({ format: BACKUP_FORMAT, ...header, keyId: k.id });
    const opened = openBackup("b", file, k);
    expect(opened.contents.masterKey).toBe(contents.masterKey);
    expect([...opened.contents.streams[0]!.data]).toEqual([1, 2, 3]);
    expect(opened.contents.files).toEqual(contents.files);
    expect(file.includes(Buffer.from(contents.masterKey))).toBe(false);
    expect(file.includes(Buffer.from("NATS USER JWT"))).toBe(false);
  });

  it("refuses another key, a changed header, a file cut short, a newer format and what is no backup, saying which", () => {
    const k = key();
    const file = sealBackup(k, header, contents);
    expect(() => openBackup("b", file, key())).toThrow(/b is encrypted under key [0-9a-f]{12}, and the key given is [0-9a-f]{12}/);
    const changed = Buffer.from(file.toString("latin1").replace('"meshVersion":"1.2.3"', '"meshVersion":"9.9.9"'), "latin1");
    expect(() => openBackup("b", changed, k)).toThrow(/does not open under its key: it was changed or cut short/);
    expect(() => openBackup("b", file.subarray(0, file.length - 1), k)).toThrow(/does not open under its key/);
    expect(() => readBackupHeader("b", Buffer.from(`MESH-BACKUP ${BACKUP_FORMAT + 1}\n{}\n`))).toThrow(/written by a newer meshctl \(backup format 2/);
    expect(() => readBackupHeader("b", Buffer.from("hello\nworld\n"))).toThrow(/b is not a backup of the mesh/);
  });
});

describe("the streams a backup takes", () => {
  it("are the mesh's own, the grants, rotations and credentials last and in that order", () => {
    expect(["KV_mesh-grants", "OBJ_mesh_images", "MESH_AUDIT", "KV_shop_cache", "OBJ_shop_files", "ORDERS"].filter(isMeshStream)).toEqual([
      "KV_mesh-grants",
      "OBJ_mesh_images",
      "MESH_AUDIT",
    ]);
    expect(backupOrder(["KV_mesh-credentials", "KV_mesh-rotations", "MESH_HOLD_N_a", "KV_mesh-grants", "KV_mesh-manifests"])).toEqual([
      "KV_mesh-manifests",
      "MESH_HOLD_N_a",
      "KV_mesh-grants",
      "KV_mesh-rotations",
      "KV_mesh-credentials",
    ]);
  });
});

describe("a restore at another address", () => {
  it("is said, with what the delivered identities name and what to do; the same server in another spelling is not", () => {
    expect(movedServerWarning(undefined, "nats://127.0.0.1:4222")).toBeUndefined();
    expect(movedServerWarning("tls://127.0.0.1:4222", "nats://127.0.0.1:4222")).toBeUndefined();
    expect(movedServerWarning("127.0.0.1:4222", "tls://127.0.0.1")).toBeUndefined();
    expect(movedServerWarning("tls://127.0.0.1:4222,tls://127.0.0.1:4223", "tls://127.0.0.1:4222")).toBeUndefined();
    expect(movedServerWarning("tls://10.0.0.5:4222", "tls://127.0.0.1:4333")).toMatch(
      /reached its NATS server at tls:\/\/10\.0\.0\.5:4222, and this one is at tls:\/\/127\.0\.0\.1:4333: every identity already delivered names .*Stop this mesh and start it again at that address \(NATS_URL=tls:\/\/10\.0\.0\.5:4222 meshctl up/,
    );
  });
});
