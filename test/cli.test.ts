/**
 * meshctl against a real nats-server: apply refuses a bad file without sending anything,
 * says when no resolver runs, status and explain read KV (records written here by hand, so
 * these do not depend on the services), a never-processed module exits 3, and the built
 * command line wires all of it.
 */
import { spawnSync } from "node:child_process";
import { createServer, connect as netConnect, type AddressInfo, type Socket } from "node:net";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { keys, type Grant, type ModuleStatus, type ProviderDoc } from "@mesh/shared";
import { connectNats, openStore, type NatsConnection, type Store } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { startResolver } from "@mesh/resolver";
import { CliError, ExitCodes, bufferOutput, connectForCli, runApply, runExplain, runStatus, waitForResolver } from "../packages/cli/src/index.js";
import { startNatsServer, type NatsServer } from "./harness/nats-server.js";
import { freePort } from "./harness/ports.js";
import { LogCapture } from "./harness/log-capture.js";
import { waitFor } from "./harness/wait.js";

const repo = fileURLToPath(new URL("..", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "meshctl-test-"));
let nats: NatsServer;
let nc: NatsConnection;
let store: Store;

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

async function keysOf(kv: Store["kv"][keyof Store["kv"]]): Promise<string[]> {
  const out: string[] = [];
  for await (const k of await kv.keys()) out.push(k);
  return out;
}

const now = new Date();
const iso = (secondsAgo: number) => new Date(now.getTime() - secondsAgo * 1000).toISOString();

beforeAll(async () => {
  nats = await startNatsServer();
  nc = await connectNats(nats.url);
  store = await openStore(nc);
});

