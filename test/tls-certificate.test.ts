/**
 * A module's certificate from the mesh's own authority (provider mesh-ca), end to end on a mesh
 * of its own nats-server: part shop/web requires a `tls.certificate` living 30 s; the agent
 * delivers tls.crt, tls.key (0600) and ca.crt, which OpenSSL verifies; an HTTPS server started
 * with the delivered files, reloading them when the binding changes, is asked every 50 ms by a
 * client that trusts the delivered ca.crt alone, through `meshctl rotate` and through the
 * renewal the rotator starts by itself after two thirds of the lifetime: no request fails, and
 * the server presents each generation's serial in turn. A request outside the authority's
 * ceiling gets nothing issued and a condition that says what to widen. A revoke says until when
 * the revoked certificate stays valid; a take-back stops the renewals and says the same.
 */
import { execFileSync } from "node:child_process";
import { X509Certificate, createPrivateKey } from "node:crypto";
import { mkdtempSync, readFileSync, realpathSync, rmSync, statSync } from "node:fs";
import { createServer, type Server } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kinds, getCondition, meshCaProvider, type ModuleDoc } from "@mesh/shared";
import { caFiles, ensureMeshCa } from "@mesh/providers";
import { createLogger } from "@mesh/shared/service";
import { bindingPath } from "@mesh/agent";
import { startRotator, type Rotator } from "@mesh/rotator";
import { ExitCodes, bufferOutput, runRotate, type RotationSummary } from "../packages/cli/src/index.js";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";
import { askEvery } from "./harness/https-asker.js";

const LIFETIME_S = 30;
const shop: ModuleDoc = {
  kind: "Module",
  name: "shop",
  parts: [{ name: "web", node: "node-a", installed: true }],
  requires: [
    { name: "cert", kind: Kinds.TlsCertificate, parts: ["web"], options: { ipAddresses: ["127.0.0.1"], lifetime: `${LIFETIME_S}s` } },
    { name: "public", kind: Kinds.TlsCertificate, parts: ["web"], options: { dnsNames: ["shop.example.com"] } },
  ],
};

const dir = mkdtempSync(join(tmpdir(), "mesh-tls-"));
let mesh: TestMesh;
let rotator: Rotator | undefined;
let server: Server | undefined;
let reload: ReturnType<typeof setInterval> | undefined;

const bindingDir = () => bindingPath(join(mesh.bindingsRoot, "node-a"), "shop", "web", "cert");
/** The binding's files, read from the generation directory it points at now (so the certificate and its key are one generation's). */
function held(): { cert: string; key: string; ca: string; dir: string } {
  const d = realpathSync(bindingDir());
  return { cert: readFileSync(join(d, "tls.crt"), "utf8"), key: readFileSync(join(d, "tls.key"), "utf8"), ca: readFileSync(join(d, "ca.crt"), "utf8"), dir: d };
}

beforeAll(async () => {
  mesh = await startTestMesh({ nodes: ["node-a"], verifier: { intervalMs: 1_000 } });
  rotator = await startRotator({
    store: mesh.store,
    masterKey: mesh.masterKey,
    log: createLogger("rotator", { destination: mesh.logs, level: "debug" }),
    sweepMs: 500,
    scheduleCheckMs: 500,
  });
  const ca = caFiles(join(dir, "ca"));
  await ensureMeshCa(ca, mesh.masterKey);
  expect((await mesh.apply([meshCaProvider({ node: "node-a", certFile: ca.certFile, keyFile: ca.keyFile }), shop])).ok).toBe(true);
  await waitFor("shop/cert delivered to node-a/web", async () => (await mesh.grant("shop", "cert"))?.holders["node-a/web"]?.generation === 1, 30_000);
}, 60_000);

