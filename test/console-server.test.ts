/**
 * The console's server against a real nats-server, on records written by hand (so these do not
 * depend on the services): the first page is whole before any live channel opens; the live
 * channel sends what changed since the page's version and each later change, and nothing when
 * nothing changed; HTTPS with a certificate of the test's own, and beyond loopback with one the
 * mesh's authority issues it; and the refusals a user can meet before anything listens (an
 * address beyond loopback without TLS, a taken port).
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { get } from "node:https";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { keys, parseMasterKey, type Grant, type ModuleStatus } from "@mesh/shared";
import { caFiles, ensureMeshCa } from "@mesh/providers";
import type { TLSSocket } from "node:tls";
import { X509Certificate, randomBytes } from "node:crypto";
import { connectNats, openStore, type NatsConnection, type Store } from "@mesh/shared/runtime";
import { CliError, ExitCodes, bufferOutput, runConsole, startConsole, type RunningConsole } from "../packages/cli/src/index.js";
import { startNatsServer, type NatsServer } from "./harness/nats-server.js";
import { grantFixture, postgresProvider } from "./fixtures.js";

let nats: NatsServer;
let nc: NatsConnection;
let store: Store;
const dir = mkdtempSync(join(tmpdir(), "mesh-console-server-"));

const now = new Date().toISOString();
const shop = (state: ModuleStatus["state"], message: string): ModuleStatus => ({
  module: "shop",
  state,
  message,
  requirements: 1,
  manifestRevision: 1,
  processedAt: now,
  since: now,
});
const db: Grant = grantFixture({
  generation: 1,
  targets: [{ part: "api", node: "node-a" }],
  parts: ["api"],
  conditions: [{ type: "Resolved", status: "True", reason: "ProviderSelected", message: "provider pg-main (node node-a)", observedAt: now }],
});

beforeAll(async () => {
  nats = await startNatsServer();
  nc = await connectNats(nats.url);
  store = await openStore(nc);
  await store.kv.modules.put("shop", JSON.stringify(shop("Ready", "all requirements are satisfied")));
  await store.kv.grants.put(keys.grant("shop", "db"), JSON.stringify(db));
  await store.kv.providers.put("pg-main", JSON.stringify(postgresProvider("pg-main", "node-a")));
});

afterAll(async () => {
  await nc?.close();
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/**
 * Reads Server-Sent Events from `url` until `until` holds of what came, or `ms` pass; returns every
 * event. `onOpen` is called on the server's first comment (`: live`), written once it follows the
 * page's changes.
 */
async function readEvents(
  url: string,
  ms: number,
  until: (events: Array<{ event: string; data: string }>) => boolean = () => false,
  onOpen: () => void = () => undefined,
) {
  const ac = new AbortController();
  const events: Array<{ event: string; data: string }> = [];
  const timer = setTimeout(() => ac.abort(), ms);
  try {
    const r = await fetch(url, { signal: ac.signal });
    expect(r.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
    let buf = "";
    for await (const chunk of r.body!) {
      buf += Buffer.from(chunk).toString("utf8");
      let i: number;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        if (block.startsWith(": live")) onOpen();
        const event = /^event: (.*)$/m.exec(block)?.[1];
        const data = /^data: (.*)$/m.exec(block)?.[1];
        if (event && data !== undefined) events.push({ event, data });
      }
      if (until(events)) break;
    }
  } catch (e) {
    if (!ac.signal.aborted) throw e;
  } finally {
    clearTimeout(timer);
    ac.abort();
  }
  return events;
}

describe("the console server on a real store", () => {
  let c: RunningConsole;
  beforeAll(async () => {
    c = await startConsole(store, { listen: "127.0.0.1:0" });
  });
  afterAll(async () => {
    await c?.stop();
  });

  it("serves the first page whole, with the version the live channel starts from", async () => {
    const r = await fetch(c.url);
    expect(r.status).toBe(200);
    expect(r.headers.get("content-security-policy")).toContain("default-src 'none'");
    const html = await r.text();
    expect(html).toContain('<tbody class="module" data-module="shop" data-state="Ready">');
    expect(html).toContain('data-node="provider:pg-main"');
    expect(html).toMatch(/<body data-path="\/" data-version="\d+">/);
  });

  it("sends nothing on the live channel while nothing changed, then the page again once the module changes", async () => {
    const url = new URL(c.url);
    const live = `${url.origin}/events?token=${c.token}&path=/&since=${c.state.version}`;
    // Six times the server's debounce (100 ms), after which a page it thought changed would have gone out.
    const quiet = await readEvents(live, 600);
    expect(quiet).toEqual([]);
    let open!: () => void;
    const following = new Promise<void>((resolve) => (open = resolve));
    const changed = readEvents(live, 10_000, (ev) => ev.some((e) => e.event === "view" && e.data.includes("Unsatisfiable")), open);
    await following;
    await store.kv.modules.put("shop", JSON.stringify(shop("Unsatisfiable", "db: no provider serves postgres.database")));
    try {
      const events = await changed;
      const view = JSON.parse(events.at(-1)!.data) as { html: string; title: string; version: number };
      expect(view.html).toContain('data-module="shop" data-state="Unsatisfiable"');
      expect(view.version).toBe(c.state.version);
    } finally {
      // As the other tests expect it.
      await store.kv.modules.put("shop", JSON.stringify(shop("Ready", "all requirements are satisfied")));
    }
  });

  it("sends at once what changed between the page and the channel", async () => {
    const url = new URL(c.url);
    const events = await readEvents(`${url.origin}/events?token=${c.token}&path=/grant/shop/db&since=${c.state.version - 1}`, 5_000, (ev) => ev.length > 0);
    expect(events[0]?.event).toBe("view");
    expect(JSON.parse(events[0]!.data).html).toContain("grant shop/db");
  });

  it("answers a page it does not have with what the pages are", async () => {
    const url = new URL(c.url);
    const r = await fetch(`${url.origin}/nope?token=${c.token}`);
    expect(r.status).toBe(404);
    expect(await r.text()).toContain("the pages are /, /grant/MODULE/REQUIREMENT and /rotation/MODULE/REQUIREMENT/GENERATION");
    const g = await fetch(`${url.origin}/rotation/shop/db/7?token=${c.token}`);
    expect(await g.text()).toContain("grant shop/db has never been rotated; start one with: meshctl rotate shop/db");
  });
});

