import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ErrorCodes, isMeshError } from "@mesh/shared";
import { ADMIN_RECORD_FILE, RECORD_MARKER, natsPermissions, renderedRevision, revisionOf, userEntry, type UserRecord } from "./nats-user-config.js";
import { NatsUsersFile, initNatsUsersFile } from "./nats-users-file.js";

const NATS_SERVER_BIN = process.env.NATS_SERVER_BIN || "/usr/sbin/nats-server";
const admin = { username: "mesh-admin", password: "admin-password-1" };
const HASH = `$2b$06$${"c".repeat(53)}`;

let dir: string;
let usersFile: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "mesh-nats-users-"));
  usersFile = join(dir, "mesh-users.conf");
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const grantRecord = (i: number): UserRecord => ({
  mesh: RECORD_MARKER,
  user: `m${i}_res_a`,
  passwordHash: HASH,
  grant: `m${i}/res`,
  generation: 1,
  permissions: natsPermissions(`m${i}`),
});

async function rejection(p: Promise<unknown>) {
  return p.then(
    () => undefined,
    (e: unknown) => e,
  );
}

describe("NatsUsersFile", () => {
  it("writes a first file with the admin that nats-server accepts, with no password in it", async () => {
    const revision = await initNatsUsersFile(usersFile, admin);
    const text = readFileSync(usersFile, "utf8");
    expect(renderedRevision(text)).toBe(revision);
    expect(text).toContain('user: "mesh-admin"');
    expect(text).not.toContain(admin.password);
    expect(readdirSync(`${usersFile}.d`)).toEqual([ADMIN_RECORD_FILE]);
    writeFileSync(join(dir, "main.conf"), "listen: 127.0.0.1:4999\ninclude ./mesh-users.conf\n");
    expect(execFileSync(NATS_SERVER_BIN, ["-c", join(dir, "main.conf"), "-t"], { encoding: "utf8", stdio: "pipe" })).toBe("");
  });

  it("keeps the admin's hash while it matches, and replaces it when the password changed", async () => {
    await initNatsUsersFile(usersFile, admin);
    const first = readFileSync(join(`${usersFile}.d`, ADMIN_RECORD_FILE), "utf8");
    await initNatsUsersFile(usersFile, admin);
    expect(readFileSync(join(`${usersFile}.d`, ADMIN_RECORD_FILE), "utf8")).toBe(first);
    await initNatsUsersFile(usersFile, { ...admin, password: "another-password" });
    expect(readFileSync(join(`${usersFile}.d`, ADMIN_RECORD_FILE), "utf8")).not.toBe(first);
  });

  it("loses no user when 20 writers record and render at once", async () => {
    await initNatsUsersFile(usersFile, admin);
    const records = Array.from({ length: 20 }, (_, i) => grantRecord(i));
    const results = await Promise.all(
      records.map(async (r) => {
        const file = new NatsUsersFile(usersFile, admin); // each its own, as separate provisioners are
        await file.writeRecord(r);
        return file.render();
      }),
    );
    const text = readFileSync(usersFile, "utf8");
    const all = await new NatsUsersFile(usersFile, admin).readRecords();
    expect(all).toHaveLength(21);
    for (const r of records) expect(text).toContain(userEntry(r));
    expect(renderedRevision(text)).toBe(revisionOf(all));
    expect(results.some((r) => r.revision === revisionOf(all))).toBe(true);
    expect(readdirSync(dir).filter((n) => n.endsWith(".tmp"))).toEqual([]);
  });

  it("never overwrites a users file it did not write", async () => {
    const foreign = 'authorization { users = [\n {user: "ops", password: "x"}\n] }\n';
    writeFileSync(usersFile, foreign);
    const e = await rejection(initNatsUsersFile(usersFile, admin));
    expect(isMeshError(e, ErrorCodes.Conflict)).toBe(true);
    expect((e as Error).message).toContain(usersFile);
    expect(readFileSync(usersFile, "utf8")).toBe(foreign);
  });

  it("refuses a record it cannot read back, naming the file, and renders nothing", async () => {
    await initNatsUsersFile(usersFile, admin);
    const before = readFileSync(usersFile, "utf8");
    const bad = join(`${usersFile}.d`, "evil_x_a.json");
    writeFileSync(bad, JSON.stringify({ ...grantRecord(1), user: "evil_x_a", permissions: { publish: ['a"}'], subscribe: [] } }));
    const e = await rejection(new NatsUsersFile(usersFile, admin).render());
    expect(isMeshError(e, ErrorCodes.ProviderMisconfigured)).toBe(true);
    expect((e as Error).message).toContain(bad);
    expect(readFileSync(usersFile, "utf8")).toBe(before);
  });

  it("refuses a record whose file name is not its user's", async () => {
    await initNatsUsersFile(usersFile, admin);
    writeFileSync(join(`${usersFile}.d`, "other_x_a.json"), JSON.stringify(grantRecord(1)));
    expect(isMeshError(await rejection(new NatsUsersFile(usersFile, admin).readRecords()), ErrorCodes.ProviderMisconfigured)).toBe(true);
  });

  it("says what to do when the directory is not writable", async () => {
    const e = await rejection(initNatsUsersFile(join(dir, "no-such-dir", "users.conf"), admin));
    expect(isMeshError(e, ErrorCodes.ProviderMisconfigured)).toBe(true);
    expect((e as Error).message).toMatch(/writable by it/);
    expect((e as Error).message).not.toContain(admin.password);
  });
});
