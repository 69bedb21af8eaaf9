import { execFileSync } from "node:child_process";
import {
  existsSync,
  lstatSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
  mkdirSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { isMeshError } from "@mesh/shared";
import {
  bindingGeneration,
  envName,
  migrateBindings,
  partBindingsDir,
  partEnvFile,
  pruneBinding,
  quoteEnvValue,
  removeBinding,
  renderPartEnv,
  setBindingEnv,
  writeBinding,
} from "./bindings-writer.js";

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "mesh-bindings-"));
});
afterEach(() => {
  rmSync(root, { recursive: true, force: true });
});

const db = (generation: number, password: string) => ({
  root,
  module: "shop",
  part: "api",
  requirement: "db",
  generation,
  values: { type: "postgresql", provider: "pg-main", username: "shop_db_a", password, database: "shop_db" },
});

const mode = (p: string) => statSync(p).mode & 0o777;

const partDir = () => join(root, "shop", "api");
const gens = () => join(root, "shop", ".api.generations");
/** The generation directory `<part>/db` points to, by its name in the generations directory. */
const target = () => readlinkSync(join(partDir(), "db")).replace("../.api.generations/", "");

describe("writeBinding", () => {
  it("writes one file per key under <root>/<module>/<part>/<requirement> with private modes", () => {
    const r = writeBinding(db(1, "s3cret"));
    const dir = join(root, "shop", "api", "db");
    expect(r.path).toBe(dir);
    expect(r.envFile).toBe(join(root, "shop", "api.env"));
    expect(r.changed).toBe(true);
    expect(lstatSync(dir).isSymbolicLink()).toBe(true);
    expect(readlinkSync(dir)).toMatch(/^\.\.\/\.api\.generations\/db-g1-[A-Za-z0-9]{6}$/);
    expect(readdirSync(dir).sort()).toEqual(["database", "password", "provider", "type", "username"]);
    expect(readFileSync(join(dir, "password"), "utf8")).toBe("s3cret");
    expect(readFileSync(join(dir, "type"), "utf8")).toBe("postgresql");
    expect(mode(join(dir, "password"))).toBe(0o600);
    expect(mode(dir)).toBe(0o700); // the generation's directory, through the link
    expect(mode(join(root, "shop"))).toBe(0o700);
    expect(mode(partDir())).toBe(0o700);
    expect(mode(gens())).toBe(0o700);
    expect(bindingGeneration(root, "shop", "api", "db")).toBe(1);
  });

  it("keeps the part's directory to its bindings alone: env file and generations beside it", () => {
    writeBinding(db(1, "one"));
    writeBinding({ ...db(1, "x"), requirement: "identity" });
    writeBinding(db(2, "two"));
    expect(readdirSync(partDir()).sort()).toEqual(["db", "identity"]);
    expect(readdirSync(join(root, "shop")).sort()).toEqual([".api.generations", "api", "api.env"]);
    expect(partBindingsDir(root, "shop", "api")).toBe(partDir());
    expect(partEnvFile(root, "shop", "api")).toBe(join(root, "shop", "api.env"));
  });

  it("writes a requirement's env into the env file, keeps it across generations, changes it in place, and drops it with the binding", () => {
    const env = () => readFileSync(join(root, "shop", "api.env"), "utf8");
    writeBinding({ ...db(1, "one"), env: { PGPASSWORD: "password" } });
    expect(env()).toContain("PGPASSWORD='one'\nDB_DATABASE=");
    // The binding's own directory holds its keys alone.
    expect(readdirSync(join(partDir(), "db")).sort()).toEqual(["database", "password", "provider", "type", "username"]);
    writeBinding({ ...db(2, "two"), env: { PGPASSWORD: "password" } });
    expect(env()).toContain("PGPASSWORD='two'\n");
    expect(setBindingEnv(root, "shop", "api", "db", { PGUSER: "username", PGPASS: "secret" })).toMatchObject({ envUnmapped: ["PGPASS"] });
    expect(env()).toContain("PGUSER='shop_db_a'\n");
    expect(env()).not.toContain("PGPASSWORD");
    expect(setBindingEnv(root, "shop", "api", "absent", { X: "y" })).toBeUndefined();
    removeBinding(root, "shop", "api", "db");
    expect(readdirSync(gens()).filter((e) => e.startsWith("."))).toEqual([]);
    expect(env()).not.toContain("PGUSER");
  });

  it("replaces a previous generation; its directory stays for the grace, then goes", () => {
    const t0 = Date.now();
    const at = (ms: number) => ({ now: new Date(t0 + ms), graceMs: 1_000 });
    const r1 = writeBinding(db(1, "one"), at(0));
    expect(r1.retained).toBe(false);
    const first = target();
    const r2 = writeBinding(db(2, "two"), at(10));
    expect(r2.changed).toBe(true);
    expect(r2.retained).toBe(true);
    expect(readFileSync(join(partDir(), "db", "password"), "utf8")).toBe("two");
    expect(bindingGeneration(root, "shop", "api", "db")).toBe(2);
    expect(existsSync(join(gens(), first))).toBe(true);
    // Within the grace, pruning keeps it; after, it is removed.
    expect(pruneBinding(root, "shop", "api", "db", at(500))).toBe(true);
    expect(existsSync(join(gens(), first))).toBe(true);
    expect(pruneBinding(root, "shop", "api", "db", at(1_100))).toBe(false);
    expect(existsSync(join(gens(), first))).toBe(false);
    // A later write removes replaced directories whose grace has passed.
    const second = target();
    writeBinding(db(3, "three"), at(2_000));
    const third = target();
    expect(existsSync(join(gens(), second))).toBe(true);
    writeBinding(db(4, "four"), at(3_500));
    expect(existsSync(join(gens(), second))).toBe(false);
    expect(existsSync(join(gens(), third))).toBe(true);
    pruneBinding(root, "shop", "api", "db", { graceMs: 0 });
    // Only the link in the part's directory; one generation directory beside it.
    expect(readdirSync(partDir())).toEqual(["db"]);
    expect(readdirSync(gens())).toEqual([target()]);
    expect(readFileSync(join(partDir(), "db", "password"), "utf8")).toBe("four");
  });

  it("prunes nothing that is not its own, and tolerates a missing binding", () => {
    expect(pruneBinding(root, "nope", "api", "db")).toBe(false);
    writeBinding(db(1, "one"));
    writeBinding({ ...db(1, "x"), requirement: "cache" });
    writeBinding(db(2, "two"));
    pruneBinding(root, "shop", "api", "db", { graceMs: 0 });
    expect(readFileSync(join(partDir(), "cache", "password"), "utf8")).toBe("x");
    expect(readdirSync(gens())).toHaveLength(2);
  });

  it("is idempotent for the same generation and values", () => {
    writeBinding(db(3, "same"));
    const before = target();
    const r = writeBinding(db(3, "same"));
    expect(r.changed).toBe(false);
    expect(target()).toBe(before);
  });

  it("rewrites the same generation when the files on disk no longer match", () => {
    writeBinding(db(3, "same"));
    rmSync(join(gens(), target(), "password"));
    const r = writeBinding(db(3, "same"));
    expect(r.changed).toBe(true);
    expect(readFileSync(join(partDir(), "db", "password"), "utf8")).toBe("same");
  });

  it("removes leftovers of interrupted writes", () => {
    mkdirSync(join(gens(), "db-g7-abcDEF"), { recursive: true });
    writeFileSync(join(gens(), ".link-db-abc"), "x");
    writeFileSync(join(gens(), ".env-tmp-123"), "x");
    // An interrupted write's directory goes once its grace (counted from its mtime) has passed.
    writeBinding(db(8, "x"), { now: new Date(Date.now() + 5_000) });
    expect(existsSync(join(gens(), ".link-db-abc"))).toBe(false);
    expect(existsSync(join(gens(), "db-g7-abcDEF"))).toBe(false);
    expect(existsSync(join(gens(), ".env-tmp-123"))).toBe(false);
  });

  it("replaces a plain directory left at the requirement path", () => {
    mkdirSync(join(root, "shop", "api", "db"), { recursive: true });
    writeFileSync(join(root, "shop", "api", "db", "stale"), "x");
    writeBinding(db(1, "p"));
    expect(lstatSync(join(root, "shop", "api", "db")).isSymbolicLink()).toBe(true);
    expect(existsSync(join(root, "shop", "api", "db", "stale"))).toBe(false);
  });

  it("never leaves the path missing while 200 generations are swapped under a reader", async () => {
    writeBinding(db(1, "g1"));
    const file = join(root, "shop", "api", "db", "password");
    // A reader on its own thread, so it really runs while this thread swaps.
    const worker = new Worker(
      `const { readFileSync } = require("node:fs");
       const { parentPort, workerData } = require("node:worker_threads");
       let reads = 0, missing = 0, bad = 0, stop = false;
       parentPort.on("message", () => { stop = true; });
       (function loop() {
         const until = Date.now() + 20;
         while (Date.now() < until) {
           try { const v = readFileSync(workerData, "utf8"); reads++; if (!/^g\\d+$/.test(v)) bad++; }
           catch (e) { if (e.code === "ENOENT") missing++; else bad++; }
         }
         if (stop) parentPort.postMessage({ reads, missing, bad }); else setImmediate(loop);
       })();`,
      { eval: true, workerData: file },
    );
    await new Promise((r) => setTimeout(r, 20));
    for (let g = 2; g <= 201; g++) writeBinding(db(g, `g${g}`));
    const result = await new Promise<{ reads: number; missing: number; bad: number }>((resolve) => {
      worker.once("message", resolve);
      worker.postMessage("stop");
    });
    await worker.terminate();
    expect(result.reads).toBeGreaterThan(200);
    expect(result.missing).toBe(0);
    expect(result.bad).toBe(0);
    expect(readFileSync(file, "utf8")).toBe("g201");
    // Replaced generations stay for their grace; pruning without one leaves only the current.
    pruneBinding(root, "shop", "api", "db", { graceMs: 0 });
    expect(readdirSync(gens())).toEqual([target()]);
    expect(readdirSync(partDir())).toEqual(["db"]);
  });

  it("regenerates <part>.env from every requirement of the part", () => {
    writeBinding(db(1, "pw"));
    writeBinding({
      root,
      module: "shop",
      part: "api",
      requirement: "session-key",
      generation: 1,
      values: { type: "secret", provider: "builtin-secret", value: "k3y" },
    });
    const env = readFileSync(join(root, "shop", "api.env"), "utf8");
    const lines = env.split("\n").filter((l) => l && !l.startsWith("#"));
    expect(lines).toEqual([
      "DB_DATABASE='shop_db'",
      "DB_PASSWORD='pw'",
      "DB_PROVIDER='pg-main'",
      "DB_TYPE='postgresql'",
      "DB_USERNAME='shop_db_a'",
      "SESSION_KEY_PROVIDER='builtin-secret'",
      "SESSION_KEY_TYPE='secret'",
      "SESSION_KEY_VALUE='k3y'",
    ]);
    expect(mode(join(root, "shop", "api.env"))).toBe(0o600);
    // A new generation of one requirement is reflected, the other stays.
    writeBinding(db(2, "pw2"));
    const env2 = readFileSync(join(root, "shop", "api.env"), "utf8");
    expect(env2).toContain("DB_PASSWORD='pw2'\n");
    expect(env2).toContain("SESSION_KEY_VALUE='k3y'\n");
    expect(env2).not.toContain("'pw'");
  });

  it("writes an env file that sh reads back exactly, awkward values included", () => {
    const awkward = `it's "quoted" $HOME \`id\` back\\slash\nsecond line`;
    writeBinding({ root, module: "m", part: "p", requirement: "r", generation: 1, values: { plain: "a b  c", awkward } });
    const envFile = join(root, "m", "p.env");
    const out = execFileSync("sh", ["-c", `set -a; . "$1"; printf '%s\\0%s' "$R_PLAIN" "$R_AWKWARD"`, "sh", envFile], { encoding: "utf8", env: {} });
    expect(out).toBe(`a b  c\0${awkward}`);
  });

  it.each([
    ["module", { module: "../etc" }],
    ["module", { module: "Shop" }],
    ["part", { part: "api/../../x" }],
    ["part", { part: "." }],
    ["requirement", { requirement: ".." }],
    ["requirement", { requirement: "db.x" }],
    ["binding key", { values: { "../passwd": "x" } }],
    ["binding key", { values: { "a/b": "x" } }],
    ["binding key", { values: { ".hidden": "x" } }],
    ["binding key", { values: { Password: "x" } }],
  ])("refuses a bad %s (%j) and writes nothing", (what, patch) => {
    let err: unknown;
    try {
      writeBinding({ ...db(1, "x"), ...patch });
    } catch (e) {
      err = e;
    }
    expect(isMeshError(err, "InvalidName")).toBe(true);
    expect((err as Error).message).toContain(what);
    expect(readdirSync(root)).toEqual([]);
  });

  it("refuses a bad generation and a NUL in a value without quoting the value", () => {
    expect(() => writeBinding(db(0, "x"))).toThrow(/generation/);
    expect(() => writeBinding(db(1.5, "x"))).toThrow(/generation/);
    let err: unknown;
    try {
      writeBinding(db(1, "sec\0ret"));
    } catch (e) {
      err = e;
    }
    expect(isMeshError(err, "InvalidRequest")).toBe(true);
    expect((err as Error).message).not.toContain("sec");
    expect(readdirSync(root)).toEqual([]);
  });
});

