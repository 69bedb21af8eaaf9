/**
 * `meshctl console` in a real headless browser (Debian's chromium, driven by playwright-core),
 * against the example mesh as a new user runs it: `meshctl up` with the example files (the
 * example PostgreSQL provider pointed at a server of this test's own, so no other test's
 * databases are touched), and `meshctl console` started from the same directory, so it finds
 * the server and the operator's credentials as every meshctl command does.
 *
 * The page shows the example's states; a module that becomes unsatisfiable turns so without a
 * reload; a rotation of a grant held on two nodes shows its fan-out as it runs (one holder held
 * back by stopping its agent, so the rotation stalls, then commits once the agent resumes).
 * Screenshots go to test-artifacts/console/. Every response body and live message the browser
 * got is then searched for every credential value the mesh ever generated (decrypted from
 * mesh-credentials with the master key): none may be there. Requests without the token, or
 * with a foreign Host or Origin, are refused.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import { decrypt, loadMasterKey, type Encrypted } from "@mesh/shared";
import { connectNats, natsIdentity, openStore } from "@mesh/shared/runtime";
import { CredentialRecord, storeKeyRing } from "@mesh/providers";
import { ownServerTls, runMeshctl, meshctlBin } from "./harness/bootstrapped-mesh.js";
import { startBrowser, type TestBrowser } from "./harness/browser.js";
import { startPostgres, type Postgres } from "./harness/postgres.js";
import { waitFor } from "./harness/wait.js";
import { PG_ADMIN_ENV } from "./fixtures.js";

const repo = fileURLToPath(new URL("..", import.meta.url));
const example = (f: string) => join(repo, "examples", f);

/** The environment of a new user's shell: no NATS address or identity of the mesh's. */
const freshEnv = { ...process.env, NATS_URL: "", MESH_NATS_CREDENTIALS: "", MESH_NATS_USER: "", MESH_MASTER_KEY: "", MESH_MASTER_KEY_FILE: "" };

let db: Postgres;
let cwd: string;
let up: ChildProcess | undefined;
let upOut = "";
let consoleProc: ChildProcess | undefined;
let consoleOut = "";
let consoleUrl: URL;
let browser: TestBrowser | undefined;
/** What the test's own requests got, searched for secrets too. */
const ownBodies: string[] = [];

const meshctl = (args: string[]) => runMeshctl(cwd, args, { ...freshEnv, [PG_ADMIN_ENV]: db.adminPassword });

/** `meshctl status --json`'s modules by name. */
async function states(): Promise<Record<string, string>> {
  const r = await meshctl(["status", "--json"]);
  if (r.code !== 0) return {};
  const report = JSON.parse(r.stdout) as { modules: Array<{ module: string; state: string }> };
  return Object.fromEntries(report.modules.map((m) => [m.module, m.state]));
}

/** The PID of the agent of `node` that `up` runs. */
function agentPid(node: string, natsUrl: string): number | undefined {
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      if (!readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("services/agent/dist/main.js")) continue;
      const env = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
      if (env.includes(`MESH_NODE=${node}`) && env.includes(`NATS_URL=${natsUrl}`)) return Number(pid);
    } catch {
      // gone meanwhile
    }
  }
  return undefined;
}

