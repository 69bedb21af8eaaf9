/**
 * The npm.registry adapter against a Verdaccio 6.8.0 of this file's own (test/harness/verdaccio.ts
 * installs it into a cache directory on first use and starts it on a free port with the mesh's
 * auth plugin): the provider conformance suite, then what a holder does with the delivered
 * binding through the real npm client (`npm publish`, `npm install`, `npm whoami`, with the
 * binding's npmrc as its only config), refused outside the module's scope and with a retired
 * generation, and a rotation with a holder querying the registry throughout.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync, readdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorCodes, isMeshError } from "@mesh/shared";
import type { BindingValues, GrantRef, ProviderAdapter, ProviderConfig } from "@mesh/providers";
import { createNpmRegistryAdapter } from "../../packages/providers/src/npm-registry.js";
import { freePort } from "../harness/ports.js";
import { startOwnVerdaccio, VERDACCIO_INSTALL_TIMEOUT_MS, type OwnVerdaccio } from "../harness/verdaccio.js";
import { describeProviderConformance, expectMeshError, freshGrant, recordingAdapter } from "./provider-conformance.js";
import { waitFor } from "../harness/wait.js";

const run = promisify(execFile);

let registry: OwnVerdaccio;
let deadPort: number;
/** Every grant an adapter of this file was asked to create, for the clean-up at the end. */
const touched = new Map<string, Omit<GrantRef, "generation">>();
/** Directories the npm runs of this file worked in. */
const scratch: string[] = [];

beforeAll(async () => {
  registry = await startOwnVerdaccio();
  deadPort = await freePort();
}, VERDACCIO_INSTALL_TIMEOUT_MS + 60_000);
afterAll(async () => {
  if (registry) {
    const cleaner = createNpmRegistryAdapter(providerOf());
    for (const grant of touched.values()) await cleaner.delete({ grant });
    await registry.stop();
  }
  for (const d of scratch) rmSync(d, { recursive: true, force: true });
});

const providerOf = (over: Partial<ProviderConfig> = {}): ProviderConfig => ({
  name: "npm-test",
  node: "node-a",
  endpoint: registry.endpoint,
  options: { usersDir: registry.usersDir },
  ...over,
});

const makeAdapter = (over: Partial<ProviderConfig> = {}) => recordingAdapter(createNpmRegistryAdapter(providerOf(over)), touched);

describeProviderConformance("npm.registry", () => makeAdapter(), {
  stateful: true,
  wrongCredential: (b) => ({ ...b, password: `${b.password}x` }),
  unreachable: {
    makeAdapter: () => makeAdapter({ endpoint: `http://127.0.0.1:${deadPort}` }),
    bindings: (b) => ({ ...b, registry: `http://127.0.0.1:${deadPort}/` }),
  },
});

/** A directory of its own with the binding's npmrc as npm's only config, as a holder would set it up. */
function holderDir(b: BindingValues): { dir: string; env: NodeJS.ProcessEnv } {
  const dir = mkdtempSync(join(tmpdir(), "mesh-npm-holder-"));
  scratch.push(dir);
  writeFileSync(join(dir, "npmrc"), b.npmrc!, { mode: 0o600 });
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: dir,
    NPM_CONFIG_USERCONFIG: join(dir, "npmrc"),
    NPM_CONFIG_GLOBALCONFIG: join(dir, "no-global-npmrc"),
    NPM_CONFIG_CACHE: join(dir, "cache"),
    NPM_CONFIG_UPDATE_NOTIFIER: "false",
    NPM_CONFIG_AUDIT: "false",
    NPM_CONFIG_FUND: "false",
  };
  return { dir, env };
}

/** Runs npm with the holder's config; resolves to its exit code and output (never rejects on a non-zero exit). */
async function npm(h: { env: NodeJS.ProcessEnv }, cwd: string, args: string[]): Promise<{ code: number; out: string }> {
  try {
    const { stdout, stderr } = await run("npm", args, { cwd, env: h.env, timeout: 60_000 });
    return { code: 0, out: stdout + stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string; message: string };
    return { code: typeof err.code === "number" ? err.code : 1, out: `${err.stdout ?? ""}${err.stderr ?? ""}${err.message}` };
  }
}

/** A package directory `name@version` with an index.js, ready for `npm publish`. */
function packageDir(parent: string, name: string, version: string): string {
  const dir = join(parent, `src-${name.replace(/[@/]/g, "_")}-${version}`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name, version, main: "index.js", license: "UNLICENSED" }));
  writeFileSync(join(dir, "index.js"), `module.exports = ${JSON.stringify(`${name}@${version}`)};\n`);
  return dir;
}

/** A GET of the registry as the binding's user (what npm sends with `_auth`), or anonymous. */
async function get(path: string, b?: BindingValues): Promise<number> {
  const res = await fetch(new URL(path, registry.endpoint), {
    headers: b ? { authorization: `Basic ${b.auth}`, accept: "application/json" } : { accept: "application/json" },
    signal: AbortSignal.timeout(5_000),
  });
  await res.body?.cancel();
  return res.status;
}

