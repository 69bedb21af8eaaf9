/**
 * The rule on a Provider's admin password source, on a real directory tree of the mesh's own
 * files (state directory, operator directory, bindings with their hidden generation
 * directories) and symlinks into it.
 */
import { linkSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminPasswordPolicy, adminSecretOf, checkAdminPassword, realPath, type AdminPasswordPolicy } from "./admin-password-policy.js";
import { parseBindingGenerationDir } from "./names.js";
import type { ProviderDoc } from "./schemas/manifest.js";

let base: string;
let state: string;
let policy: AdminPasswordPolicy;

const provider = (admin: NonNullable<ProviderDoc["admin"]>, over: Partial<ProviderDoc> = {}): ProviderDoc => ({
  kind: "Provider",
  name: "p",
  serves: ["redis.user"],
  node: "node-a",
  endpoint: "redis://127.0.0.1:6379",
  admin,
  installed: true,
  ...over,
});
const file = (passwordFile: string, over: Partial<ProviderDoc> = {}) => checkAdminPassword(provider({ username: "admin", passwordFile }, over), policy);
const envName = (passwordEnv: string, p: AdminPasswordPolicy = policy) => checkAdminPassword(provider({ username: "admin", passwordEnv }), p);
const NATS_ONLY: Partial<ProviderDoc> = { serves: ["nats.user", "kv.bucket", "object.store"], endpoint: "nats://127.0.0.1:4222" };

beforeAll(() => {
  // realpath: tmpdir() may itself be a symlink somewhere.
  base = realpathSync(mkdtempSync(join(tmpdir(), "mesh-policy-")));
  state = join(base, "work", ".mesh");
  const touch = (p: string, text = "x") => {
    mkdirSync(join(p, ".."), { recursive: true });
    writeFileSync(p, text);
  };
  touch(join(state, "master.key"), "00".repeat(32));
  touch(join(state, "nats-url"));
  touch(join(state, "logs", "provisioner.log"));
  touch(join(state, "nats-operator", "signing-keys.json"));
  touch(join(state, "nats-operator", "identity-keys.json"));
  touch(join(state, "nats-operator", "admin.creds"));
  // A binding as the agent writes it: <root>/<node>/<module>/<part>/<requirement> → ../.<part>.generations/<requirement>-g1-XXXXXX/
  const part = join(state, "bindings", "node-a", "pg", "server");
  touch(join(state, "bindings", "node-a", "pg", ".server.generations", "admin-password-g1-AbC123", "value"));
  mkdirSync(part, { recursive: true });
  symlinkSync("../.server.generations/admin-password-g1-AbC123", join(part, "admin-password"));
  touch(join(state, "bindings", "node-a", "pg", "server.env"));
  // And as an agent before the generations directory wrote it: <part>/<requirement> → .<requirement>-g2-XXXXXX/
  touch(join(state, "bindings", "node-a", "shop", "api", ".db-g2-zzzzzz", "password"));
  symlinkSync(".db-g2-zzzzzz", join(state, "bindings", "node-a", "shop", "api", "db"));
  touch(join(base, "etc", "pg-admin-password"));
  touch(join(base, "outside-key"));
  mkdirSync(join(base, "links"));
  symlinkSync(join(state, "master.key"), join(base, "links", "key"));
  linkSync(join(state, "master.key"), join(base, "hard-key"));
  symlinkSync(state, join(base, "links", "mesh"));
  symlinkSync(base, join(base, "links", "up"));
  policy = adminPasswordPolicy({ MESH_MASTER_KEY_FILE: join(base, "outside-key") }, join(base, "work"));
});
afterAll(() => rmSync(base, { recursive: true, force: true }));

describe("passwordEnv", () => {
  it.each(["PG_ADMIN_PASSWORD", "REDIS_ADMIN_PASSWORD", "BOOT_REDIS_PASSWORD"])("takes %s", (n) => expect(envName(n)).toBeUndefined());
  it.each<[string, RegExp]>([
    [
      "MESH_MASTER_KEY",
      /^MESH_MASTER_KEY starts with MESH_, which names the mesh's own settings and secrets: a provider's admin password is read only from a variable whose name ends in _PASSWORD and does not start with MESH_; name a variable of its own/,
    ],
    ["MESH_NATS_PASSWORD", /starts with MESH_/],
    ["mesh_x_PASSWORD", /starts with MESH_/],
    ["HOME", /^HOME does not end in _PASSWORD/],
    ["PG_ADMIN_PASSWORD_FILE", /does not end in _PASSWORD/],
  ])("refuses %s", (n, message) => {
    expect(envName(n)).toEqual({ path: "admin.passwordEnv", message: expect.stringMatching(message) });
  });
  it("is narrowed by MESH_ADMIN_PASSWORD_ENVS, never widened", () => {
    const narrow = adminPasswordPolicy({ MESH_ADMIN_PASSWORD_ENVS: "PG_ADMIN_PASSWORD, REDIS_ADMIN_PASSWORD" }, base);
    expect(envName("PG_ADMIN_PASSWORD", narrow)).toBeUndefined();
    expect(envName("BOOT_REDIS_PASSWORD", narrow)?.message).toMatch(
      /^BOOT_REDIS_PASSWORD is not a variable the services allow \(MESH_ADMIN_PASSWORD_ENVS: PG_ADMIN_PASSWORD, REDIS_ADMIN_PASSWORD\)/,
    );
    expect(() => adminPasswordPolicy({ MESH_ADMIN_PASSWORD_ENVS: "PG_ADMIN_PASSWORD,MESH_MASTER_KEY" }, base)).toThrow(
      /MESH_ADMIN_PASSWORD_ENVS: MESH_MASTER_KEY starts with MESH_.*it may only narrow that rule/,
    );
  });
});