describe("meshctl console's addresses", () => {
  it("serves HTTPS with the certificate given, and prints an https URL first", async () => {
    const cert = join(dir, "cert.pem");
    const key = join(dir, "key.pem");
    execFileSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        key,
        "-out",
        cert,
        "-days",
        "1",
        "-subj",
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
      ],
      { stdio: "ignore" },
    );
    const out = bufferOutput();
    const stop = new AbortController();
    const running = runConsole(store, { listen: "127.0.0.1:0", tlsCert: cert, tlsKey: key }, out, stop.signal);
    await new Promise<void>((resolve) => {
      const t = setInterval(() => out.stdout && (clearInterval(t), resolve()), 20);
    });
    const url = out.stdout.split("\n")[0]!;
    expect(url).toMatch(/^https:\/\/127\.0\.0\.1:\d+\/\?token=[\w-]+$/);
    const body = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      get(url, { ca: readFileSync(cert) }, (res) => {
        let b = "";
        res.on("data", (d: Buffer) => (b += d.toString()));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: b }));
      }).on("error", reject);
    });
    expect(body.status).toBe(200);
    expect(body.body).toContain('data-module="shop"');
    stop.abort();
    expect(await running).toBe(ExitCodes.Ok);
  });

  it("beyond loopback with no certificate given, serves HTTPS with one the mesh's authority issues for its host names", async () => {
    const masterKey = parseMasterKey(randomBytes(32).toString("hex"));
    const ca = caFiles(join(dir, "mesh-ca"));
    await ensureMeshCa(ca, masterKey);
    const out = bufferOutput();
    const stop = new AbortController();
    const running = runConsole(store, { listen: "0.0.0.0:0", hostNames: ["console.test.mesh"], authority: { files: ca, masterKey } }, out, stop.signal);
    // Its URL, or why it stopped before printing one.
    await Promise.race([
      new Promise<void>((resolve) => {
        const t = setInterval(() => out.stdout && (clearInterval(t), resolve()), 20);
      }),
      running.then(() => Promise.reject(new Error(`the console stopped before printing its URL: ${out.stderr}`))),
    ]);
    const url = new URL(out.stdout.split("\n")[0]!);
    expect(url.origin).toMatch(/^https:\/\/console\.test\.mesh:\d+$/);
    expect(out.stderr).toContain(`serving HTTPS with a certificate of the mesh's authority`);
    expect(out.stderr).toContain(`a browser trusts it once it trusts ${ca.certFile}`);
    const answer = await new Promise<{ status: number; served: X509Certificate }>((resolve, reject) => {
      get(
        {
          host: "127.0.0.1",
          port: url.port,
          path: `${url.pathname}${url.search}`,
          servername: "console.test.mesh",
          headers: { host: url.host },
          ca: readFileSync(ca.certFile),
        },
        (res) => {
          const served = new X509Certificate((res.socket as TLSSocket).getPeerCertificate().raw);
          res.resume();
          res.on("end", () => resolve({ status: res.statusCode ?? 0, served }));
        },
      ).on("error", reject);
    });
    expect(answer.status).toBe(200);
    expect(answer.served.subjectAltName).toBe("DNS:console.test.mesh");
    expect(answer.served.issuer).toBe(new X509Certificate(readFileSync(ca.certFile)).subject);
    stop.abort();
    expect(await running).toBe(ExitCodes.Ok);
  });

  it("refuses an address beyond loopback without TLS, and a wildcard without --host, before reading anything", async () => {
    for (const [listen, words] of [
      ["10.1.2.3:8470", "is not a loopback address, and the console serves other addresses only over TLS"],
      ["0.0.0.0:8470", "is not a loopback address"],
    ] as const) {
      const e = await startConsole(store, { listen }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(CliError);
      expect((e as CliError).exitCode).toBe(ExitCodes.Usage);
      expect((e as CliError).message).toContain(words);
    }
    const wildcard = await startConsole(store, { listen: "0.0.0.0:8470", tlsCert: "x", tlsKey: "y" }).catch((x: unknown) => x);
    expect((wildcard as CliError).message).toContain("name the host name clients use with --host NAME");
  });

  it("says a taken port is taken, and how to pick another", async () => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, "127.0.0.1", () => r()));
    const port = (blocker.address() as { port: number }).port;
    try {
      const e = await startConsole(store, { listen: `127.0.0.1:${port}` }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(CliError);
      expect((e as CliError).message).toBe(
        `cannot listen on 127.0.0.1:${port}: port ${port} is taken on 127.0.0.1: give another with --listen 127.0.0.1:PORT (port 0 picks a free one)`,
      );
    } finally {
      blocker.close();
    }
  });
});