describe("npm.registry adapter, through the npm client", () => {
  let adapter: ProviderAdapter;
  beforeAll(() => {
    adapter = makeAdapter();
  });
  const create = (grant: GrantRef) => adapter.create({ grant, secret: adapter.generate() });

  it("binds the scope, the registry and a ready npmrc, and npm whoami names the generation's user", async () => {
    const grant = freshGrant();
    const { bindings } = await create(grant);
    expect(Object.keys(bindings).sort()).toEqual(["auth", "host", "npmrc", "password", "port", "provider", "registry", "scope", "type", "username"]);
    expect(bindings).toMatchObject({
      type: "npm",
      provider: "npm-test",
      scope: `@${grant.module}`,
      registry: `${registry.endpoint}/`,
      host: "127.0.0.1",
      port: String(registry.port),
    });
    expect(bindings.npmrc).toBe(`@${grant.module}:registry=${registry.endpoint}/\n//127.0.0.1:${registry.port}/:_auth=${bindings.auth}\n`);
    const h = holderDir(bindings);
    const who = await npm(h, h.dir, ["whoami", "--registry", bindings.registry!]);
    expect(who, who.out).toMatchObject({ code: 0 });
    expect(who.out.trim().split("\n")[0]).toBe(bindings.username);
    // What the plugin reads holds no password, and only the provisioner may write it.
    const file = join(registry.usersDir, `${bindings.username}.json`);
    expect(readFileSync(file, "utf8")).not.toContain(bindings.password);
    expect(statSync(file).mode & 0o777).toBe(0o640);
    await adapter.delete({ grant });
  });

  it("publishes and installs a package of the module's scope; another scope, an unscoped name and anonymous users are refused", async () => {
    const grant = freshGrant();
    const other = freshGrant();
    const { bindings } = await create(grant);
    const { bindings: otherBindings } = await create(other);
    const h = holderDir(bindings);
    const name = `${bindings.scope}/lib`;

    const pub = await npm(h, packageDir(h.dir, name, "1.0.0"), ["publish", "--registry", bindings.registry!]);
    expect(pub, pub.out).toMatchObject({ code: 0 });
    const app = join(h.dir, "app");
    mkdirSync(app);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true }));
    const inst = await npm(h, app, ["install", `${name}@1.0.0`]);
    expect(inst, inst.out).toMatchObject({ code: 0 });
    expect(readFileSync(join(app, "node_modules", name, "index.js"), "utf8")).toContain(`${name}@1.0.0`);

    // Outside the scope: another module's, and a name of no scope.
    for (const foreign of [`${otherBindings.scope}/lib`, `mesh-unscoped-${grant.module}`]) {
      const refused = await npm(h, packageDir(h.dir, foreign, "1.0.0"), ["publish", "--registry", bindings.registry!]);
      expect(refused.code, refused.out).not.toBe(0);
      expect(refused.out).toMatch(/E403|403/);
      expect(refused.out).toContain(`may publish only packages ${bindings.scope}/*`);
    }
    // The other module's user cannot read this module's package, nor can anyone anonymous.
    expect(await get(`/${encodeURIComponent(name)}`, bindings)).toBe(200);
    expect(await get(`/${encodeURIComponent(name)}`, otherBindings)).toBe(403);
    expect(await get(`/${encodeURIComponent(name)}`)).toBe(401);
    const otherHolder = holderDir(otherBindings);
    const stolen = await npm(otherHolder, otherHolder.dir, ["view", name, "--registry", otherBindings.registry!]);
    expect(stolen.code, stolen.out).not.toBe(0);
    await adapter.delete({ grant });
    await adapter.delete({ grant: other });
  });

  it("a retired generation can neither install nor publish, while the next one can", async () => {
    const grant = freshGrant(1);
    const g1 = (await create(grant)).bindings;
    const h1 = holderDir(g1);
    const name = `${g1.scope}/lib`;
    expect((await npm(h1, packageDir(h1.dir, name, "1.0.0"), ["publish", "--registry", g1.registry!])).code).toBe(0);
    const g2 = (await create({ ...grant, generation: 2 })).bindings;
    await adapter.retire({ grant });

    expect(await adapter.login({ bindings: g1 })).toMatchObject({ ok: false, reason: "rejected" });
    const app = join(h1.dir, "app");
    mkdirSync(app);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true }));
    const inst = await npm(h1, app, ["install", `${name}@1.0.0`, "--prefer-online"]);
    expect(inst.code, inst.out).not.toBe(0);
    const pub = await npm(h1, packageDir(h1.dir, name, "1.0.1"), ["publish", "--registry", g1.registry!]);
    expect(pub.code, pub.out).not.toBe(0);

    const h2 = holderDir(g2);
    const app2 = join(h2.dir, "app");
    mkdirSync(app2);
    writeFileSync(join(app2, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true }));
    const ok = await npm(h2, app2, ["install", `${name}@1.0.0`]);
    expect(ok, ok.out).toMatchObject({ code: 0 });
    expect((await npm(h2, packageDir(h2.dir, name, "1.0.1"), ["publish", "--registry", g2.registry!])).code).toBe(0);
    await adapter.delete({ grant });
  });

  it("rotation: a holder reading its package every 20 ms through k, k+1 and the retire of k sees no failure", async () => {
    const grant = freshGrant(1);
    const g1 = (await create(grant)).bindings;
    const h = holderDir(g1);
    const name = `${g1.scope}/lib`;
    expect((await npm(h, packageDir(h.dir, name, "1.0.0"), ["publish", "--registry", g1.registry!])).code).toBe(0);

    // The holder as a module runs it: it reads with the binding it holds, and takes the next one when delivered.
    let held = g1;
    const failures: string[] = [];
    let reads = 0;
    let stopped = false;
    const holder = (async () => {
      while (!stopped) {
        const b = held;
        const status = await get(`/${encodeURIComponent(name)}`, b).catch((e: Error) => e.message);
        if (status === 200) reads++;
        else failures.push(`${b.username}: ${status}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const readsBy = async (n: number) => {
      const until = reads + n;
      await waitFor(
        () => `${n} more reads by the holders (${reads - until + n} came)`,
        () => reads >= until || failures.length > 0,
        30_000,
        20,
      );
    };
    try {
      await readsBy(5);
      const g2 = (await create({ ...grant, generation: 2 })).bindings; // staged beside k
      await readsBy(5);
      held = g2; // delivered: the holder switches
      await readsBy(5);
      await adapter.retire({ grant }); // every holder confirmed: k goes
      await readsBy(10);
      const g3 = (await create({ ...grant, generation: 3 })).bindings; // the next rotation reuses k's user
      await readsBy(5);
      held = g3;
      await readsBy(5);
      await adapter.retire({ grant: { ...grant, generation: 2 } });
      await readsBy(10);
    } finally {
      stopped = true;
      await holder;
    }
    expect(failures).toEqual([]);
    expect(reads).toBeGreaterThanOrEqual(45);
    expect(await get(`/${encodeURIComponent(name)}`, g1)).toBe(401);
    await adapter.delete({ grant });
  });

  it("issues no token: npm login's request is refused for the mesh's users and for new ones, so nothing outlives a retire", async () => {
    const { bindings } = await create(freshGrant());
    for (const [name, password] of [
      [bindings.username!, bindings.password!],
      ["intruder_a", "whatever-password"],
    ] as const) {
      const res = await fetch(new URL(`/-/user/org.couchdb.user:${name}`, registry.endpoint), {
        method: "PUT",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ _id: `org.couchdb.user:${name}`, name, password, type: "user", roles: [], date: new Date().toISOString() }),
      });
      const body = (await res.json()) as { token?: string; error?: string };
      expect(res.status).toBe(409);
      expect(body.token).toBeUndefined();
      expect(body.error).toContain("made by the mesh");
    }
  });

  it("refuses a file of the grant's user that the mesh did not make, and leaves it alone on delete", async () => {
    const grant = freshGrant();
    const user = `${grant.module.replaceAll("-", "__")}_${grant.requirement}_a`;
    const foreign = JSON.stringify({ user, scope: "@elsewhere", mark: "someone else", generation: 1, hash: null });
    writeFileSync(join(registry.usersDir, `${user}.json`), foreign);
    const e = await expectMeshError(create(grant), ErrorCodes.Conflict);
    expect(e.message).toContain("remove that file, or rename the requirement");
    await adapter.delete({ grant });
    expect(readFileSync(join(registry.usersDir, `${user}.json`), "utf8")).toBe(foreign);
    rmSync(join(registry.usersDir, `${user}.json`));
  });

  it("says what to do when the users directory is missing or options.usersDir is not set, naming no secret", async () => {
    const missing = makeAdapter({ options: { usersDir: join(registry.usersDir, "no-such-dir") } });
    const secret = missing.generate();
    const e = await expectMeshError(missing.create({ grant: freshGrant(), secret }), ErrorCodes.ProviderMisconfigured);
    expect(e.message).toContain("does not exist");
    expect(e.message).toContain("auth.mesh-scopes.usersDir");
    expect(e.message).not.toContain(secret.password);
    const unset = makeAdapter({ options: {} });
    const e2 = await expectMeshError(unset.observe({ grant: freshGrant() }), ErrorCodes.ProviderMisconfigured);
    expect(e2.message).toContain("options.usersDir is not set");
    // A login-only adapter (an agent's, made without options) still logs in.
    const { bindings } = await create(freshGrant());
    expect(await unset.login({ bindings })).toEqual({ ok: true });
    expect(isMeshError(e2) && e2.retryable).toBe(false);
  });

  it("leaves no temporary file in the users directory", () => {
    expect(readdirSync(registry.usersDir).filter((f) => f.endsWith(".tmp"))).toEqual([]);
  });
});