afterAll(async () => {
  if (reload) clearInterval(reload);
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  await rotator?.stop();
  await mesh?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("a tls.certificate from the mesh's authority", () => {
  it("is delivered as files OpenSSL verifies, for the names asked, its key 0600 and matching", async () => {
    const h = held();
    expect(statSync(join(h.dir, "tls.key")).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(h.dir, "type"), "utf8")).toBe("tls");
    expect(execFileSync("openssl", ["verify", "-CAfile", join(h.dir, "ca.crt"), join(h.dir, "tls.crt")], { encoding: "utf8" })).toMatch(/tls\.crt: OK/);
    const x = new X509Certificate(h.cert);
    expect(x.subjectAltName).toBe("DNS:web.shop.mesh, IP Address:127.0.0.1");
    expect(x.checkPrivateKey(createPrivateKey(h.key))).toBe(true);
    expect(h.ca).toBe(readFileSync(caFiles(join(dir, "ca")).certFile, "utf8"));
    const g = await mesh.grant("shop", "cert");
    expect(g?.resource).toMatchObject({ serial: x.serialNumber, provider: "mesh-ca", expires: new Date(x.validTo).toISOString() });
    await waitFor("shop/cert Verified", async () => getCondition((await mesh.grant("shop", "cert"))?.conditions ?? [], "Verified")?.status === "True");
  });

  it("refuses a name outside the authority's ceiling, issuing nothing, and says which option widens it", async () => {
    const g = await waitFor("shop/public refused", async () => {
      const c = getCondition((await mesh.grant("shop", "public"))?.conditions ?? [], "Provisioned");
      return c?.status === "False" ? c : undefined;
    });
    expect(g.message).toMatch(/shop\.example\.com is outside what provider mesh-ca issues to module shop \(\*\.shop\.mesh\).*options\.allowDnsNames/);
    expect((await mesh.grant("shop", "public"))?.generation).toBe(0);
  });

  it("keeps an HTTPS server on the delivered files answering through meshctl rotate and an automatic renewal", async () => {
    let current = held();
    server = createServer({ cert: current.cert, key: current.key }, (_req, res) => res.end("ok"));
    await new Promise<void>((r) => server!.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    // What a server does with a binding that changes: reads the new generation and serves it to new connections.
    reload = setInterval(() => {
      const next = held();
      if (next.cert !== current.cert) {
        server!.setSecureContext({ cert: next.cert, key: next.key });
        current = next;
      }
    }, 100);

    const ca = held().ca;
    const seen = new Set<string>();
    const asker = askEvery(
      50,
      () => ({ host: "127.0.0.1", port, servername: "web.shop.mesh", ca }),
      (c) => seen.add(c.serialNumber),
    );

    try {
      const out = bufferOutput();
      const code = await runRotate(mesh.store, { grant: "shop/cert", wait: true, json: true, timeoutMs: 30_000 }, out);
      expect(out.stderr).toBe("");
      expect(code).toBe(ExitCodes.Ok);
      const summary = JSON.parse(out.stdout) as RotationSummary;
      expect(summary).toMatchObject({ state: "Committed", from: 1, to: 2 });
      const second = (await mesh.grant("shop", "cert"))!.resource.serial!;
      await waitFor(`the server presenting generation 2's serial ${second}`, () => seen.has(second), 10_000);

      // No rotate: the rotator renews once two thirds of the 30 s have passed.
      const third = await waitFor(
        "an automatic renewal to generation 3",
        async () => {
          const g = await mesh.grant("shop", "cert");
          return g && g.generation >= 3 && g.holders["node-a/web"]?.generation === g.generation ? g.resource.serial : undefined;
        },
        LIFETIME_S * 1_000 + 15_000,
        250,
      );
      await waitFor(`the server presenting generation 3's serial ${third}`, () => seen.has(third!), 10_000);
    } finally {
      await asker.stop();
      clearInterval(reload);
      reload = undefined;
    }
    expect(asker.failures).toEqual([]);
    expect(asker.sent()).toBeGreaterThan(100);
    expect(seen.size).toBeGreaterThanOrEqual(3);
    const trigger = await mesh.store.kv.rotations.get("shop.cert");
    expect(JSON.parse(trigger!.string()).trigger).toBe("schedule");
  }, 90_000);

  it("says on revoke and on take-back until when the last certificate stays valid, and renews it no more", async () => {
    const before = (await mesh.grant("shop", "cert"))!;
    const out = bufferOutput();
    const code = await runRotate(mesh.store, { grant: "shop/cert", timeoutMs: 30_000, revoke: { graceMs: 500, by: "test" } }, out);
    expect(code).toBe(ExitCodes.Ok);
    expect(out.stdout).toContain(
      `generation ${before.generation} is retired, but a certificate cannot be disabled: it stays valid until ${before.resource.expires}, when it expires`,
    );

    // Part web uninstalled: the grant is taken back.
    const revoked = (await mesh.grant("shop", "cert"))!;
    const uninstalled: ModuleDoc = { ...shop, parts: [{ name: "web", node: "node-a", installed: false }] };
    expect((await mesh.apply([uninstalled])).ok).toBe(true);
    const taken = await waitFor("shop/cert taken back", async () => {
      const g = await mesh.grant("shop", "cert");
      return g?.revoked?.done ? g : undefined;
    });
    expect(getCondition(taken.conditions, "Provisioned")?.message).toContain(
      `no longer renewed; the last one issued stays valid until ${revoked.resource.expires}, when it expires`,
    );
    // Past the point where it would have been renewed (two thirds of its lifetime), nothing was.
    const renewAt = Date.parse(revoked.resource.expires!) - (LIFETIME_S * 1_000) / 3;
    await new Promise((r) => setTimeout(r, Math.max(0, renewAt - Date.now()) + 2_000));
    expect((await mesh.grant("shop", "cert"))?.generation).toBe(revoked.generation);
    expect(JSON.parse((await mesh.store.kv.rotations.get("shop.cert"))!.string()).to).toBe(revoked.generation);
  }, 90_000);
});