afterAll(async () => {
  await nc?.close();
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("meshctl apply", () => {
  it("lists every problem of a bad file, exits 1 and sends nothing", async () => {
    const bad = file(
      "bad.yaml",
      [
        "kind: Provider",
        "name: pg-main",
        "serves: [postgres.database]",
        "node: node-a",
        "endpoint: postgres://127.0.0.1:5432",
        "---",
        "kind: Module",
        "name: shop",
        "parts: [{ name: api, node: node-a }]",
        "requires:",
        "  - { name: db, parts: [api] }",
        "---",
        "kind: Module",
        "name: blog",
        "parts: [{ name: web, node: node-a }]",
        "requires: [{ name: key, kind: secret, parts: [nope] }]",
      ].join("\n"),
    );
    const stored = [await keysOf(store.kv.providers), await keysOf(store.kv.manifests)];
    const out = bufferOutput();
    let connected = false;
    const code = await runApply(async () => ((connected = true), nc), { files: [bad] }, out);
    expect(code).toBe(ExitCodes.Failure);
    expect(connected).toBe(false);
    expect(out.stderr).toContain(`${bad}: document 1: requires[0].kind: required`);
    expect(out.stderr).toContain(`${bad}: document 2: requires[0].parts[0]: names no part of module blog: nope`);
    expect(out.stderr).toContain("nothing was applied");
    expect(out.stdout).toBe("");
    // The valid Provider of the same file was not stored either.
    expect([await keysOf(store.kv.providers), await keysOf(store.kv.manifests)]).toEqual(stored);
  });

  it("says the resolver is not running, and how to start it, when nothing answers", async () => {
    const good = file("good.yaml", "kind: Module\nname: static-site\n");
    const stored = await keysOf(store.kv.manifests);
    const out = bufferOutput();
    // The probe meshctl up uses: nothing answers, so it gives up after its timeout.
    expect(await waitForResolver(nc, { timeoutMs: 600, signal: new AbortController().signal, onWait: () => undefined })).toBe(false);
    const err = await runApply(async () => nc, { files: [good] }, out).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CliError);
    expect((err as CliError).message).toContain(`no resolver answers at nats://${nc.getServer()}: the resolver is not running`);
    expect((err as CliError).message).toContain("npx meshctl up");
    expect((err as CliError).message).toContain("node services/resolver/dist/main.js");
    expect(await keysOf(store.kv.manifests)).toEqual(stored);
  });
});

describe("connecting", () => {
  it("names the URL and says how to get a nats-server when none answers", async () => {
    const url = `nats://127.0.0.1:${await freePort()}`;
    const err = await connectForCli(url).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CliError);
    const msg = (err as CliError).message;
    expect(msg).toContain(`cannot reach NATS at ${url}`);
    expect(msg).toContain("needs a running nats-server with JetStream");
    expect(msg).toContain("npx meshctl up");
    expect(msg).toContain("nats-server -js");
  });

  // A server that accepts the connection and sends nothing: the handshake times out each time.
  const silentServer = async (forwardFrom: number, to?: number) => {
    let accepted = 0;
    const held: Socket[] = [];
    const server = createServer((socket) => {
      if (++accepted < forwardFrom || to === undefined) return void held.push(socket);
      // From then on, a real NATS server behind it.
      const upstream = netConnect(to, "127.0.0.1");
      socket.pipe(upstream).pipe(socket);
      socket.on("error", () => upstream.destroy());
      upstream.on("error", () => socket.destroy());
      held.push(socket, upstream);
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    return {
      url: `nats://127.0.0.1:${(server.address() as AddressInfo).port}`,
      accepted: () => accepted,
      close: () => (held.forEach((x) => x.destroy()), new Promise<void>((r) => server.close(() => r()))),
    };
  };

  it("tries a handshake that timed out again, and connects when the server finishes one", async () => {
    const slow = await silentServer(2, nats.port);
    const lines: string[] = [];
    try {
      const conn = await connectForCli(slow.url, { timeoutMs: 300, deadlineMs: 5_000, onRetry: (l) => lines.push(l) });
      await conn.flush();
      await conn.close();
      expect(slow.accepted()).toBe(2);
      expect(lines).toEqual([`meshctl: NATS at ${slow.url} did not finish the connection's handshake within 0.3 s (a busy server or machine); trying again`]);
    } finally {
      await slow.close();
    }
  });

  it("gives up on handshakes that time out at its deadline, saying how often it tried", async () => {
    const silent = await silentServer(Infinity);
    const lines: string[] = [];
    try {
      const err = await connectForCli(silent.url, { timeoutMs: 300, deadlineMs: 1_000, onRetry: (l) => lines.push(l) }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(CliError);
      // 300 ms tries while one more fits in 1 s: three on time, fewer on a loaded machine.
      const tries = silent.accepted();
      expect(tries).toBeGreaterThanOrEqual(2);
      expect(tries).toBeLessThanOrEqual(3);
      expect(lines).toHaveLength(tries - 1);
      expect((err as CliError).message).toContain(`cannot reach NATS at ${silent.url} (timeout; tried ${tries} times)`);
    } finally {
      await silent.close();
    }
  });
});

describe("meshctl status and explain on records written by hand", () => {
  const shopStatus: ModuleStatus = {
    module: "shop",
    state: "Unsatisfiable",
    message: "db: NoProvider",
    requirements: 1,
    manifestRevision: 1,
    processedAt: iso(20),
    since: iso(20),
  };
  const dbGrant: Grant = {
    id: "shop/db",
    module: "shop",
    requirement: "db",
    kind: "postgres.database",
    parts: ["api"],
    targets: [{ part: "api", node: "node-a" }],
    provider: null,
    generation: 0,
    resource: {},
    holders: {},
    conditions: [
      {
        type: "Resolved",
        status: "False",
        reason: "NoProvider",
        message: "no provider serves postgres.database; apply a Provider document with serves: [postgres.database]",
        observedAt: iso(20),
      },
    ],
  };

  beforeAll(async () => {
    await store.kv.manifests.put(
      "shop",
      JSON.stringify({
        kind: "Module",
        name: "shop",
        parts: [{ name: "api", node: "node-a", installed: true }],
        requires: [{ name: "db", kind: "postgres.database", parts: ["api"] }],
      }),
    );
    await store.kv.modules.put("shop", JSON.stringify(shopStatus));
    await store.kv.grants.put(keys.grant("shop", "db"), JSON.stringify(dbGrant));
    // Stored, never processed.
    await store.kv.manifests.put("blog", JSON.stringify({ kind: "Module", name: "blog", parts: [], requires: [] }));
  });

  it("--json prints modules with grants and conditions in the documented shape", async () => {
    const out = bufferOutput();
    expect(await runStatus(store, { json: true }, out)).toBe(ExitCodes.Ok);
    const report = JSON.parse(out.stdout) as { modules: Array<Record<string, unknown>>; unprocessed?: string[] };
    // Among whatever else the tests applied: the module written by hand above.
    const m = report.modules.find((x) => x.module === "shop")!;
    expect(m).toMatchObject({ module: "shop", state: "Unsatisfiable" });
    const grants = m.grants as Array<Record<string, unknown>>;
    expect(grants).toHaveLength(1);
    const g = grants[0]!;
    for (const k of ["id", "requirement", "kind", "parts", "provider", "generation", "conditions"]) expect(g).toHaveProperty(k);
    expect(g).toMatchObject({ id: "shop/db", requirement: "db", kind: "postgres.database", parts: ["api"], provider: null, generation: 0 });
    expect(g.conditions).toEqual([{ type: "Resolved", status: "False", reason: "NoProvider", message: dbGrant.conditions[0]!.message, observedAt: iso(20) }]);
    expect(report.unprocessed).toEqual(["blog"]);
  });

  it("prints a readable table", async () => {
    const out = bufferOutput();
    expect(await runStatus(store, { module: "shop", now }, out)).toBe(ExitCodes.Ok);
    expect(out.stdout).toContain("shop  Unsatisfiable  since 20 s ago");
    expect(out.stdout).toMatch(/Resolved +False +NoProvider +20 s ago/);
    expect(out.stdout).not.toContain("\x1b[");
  });

  it("exits 3 for a module never processed, and says whether its manifest waits for the resolver", async () => {
    const out = bufferOutput();
    expect(await runStatus(store, { module: "nosuch" }, out)).toBe(ExitCodes.NotProcessed);
    expect(out.stderr).toContain("no manifest of module nosuch has been processed");
    expect(out.stderr).toContain("no manifest of nosuch is stored either");

    const stored = bufferOutput();
    expect(await runStatus(store, { module: "blog" }, stored)).toBe(ExitCodes.NotProcessed);
    expect(stored.stderr).toContain("no manifest of module blog has been processed");
    expect(stored.stderr.replace(/\s+/g, " ")).toContain("the resolver has not processed it yet");

    const json = bufferOutput();
    expect(await runStatus(store, { module: "nosuch", json: true }, json)).toBe(ExitCodes.NotProcessed);
    const body = JSON.parse(json.stdout) as { modules: unknown[]; error: Record<string, unknown> };
    expect(body.modules).toEqual([]);
    expect(body.error).toMatchObject({ code: "NotProcessed", module: "nosuch", message: "no manifest of module nosuch has been processed" });
  });

  it("explain says why a requirement is unsatisfied and what would satisfy it", async () => {
    const out = bufferOutput();
    expect(await runExplain(store, { module: "shop" }, out)).toBe(ExitCodes.Ok);
    const text = out.stdout.replace(/\s+/g, " ");
    expect(text).toContain("db (postgres.database, for api): cannot be satisfied yet");
    expect(text).toContain("why: no provider serves postgres.database");
    expect(text).toContain("next: apply a Provider document with `serves: [postgres.database]` (see examples/providers/postgres.yaml)");

    const never = bufferOutput();
    expect(await runExplain(store, { module: "nosuch" }, never)).toBe(ExitCodes.NotProcessed);
    expect(never.stderr).toContain("no manifest of module nosuch has been processed");
  });

  it("explain names a registered provider that is not installed", async () => {
    const pg: ProviderDoc = {
      kind: "Provider",
      name: "pg-main",
      serves: ["postgres.database"],
      node: "node-a",
      endpoint: "postgres://127.0.0.1:5432",
      installed: false,
    };
    await store.kv.providers.put("pg-main", JSON.stringify(pg));
    await store.kv.grants.put(
      keys.grant("shop", "db"),
      JSON.stringify({ ...dbGrant, conditions: [{ ...dbGrant.conditions[0]!, reason: "ProviderNotInstalled", message: "…" }] }),
    );
    const out = bufferOutput();
    expect(await runExplain(store, { module: "shop", json: true }, out)).toBe(ExitCodes.Ok);
    const e = JSON.parse(out.stdout) as { requirements: Array<{ state: string; why: string; next: string }> };
    expect(e.requirements[0]).toMatchObject({ state: "Unsatisfiable" });
    expect(e.requirements[0]!.why).toContain("served by pg-main (node node-a), but it is not installed");
    expect(e.requirements[0]!.next).toContain("set `installed: true` in the Provider document of pg-main");
    await store.kv.providers.purge("pg-main");
    await store.kv.grants.put(keys.grant("shop", "db"), JSON.stringify(dbGrant));
  });
});

describe("the meshctl command line (built)", () => {
  const meshctl = (args: string[], env: NodeJS.ProcessEnv = {}) =>
    spawnSync(process.execPath, [join(repo, "packages/cli/bin/meshctl.js"), ...args], {
      env: { ...process.env, NO_COLOR: "1", ...env },
      encoding: "utf8",
      timeout: 30_000,
    });

  it("exits 3 for a never-processed module, using NATS_URL", () => {
    const r = meshctl(["status", "nosuch"], { NATS_URL: nats.url });
    expect(r.stderr).toContain("no manifest of module nosuch has been processed");
    expect(r.status).toBe(3);
  });

  it("exits 1 with the problems of a bad file, and 1 with advice when NATS is not there", async () => {
    const bad = file("bad2.yaml", "kind: Module\nname: Shop\n");
    const r = meshctl(["apply", "-f", bad], { NATS_URL: nats.url });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(`${bad}: document 0: name: must be 1-40 characters`);

    const url = `nats://127.0.0.1:${await freePort()}`;
    const down = meshctl(["status"], { NATS_URL: url });
    expect(down.status).toBe(1);
    expect(down.stderr).toContain(`meshctl: cannot reach NATS at ${url}`);
  });
});

describe("meshctl apply with the resolver running", () => {
  it("prints what was accepted, then unchanged on a second apply", async () => {
    const logs = new LogCapture();
    const resolver = await startResolver({ store, log: createLogger("resolver", { destination: logs }) });
    try {
      expect(await waitForResolver(nc, { timeoutMs: 5_000, signal: new AbortController().signal, onWait: () => undefined })).toBe(true);
      expect(await keysOf(store.kv.manifests)).not.toContain("static-site");
      const site = file("site.yaml", "kind: Module\nname: static-site\nparts: [{ name: web, node: node-a }]\n");
      const first = bufferOutput();
      expect(await runApply(async () => nc, { files: [site] }, first)).toBe(ExitCodes.Ok);
      expect(first.stdout).toBe("module/static-site created\n");
      const second = bufferOutput();
      expect(await runApply(async () => nc, { files: [site], json: true }, second)).toBe(ExitCodes.Ok);
      expect(JSON.parse(second.stdout)).toEqual({ ok: true, accepted: [{ kind: "Module", name: "static-site", action: "unchanged" }] });
      await waitFor("static-site to be processed", async () => (await store.kv.modules.get("static-site"))?.length);
      const status = bufferOutput();
      expect(await runStatus(store, { module: "static-site" }, status)).toBe(ExitCodes.Ok);
      expect(status.stdout).toContain("static-site  NothingRequired");
    } finally {
      await resolver.stop();
    }
  });
});