describe("migrateBindings", () => {
  /** A part's directory as agents before the generations directory wrote it. */
  const legacyTree = () => {
    const dir = partDir();
    const gen = (name: string, values: Record<string, string>) => {
      mkdirSync(join(dir, name), { recursive: true });
      for (const [k, v] of Object.entries(values)) writeFileSync(join(dir, name, k), v);
    };
    gen(".db-g3-abcDEF", { type: "postgresql", password: "three" });
    symlinkSync(".db-g3-abcDEF", join(dir, "db"));
    gen(".db-g2-oldOLD", { type: "postgresql", password: "two" });
    gen(".identity-g1-idID12", { type: "nats", creds: "c" });
    symlinkSync(".identity-g1-idID12", join(dir, "identity"));
    writeFileSync(join(dir, "part.env"), "DB_PASSWORD='three'\n");
    writeFileSync(join(dir, ".part.env.tmp-1"), "x");
    writeFileSync(join(dir, ".db.link-abc"), "x");
    // Replaced long ago: its grace has passed.
    const old = new Date(Date.now() - 60_000);
    utimesSync(join(dir, ".db-g2-oldOLD"), old, old);
  };

  it("moves an old-layout part over at the same generations and values, leaving no stray file", () => {
    legacyTree();
    const t0 = new Date();
    const r = migrateBindings(root, { now: t0, graceMs: 1_000 });
    expect(r.migrated).toEqual([
      { module: "shop", part: "api", binding: "db" },
      { module: "shop", part: "api", binding: "identity" },
    ]);
    expect(bindingGeneration(root, "shop", "api", "db")).toBe(3);
    expect(bindingGeneration(root, "shop", "api", "identity")).toBe(1);
    expect(readFileSync(join(partDir(), "db", "password"), "utf8")).toBe("three");
    expect(target()).toMatch(/^db-g3-/);
    expect(readFileSync(join(root, "shop", "api.env"), "utf8")).toContain("DB_PASSWORD='three'\n");
    // Within the grace only the replaced generations a reader may still be in are left.
    expect(readdirSync(partDir()).sort()).toEqual([".db-g3-abcDEF", ".identity-g1-idID12", "db", "identity"]);
    expect(r.retained).toEqual(r.migrated);
    for (const b of r.retained) pruneBinding(root, b.module, b.part, b.binding, { now: new Date(t0.getTime() + 1_100), graceMs: 1_000 });
    expect(readdirSync(partDir()).sort()).toEqual(["db", "identity"]);
    expect(readdirSync(join(root, "shop")).sort()).toEqual([".api.generations", "api", "api.env"]);
    // Once moved, there is nothing more to do.
    expect(migrateBindings(root)).toEqual({ migrated: [], retained: [] });
  });

  it("never moves back a binding another agent sharing the root wrote meanwhile", () => {
    legacyTree();
    // The other agent, already moved on, wrote generation 4 in the current layout.
    const other = writeBinding({ ...db(4, "four"), values: { type: "postgresql", password: "four" } });
    expect(other.changed).toBe(true);
    // What this agent read before (the old link) is no longer there: only the swap with it is refused.
    const r = writeBinding({ ...db(3, "three"), values: { type: "postgresql", password: "three" } }, { onlyOver: ".db-g3-abcDEF" });
    expect(r.changed).toBe(false);
    expect(bindingGeneration(root, "shop", "api", "db")).toBe(4);
    expect(readdirSync(gens()).filter((e) => e.startsWith("db-g3-"))).toEqual([]);
  });

  it("leaves a root in the current layout alone", () => {
    writeBinding(db(1, "one"));
    const before = target();
    expect(migrateBindings(root)).toEqual({ migrated: [], retained: [] });
    expect(target()).toBe(before);
    expect(migrateBindings(join(root, "missing"))).toEqual({ migrated: [], retained: [] });
  });
});