describe("passwordFile", () => {
  it("takes a file of its own, outside the mesh's", () => {
    expect(file(join(base, "etc", "pg-admin-password"))).toBeUndefined();
    expect(file(join(base, "etc", "not-yet-there"))).toBeUndefined();
  });

  it.each<[string, () => string, RegExp]>([
    [
      "the master key",
      () => join(state, "master.key"),
      /is the mesh's master key: a provider's admin password may not be read from a file of the mesh's own, which the provisioner would send to the provider's endpoint; put the admin password in a file of its own/,
    ],
    ["the master key through ..", () => `${base}/etc/../work/.mesh/master.key`, /\(.*\/work\/\.mesh\/master\.key\) is the mesh's master key/],
    ["the master key through .. past a directory that does not exist", () => `${base}/nope/../work/.mesh/master.key`, /is the mesh's master key/],
    ["the master key through a symlink to it", () => join(base, "links", "key"), /is the mesh's master key/],
    ["the master key through a hard link", () => join(base, "hard-key"), /is the mesh's master key/],
    ["the master key through a symlink to the state directory", () => join(base, "links", "mesh", "master.key"), /is the mesh's master key/],
    ["the master key relative to the working directory", () => "../work/.mesh/master.key", /is the mesh's master key/],
    ["MESH_MASTER_KEY_FILE, wherever it is", () => join(base, "outside-key"), /is the mesh's master key/],
    [
      "the signing keys",
      () => join(state, "nats-operator", "signing-keys.json"),
      /is in the mesh's operator directory .*\(its signing keys, identity keys and JWTs\)/,
    ],
    [
      "the identity keys, through a symlink",
      () => join(base, "links", "up", "links", "mesh", "nats-operator", "identity-keys.json"),
      /is in the mesh's operator directory/,
    ],
    ["a file of the operator directory that does not exist yet", () => join(state, "nats-operator", "later.json"), /is in the mesh's operator directory/],
    [
      "the operator admin's .creds, for a provider that serves Redis",
      () => join(state, "nats-operator", "admin.creds"),
      /is the operator admin's \.creds, which only a provider serving NATS kinds alone \(nats\.user, kv\.bucket, object\.store, mesh\.identity\) may use.*this one also serves redis\.user/,
    ],
    ["a log of the mesh", () => join(state, "logs", "provisioner.log"), /is in the mesh's own directory .*\/work\/\.mesh: /],
    [
      "another grant's binding",
      () => join(state, "bindings", "node-a", "shop", "api", "db", "password"),
      /is a file of the binding of grant shop\/db, which this provider does not need: list shop\/db in its needs/,
    ],
    [
      "a part's env file, which holds all its requirements",
      () => join(state, "bindings", "node-a", "pg", "server.env"),
      /is in the bindings root .* but is not a binding file/,
    ],
    [
      "the default bindings root of an agent",
      () => "/var/lib/mesh/bindings/shop/api/db/password",
      /is a file of the binding of grant shop\/db, which this provider does not need/,
    ],
  ])("refuses %s", (_, path, message) => {
    expect(file(path())).toEqual({ path: "admin.passwordFile", message: expect.stringMatching(message) });
  });

  it("takes the operator admin's .creds for a provider of NATS kinds alone, and not beside another kind", () => {
    expect(file(join(state, "nats-operator", "admin.creds"), NATS_ONLY)).toBeUndefined();
    expect(file(join(base, "links", "mesh", "nats-operator", "admin.creds"), NATS_ONLY)).toBeUndefined();
    expect(file(join(state, "nats-operator", "admin.creds"), { serves: ["nats.user", "secret"] })?.message).toMatch(/this one also serves secret/);
    // Only the .creds: the signing keys stay refused to a NATS provider too.
    expect(file(join(state, "nats-operator", "signing-keys.json"), NATS_ONLY)?.message).toMatch(/operator directory/);
  });

  it("takes the binding files of a grant the provider needs, as written or as resolved, existing or not yet", () => {
    const needs = { needs: ["pg/admin-password"] };
    const part = join(state, "bindings", "node-a", "pg", "server");
    expect(file(join(part, "admin-password", "value"), needs)).toBeUndefined();
    expect(file(join(state, "bindings", "node-a", "pg", ".server.generations", "admin-password-g1-AbC123", "value"), needs)).toBeUndefined();
    expect(file(join(part, ".admin-password-g1-AbC123", "value"), needs)).toBeUndefined();
    expect(file(join(state, "bindings", "node-b", "pg", "server", "admin-password", "value"), needs)).toBeUndefined();
    expect(file("/var/lib/mesh/bindings/pg/server/admin-password/value", needs)).toBeUndefined();
    // Not the part's env file, nor another requirement of the module, nor a binding of another module.
    expect(file(join(state, "bindings", "node-a", "pg", "server.env"), needs)?.message).toMatch(/not a binding file/);
    // A key may hold a dot (tls.crt): a file in a part's directory reads as another grant's binding file, refused as that.
    expect(file(join(part, "part.env"), needs)?.message).toMatch(/a file of the binding of grant node-a\/server, which this provider does not need/);
    expect(file(join(part, "other", "value"), needs)?.message).toMatch(/grant pg\/other, which this provider does not need/);
    expect(file(join(state, "bindings", "node-a", "shop", "api", "db", "password"), needs)?.message).toMatch(/grant shop\/db/);
  });

  it("adminSecretOf names the mesh secret a passwordFile is a binding file of, only for a grant in needs", () => {
    const needs = { needs: ["pg/admin-password"] };
    const part = join(state, "bindings", "node-a", "pg", "server");
    const of = (passwordFile: string, over: Partial<ProviderDoc> = needs) => adminSecretOf(provider({ username: "postgres", passwordFile }, over), policy);
    const ref = { grant: "pg/admin-password", module: "pg", requirement: "admin-password", key: "value" };
    expect(of(join(part, "admin-password", "value"))).toEqual(ref);
    expect(of(join(part, ".admin-password-g1-AbC123", "value"))).toEqual(ref);
    expect(of("/var/lib/mesh/bindings/pg/server/admin-password/value")).toEqual(ref);
    expect(of(join(base, "links", "mesh", "bindings", "node-a", "pg", "server", "admin-password", "value"))).toEqual(ref);
    // Not without the need, nor the part's env file, nor a file of its own, nor an env var.
    expect(of(join(part, "admin-password", "value"), {})).toBeUndefined();
    expect(of(join(part, "part.env"))).toBeUndefined();
    expect(of(join(base, "etc", "pg-admin-password"))).toBeUndefined();
    expect(adminSecretOf(provider({ username: "postgres", passwordEnv: "PG_PASSWORD" }, needs), policy)).toBeUndefined();
  });

  it("is narrowed by MESH_ADMIN_PASSWORD_FILES to the directories and files it lists", () => {
    const narrow = adminPasswordPolicy({ MESH_ADMIN_PASSWORD_FILES: `${join(base, "etc")}/:/run/secrets/pg` }, join(base, "work"));
    const check = (p: string) => checkAdminPassword(provider({ username: "a", passwordFile: p }), narrow);
    expect(check(join(base, "etc", "pg-admin-password"))).toBeUndefined();
    expect(check("/run/secrets/pg")).toBeUndefined();
    expect(check("/run/secrets/pg2")?.message).toMatch(/is not under a path the services allow \(MESH_ADMIN_PASSWORD_FILES: .*\/etc\/:\/run\/secrets\/pg\)/);
    expect(check(`${base}/etc/../outside-key`)?.message).toMatch(/is not under a path the services allow/);
    // Narrowing does not widen: the master key stays refused under an allowed prefix.
    const wide = adminPasswordPolicy({ MESH_ADMIN_PASSWORD_FILES: base }, join(base, "work"));
    expect(checkAdminPassword(provider({ username: "a", passwordFile: join(state, "master.key") }), wide)?.message).toMatch(/master key/);
    // It narrows the exceptions too: the operator's admin.creds passes only when listed.
    const creds = join(state, "nats-operator", "admin.creds");
    const natsCheck = (p: AdminPasswordPolicy) => checkAdminPassword(provider({ username: "a", passwordFile: creds }, NATS_ONLY), p);
    expect(natsCheck(narrow)?.message).toMatch(/is not under a path the services allow/);
    expect(natsCheck(adminPasswordPolicy({ MESH_ADMIN_PASSWORD_FILES: `/run/secrets:${creds}` }, join(base, "work")))).toBeUndefined();
    expect(() => adminPasswordPolicy({ MESH_ADMIN_PASSWORD_FILES: "etc/secrets" }, base)).toThrow(
      /MESH_ADMIN_PASSWORD_FILES: "etc\/secrets" is not an absolute path/,
    );
  });

  it("no path the kernel opens as the master key or a file in the operator or state directory passes (property)", () => {
    // The files a Redis provider may never read, by identity (device and inode), which the kernel decides.
    const identity = (p: string) => {
      const s = statSync(p);
      return `${s.dev}:${s.ino}`;
    };
    const walk = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : e.isFile() ? [join(dir, e.name)] : []));
    const forbidden = new Set([...walk(state), join(base, "outside-key")].map(identity));
    // Paths built from pieces of this tree, symlinks, `.` and `..`, as text (no path.join,
    // which would take `..` off lexically), absolute or relative to the services' directory:
    // a way to the state directory (or anywhere), detours, then one of its files (or anything).
    const piece = fc.constantFrom(
      "work",
      ".mesh",
      "master.key",
      "nats-operator",
      "signing-keys.json",
      "identity-keys.json",
      "admin.creds",
      "logs",
      "provisioner.log",
      "links",
      "mesh",
      "key",
      "up",
      "etc",
      "..",
      ".",
      "",
      "nope",
    );
    const toState = fc.constantFrom(
      ".mesh",
      "../links/mesh",
      "work/.mesh",
      "links/mesh",
      "links/up/work/.mesh",
      "etc/../work/.mesh",
      "links/mesh/../.mesh",
      "nope/../work/.mesh",
      "links/up/links/mesh",
      "work/./.mesh/",
      "links/mesh/nats-operator/..",
      "..",
    );
    const inState = fc.constantFrom(
      "master.key",
      "nats-url",
      "logs/provisioner.log",
      "nats-operator/signing-keys.json",
      "nats-operator/identity-keys.json",
      "nats-operator/admin.creds",
      "bindings/node-a/shop/api/db/password",
      "bindings/node-a/pg/server.env",
      "bindings/node-a/pg/.server.generations/admin-password-g1-AbC123/value",
      "../.mesh/master.key",
      "logs/../master.key",
    );
    const pieces = fc.oneof(
      fc.array(piece, { minLength: 1, maxLength: 9 }),
      fc.tuple(toState, fc.array(fc.constantFrom(".", "logs/..", "nats-operator/..", ""), { maxLength: 3 }), inState).map(([a, b, c]) => [a, ...b, c]),
      fc.constant(["links", "key"]),
    );
    let refusedSeen = 0;
    fc.assert(
      fc.property(pieces, fc.boolean(), (parts, relative) => {
        const path = relative ? parts.join("/") : `${base}/${parts.join("/")}`;
        let opened: string;
        try {
          // As the kernel opens it: a "relative" one that came out with a leading "/" (an empty first piece) is absolute.
          opened = identity(relative && !path.startsWith("/") ? `${base}/work/${path}` : path);
        } catch {
          return; // nothing the kernel would open
        }
        if (!forbidden.has(opened)) return;
        refusedSeen++;
        expect(checkAdminPassword(provider({ username: "a", passwordFile: path }), policy), `${path} opens a file of the mesh's own`).toBeDefined();
      }),
      { numRuns: 3_000 },
    );
    // The property was not vacuous.
    expect(refusedSeen).toBeGreaterThan(50);
  });
});

describe("realPath and parseBindingGenerationDir", () => {
  it("resolves as the kernel would, and a missing tail as written", () => {
    expect(realPath(join(base, "links", "key"))).toBe(join(state, "master.key"));
    // The symlink first, then `..` from where it leads: not the lexical links/nats-url.
    expect(realPath(`${base}/links/mesh/../nats-url`)).toBe(join(base, "work", "nats-url"));
    expect(realPath(`${base}/nope/a/../b`)).toBe(join(base, "nope", "b"));
    expect(realPath("../work/.mesh/master.key", join(base, "work"))).toBe(join(state, "master.key"));
  });
  it("reads a generation directory's name from the right, hidden (older agents) or not", () => {
    expect(parseBindingGenerationDir("admin-password-g1-AbC123")).toEqual({ requirement: "admin-password", generation: 1 });
    expect(parseBindingGenerationDir(".admin-password-g1-AbC123")).toEqual({ requirement: "admin-password", generation: 1 });
    expect(parseBindingGenerationDir(".a-g1-g22-abcdef")).toEqual({ requirement: "a-g1", generation: 22 });
    expect(parseBindingGenerationDir(".db-g2-abc")).toBeUndefined();
    expect(parseBindingGenerationDir("db")).toBeUndefined();
    expect(parseBindingGenerationDir(".DB-g2-abcdef")).toBeUndefined();
  });
});