/** A GET with exactly these headers (fetch would not send a Host of our choosing). */
function rawGet(path: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: consoleUrl.hostname, port: consoleUrl.port, path, method: "GET", headers, setHost: false }, (res) => {
      let body = "";
      res.on("data", (d: Buffer) => (body += d.toString()));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

const withToken = (path: string) => `${path}${path.includes("?") ? "&" : "?"}token=${consoleUrl.searchParams.get("token")}`;

/** Every value of every generation of every credential the mesh holds or held, decrypted. */
async function everyCredentialValue(): Promise<Array<{ value: string; where: string }>> {
  const url = readFileSync(join(cwd, ".mesh/nats-url"), "utf8").trim();
  const nc = await connectNats(url, { ...natsIdentity({ MESH_NATS_CREDENTIALS: join(cwd, ".mesh/nats-operator/admin.creds") }), ...ownServerTls(cwd) });
  try {
    const store = await openStore(nc);
    const { key } = loadMasterKey({}, join(cwd, ".mesh/master.key"));
    // Records are under the master key's data keys (grant mesh/master-key), those under the local key-encryption key.
    const ring = storeKeyRing(store, key);
    const values = new Map<string, string>();
    for await (const e of await store.kv.credentials.history({ key: ">" })) {
      if (e.operation !== "PUT" || e.length === 0) continue;
      const record = CredentialRecord.parse(e.json());
      const opener = (await ring.opening((record.encrypted as Encrypted).keyId)) ?? key;
      const stored = JSON.parse(decrypt(opener, record.encrypted as Encrypted, e.key)) as { secret: Record<string, string>; bindings?: Record<string, string> };
      // The secret material, and the binding files that carry it (a URI is not one: a NATS identity's is the server's address).
      for (const [k, v] of Object.entries(stored.secret)) values.set(v, `${e.key} secret.${k}`);
      for (const [k, v] of Object.entries(stored.bindings ?? {})) if (/password|creds|seed|token|value/i.test(k)) values.set(v, `${e.key} bindings.${k}`);
    }
    return [...values].filter(([v]) => v.length >= 8).map(([value, where]) => ({ value, where }));
  } finally {
    await nc.close();
  }
}

beforeAll(async () => {
  db = await startPostgres();
  cwd = mkdtempSync(join(tmpdir(), "mesh-console-"));
  // The example provider as shipped, pointed at this test's server (its admin asks for a password).
  const pg = parse(readFileSync(example("providers/postgres.yaml"), "utf8")) as Record<string, unknown>;
  writeFileSync(join(cwd, "postgres.yaml"), stringify({ ...pg, endpoint: db.endpoint, admin: { username: db.adminUser, passwordEnv: PG_ADMIN_ENV } }));
  up = spawn(process.execPath, [meshctlBin, "up", "-f", join(cwd, "postgres.yaml"), "-f", example("shop.yaml"), "-f", example("nothing.yaml")], {
    cwd,
    env: { ...freshEnv, [PG_ADMIN_ENV]: db.adminPassword },
    stdio: ["ignore", "pipe", "pipe"],
  });
  up.stdout!.on("data", (d: Buffer) => (upOut += d.toString()));
  up.stderr!.on("data", (d: Buffer) => (upOut += d.toString()));
  await waitFor("up to run every service on its own identity", () => /with the identities the mesh granted them/.test(upOut), 90_000).catch((e) => {
    throw new Error(`${(e as Error).message}\n--- up printed:\n${upOut}`);
  });
  await waitFor(
    "shop Ready and static-site NothingRequired",
    async () => {
      const s = await states();
      return s.shop === "Ready" && s["static-site"] === "NothingRequired" && s.mesh === "Ready";
    },
    60_000,
  );

  consoleProc = spawn(process.execPath, [meshctlBin, "console", "--listen", "127.0.0.1:0"], { cwd, env: freshEnv, stdio: ["ignore", "pipe", "pipe"] });
  consoleProc.stdout!.on("data", (d: Buffer) => (consoleOut += d.toString()));
  consoleProc.stderr!.on("data", (d: Buffer) => (consoleOut += d.toString()));
  const first = await waitFor("the console to print its URL", () => /^(http:\/\/127\.0\.0\.1:\d+\/\?token=[\w-]+)\n/.exec(consoleOut)?.[1], 30_000).catch(
    (e) => {
      throw new Error(`${(e as Error).message}\n--- console printed:\n${consoleOut}`);
    },
  );
  consoleUrl = new URL(first);
  browser = await startBrowser();
}, 180_000);

afterAll(async () => {
  await browser?.close();
  for (const p of [consoleProc, up]) {
    if (p && p.exitCode === null && p.signalCode === null) {
      const exited = new Promise((r) => p.once("exit", r));
      p.kill("SIGTERM");
      const t = setTimeout(() => p.kill("SIGKILL"), 15_000);
      await exited;
      clearTimeout(t);
    }
  }
  if (cwd && process.env.MESH_TEST_KEEP_DIRS !== "1") rmSync(cwd, { recursive: true, force: true });
  await db?.stop();
}, 60_000);

describe("meshctl console in a headless browser", () => {
  it("prints its URL with the token on its first line, and refuses requests without it or with a foreign Host or Origin", async () => {
    expect(consoleOut.split("\n")[0]).toBe(consoleUrl.toString());
    const host = consoleUrl.host;
    const ok = await rawGet(withToken("/"), { Host: host });
    expect(ok.status).toBe(200);
    ownBodies.push(ok.body);

    const cases: Array<[string, string, Record<string, string>, number, string]> = [
      ["no token", "/", { Host: host }, 401, "no token in this request: open the URL meshctl console printed"],
      ["a wrong token", "/?token=guess", { Host: host }, 401, "a wrong token"],
      ["no token, an asset", "/assets/console.js", { Host: host }, 401, "no token"],
      ["no token, the live channel", "/events?path=/", { Host: host }, 401, "no token"],
      ["a foreign Host", withToken("/"), { Host: `evil.example:${consoleUrl.port}` }, 421, "does not serve the host"],
      ["a foreign Origin", withToken("/"), { Host: host, Origin: "http://evil.example" }, 403, "requests from another site"],
      ["a foreign Origin on the live channel", withToken("/events?path=/"), { Host: host, Origin: "http://evil.example" }, 403, "requests from another site"],
    ];
    for (const [what, path, headers, status, words] of cases) {
      const r = await rawGet(path, headers);
      expect(r.status, what).toBe(status);
      expect(r.body, what).toContain(words);
      ownBodies.push(r.body);
    }
    const post = await fetch(withToken(consoleUrl.origin + "/"), { method: "POST", body: "x" });
    expect(post.status).toBe(405);
  });

  it("shows the example mesh with the right states, as text in the page and in the graph", async () => {
    const page = browser!.page;
    await page.goto(consoleUrl.toString());
    // The first render is complete before the live channel opens.
    await expect(page.locator('tbody[data-module="shop"]').getAttribute("data-state")).resolves.toBe("Ready");
    expect(await page.locator('tbody[data-module="static-site"]').getAttribute("data-state")).toBe("NothingRequired");
    expect(await page.locator('tbody[data-module="mesh"]').getAttribute("data-state")).toBe("Ready");
    expect(await page.locator('tr[data-grant="shop/db"]').getAttribute("data-tone")).toBe("ok");
    expect(await page.locator('tr[data-grant="shop/session-key"]').getAttribute("data-tone")).toBe("ok");
    expect(await page.locator('tr[data-provider="pg-main"]').getAttribute("data-state")).toBe("installed");
    // The graph's boxes carry their names and states as text.
    expect(await page.locator('g[data-node="module:shop"] text.state').textContent()).toBe("Ready");
    expect(await page.locator('g[data-node="grant:shop/db"] text.label').textContent()).toBe("shop/db");
    expect(await page.locator('g[data-node="provider:pg-main"] text.state').textContent()).toBe("installed");
    await waitFor("the page to be live", async () => (await page.locator("#live").getAttribute("data-live")) === "on");
    await browser!.screenshot("console", "example-mesh");
  });

  /** The browser on the front page, its live channel open. */
  const onFrontPage = async () => {
    const page = browser!.page;
    await page.goto(consoleUrl.toString());
    await waitFor("the page to be live", async () => (await page.locator("#live").getAttribute("data-live")) === "on");
    return page;
  };

  /** shop's worker installed on node-b, so session-key has two holders; done once, by whichever test asks first. */
  let installing: Promise<void> | undefined;
  const twoHolders = () =>
    (installing ??= (async () => {
      writeFileSync(join(cwd, "shop.yaml"), readFileSync(example("shop.yaml"), "utf8").replace("installed: false", "installed: true"));
      expect((await meshctl(["apply", "-f", join(cwd, "shop.yaml")])).code).toBe(0);
      await waitFor(
        "session-key delivered to both holders",
        async () => {
          const r = await meshctl(["status", "shop", "--json"]);
          const g = (
            JSON.parse(r.stdout) as { modules: Array<{ grants: Array<{ id: string; holders: Record<string, { generation: number }> }> }> }
          ).modules[0]?.grants.find((x) => x.id === "shop/session-key");
          return (g?.holders["node-a/api"]?.generation ?? 0) >= 1 && (g?.holders["node-b/worker"]?.generation ?? 0) >= 1;
        },
        30_000,
      );
    })());

  it("turns a module unsatisfiable on the page without a reload", async () => {
    const page = await onFrontPage();
    await page.evaluate(() => ((globalThis as unknown as { notReloaded: boolean }).notReloaded = true));
    const pg = parse(readFileSync(join(cwd, "postgres.yaml"), "utf8")) as Record<string, unknown>;
    writeFileSync(join(cwd, "postgres-uninstalled.yaml"), stringify({ ...pg, installed: false }));
    const applied = await meshctl(["apply", "-f", join(cwd, "postgres-uninstalled.yaml")]);
    expect(applied.code, applied.stderr).toBe(0);
    await page.locator('tbody[data-module="shop"][data-state="Unsatisfiable"]').waitFor({ timeout: 20_000 });
    expect(await page.locator('tr[data-grant="shop/db"] td.reason').textContent()).toBe("ProviderNotInstalled");
    expect(await page.locator('tr[data-provider="pg-main"]').getAttribute("data-state")).toBe("not installed");
    expect(await page.locator('g[data-node="module:shop"] text.state').textContent()).toBe("Unsatisfiable");
    expect(await page.evaluate(() => (globalThis as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
    await browser!.screenshot("console", "module-unsatisfiable");
    // Installed again, as the other tests expect it.
    expect((await meshctl(["apply", "-f", join(cwd, "postgres.yaml")])).code).toBe(0);
    await page.locator('tbody[data-module="shop"][data-state="Ready"]').waitFor({ timeout: 30_000 });
  }, 60_000);

  it("shows a rotation of a grant held on two nodes as it runs: Stalled while one holder is away, then Committed", async () => {
    const page = browser!.page;
    await twoHolders();

    const natsUrl = readFileSync(join(cwd, ".mesh/nats-url"), "utf8").trim();
    const pid = agentPid("node-b", natsUrl);
    expect(pid, "the agent of node-b").toBeDefined();
    process.kill(pid!, "SIGSTOP");
    try {
      const rotate = await meshctl(["rotate", "shop/session-key", "--timeout", "6s"]);
      expect(rotate.code, rotate.stderr).toBe(0);
      // #2 when this test runs first; the grant page's test rotates too when it runs first.
      const to = /rotation shop\/session-key#(\d+) started/.exec(rotate.stdout)?.[1];
      expect(to, rotate.stdout).toMatch(/^\d+$/);
      await page.goto(withToken(`${consoleUrl.origin}/rotation/shop/session-key/${to}`));
      await page.evaluate(() => ((globalThis as unknown as { notReloaded: boolean }).notReloaded = true));
      // One row per holder, live: node-a's agent confirms; node-b's waits, then the rotation stalls.
      await page.locator('tr[data-holder="node-a/api"][data-status="confirmed"]').waitFor({ timeout: 15_000 });
      expect(await page.locator('tr[data-holder="node-b/worker"]').getAttribute("data-status")).not.toBe("confirmed");
      await page.locator('.rotation-state[data-state="Stalled"]').waitFor({ timeout: 20_000 });
      expect(await page.locator('tr[data-holder="node-b/worker"]').getAttribute("data-status")).toBe("stalled");
      expect(await page.locator('tr[data-holder="node-b/worker"] td.status').textContent()).toBe("Stalled: not confirmed");
      expect(await page.locator("dl.sources").textContent()).toContain("the holder's clock");
      await browser!.screenshot("console", "rotation-stalled");
    } finally {
      process.kill(pid!, "SIGCONT");
    }
    await page.locator('.rotation-state[data-state="Committed"]').waitFor({ timeout: 30_000 });
    expect(await page.locator('tr[data-holder="node-b/worker"]').getAttribute("data-status")).toBe("confirmed");
    expect(await page.locator("tr.holder").count()).toBe(2);
    // A confirmation is the holder's JetStream ack: the server's time of it (holders report no received/applied times of their own any more).
    for (const h of ["node-a/api", "node-b/worker"]) {
      expect(await page.locator(`tr[data-holder="${h}"] td.confirmed`).textContent(), `${h} confirmed`).toMatch(/^\+\d+\.\d{3} s/);
    }
    expect(await page.evaluate(() => (globalThis as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
    await browser!.screenshot("console", "rotation-committed");
  }, 90_000);

  it("the grant page has conditions, generations, verification per node and rotations", async () => {
    const page = browser!.page;
    await twoHolders();
    // A rotation to show: the test before made one; alone, this one does.
    if (!(await meshctl(["trace", "shop/session-key#2"])).stdout.includes("Committed")) {
      const r = await meshctl(["rotate", "shop/session-key", "--wait", "--timeout", "60s"]);
      expect(r.code, r.stderr).toBe(0);
    }
    await page.goto(withToken(`${consoleUrl.origin}/grant/shop/session-key`));
    expect(await page.locator("table.conditions tr[data-type=Resolved] td.reason").textContent()).toBe("ProviderSelected");
    expect(await page.locator("table.generations tr[data-generation]").count()).toBe(2);
    await page.locator('table.rotations tr[data-rotation="shop/session-key#2"]').waitFor();
    expect(await page.locator("table.holders tr[data-holder]").count()).toBe(2);
    await browser!.screenshot("console", "grant-session-key");
  });

  it("no response and no live message carries a current or past credential value", async () => {
    // What the browser gets from here on too: the front page, live messages of a module applied meanwhile, every grant's page.
    const page = await onFrontPage();
    const views = () => browser!.events.filter((e) => e.event === "view").length;
    const before = views();
    writeFileSync(join(cwd, "extra.yaml"), "kind: Module\nname: extra\nparts: [{ name: api, node: node-a }]\nrequires: [{ name: token, kind: secret }]\n");
    expect((await meshctl(["apply", "-f", join(cwd, "extra.yaml")])).code).toBe(0);
    await page.locator('tbody[data-module="extra"][data-state="Ready"]').waitFor({ timeout: 30_000 });
    await waitFor("live messages of the change", () => views() > before);
    // Every grant's page, read by the test too, beside what the browser got.
    const status = JSON.parse((await meshctl(["status", "--json"])).stdout) as { modules: Array<{ grants: Array<{ id: string }> }> };
    const grants = status.modules.flatMap((m) => m.grants.map((g) => g.id));
    expect(grants.length).toBeGreaterThan(5);
    for (const g of grants) {
      await page.goto(withToken(`${consoleUrl.origin}/grant/${g}`));
      const r = await fetch(withToken(`${consoleUrl.origin}/grant/${g}`));
      expect(r.status, g).toBe(200);
      ownBodies.push(await r.text());
    }
    const secrets = await everyCredentialValue();
    secrets.push({ value: db.adminPassword, where: "the PostgreSQL admin's password" });
    // Every grant has one generation at least, and the admin's password is one more.
    expect(secrets.length).toBeGreaterThan(grants.length);
    const received = [...browser!.responses.map((r) => r.body), ...browser!.events.map((e) => e.data), ...ownBodies];
    expect(views()).toBeGreaterThan(0);
    expect(browser!.responses.length).toBeGreaterThan(5);
    const all = received.join("\n");
    expect(secrets.filter((s) => all.includes(s.value)).map((s) => s.where)).toEqual([]);
  });
});