describe("env rendering", () => {
  it.each([
    ["db", "password", "DB_PASSWORD"],
    ["session-key", "value", "SESSION_KEY_VALUE"],
    ["a2", "x_y-z", "A2_X_Y_Z"],
  ])("names %s + %s as %s", (req, key, name) => {
    expect(envName(req, key)).toBe(name);
  });

  it.each([
    ["plain", "'plain'"],
    ["", "''"],
    ['a$b`c\\d"e', "'a$b`c\\d\"e'"],
    ["it's", `"it's"`],
    [`it's $x "y" \`z\` \\`, `"it's \\$x \\"y\\" \\\`z\\\` \\\\"`],
  ])("quotes %j as %s", (value, quoted) => {
    expect(quoteEnvValue(value)).toBe(quoted);
  });

  it("gives the names a requirement's env maps first, beside the plain ones, and reports a key its binding lacks", () => {
    const r = renderPartEnv([
      {
        requirement: "db",
        values: new Map([
          ["uri", "postgresql://x"],
          ["password", "p"],
        ]),
        env: { DATABASE_URL: "uri", DB_PASSWORD: "username", PGHOST: "host" },
      },
      { requirement: "cache", values: new Map([["uri", "redis://y"]]) },
    ]);
    expect(r.text.split("\n").slice(2)).toEqual(["DATABASE_URL='postgresql://x'", "CACHE_URI='redis://y'", "DB_PASSWORD='p'", "DB_URI='postgresql://x'", ""]);
    // DB_PASSWORD is asked for as the username, which the binding lacks: the plain name keeps its value.
    expect(r.unmapped).toEqual(["DB_PASSWORD", "PGHOST"]);
    const injected = renderPartEnv([{ requirement: "db", values: new Map([["uri", "x"]]), env: { "A\nB": "uri" } }]);
    expect(injected.unmapped).toEqual(["A\nB"]);
    expect(injected.text).not.toContain("A\nB");
    expect(r.collisions).toEqual([]);
  });

  it("keeps the first of two colliding names and reports it", () => {
    const r = renderPartEnv([
      { requirement: "a-b", values: new Map([["c", "1"]]) },
      { requirement: "a", values: new Map([["b-c", "2"]]) },
    ]);
    expect(r.collisions).toEqual(["A_B_C"]);
    expect(r.text).toContain("A_B_C='2'\n");
    expect(r.text).not.toContain("'1'");
  });
});
