/**
 * A PostgreSQL run as a module of the mesh, serving TLS with a certificate the mesh issued: its
 * part holds a `tls.certificate` grant of the mesh's authority, the provider that names the
 * server says `tls: { mesh: true }` and `needs` that grant, and the part's `onRotate` hook
 * waits until the server presents the new certificate. Rotated while holders open a verified
 * connection and query every 50 ms: no query fails, and the server presents the new serial once
 * the rotation commits. The same through a rotation of the mesh's authority itself: the
 * holders trust both roots before the server presents a certificate of the new one, and the
 * old root alone at the end.
 */
import { X509Certificate, randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TLSSocket } from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import { Kinds, StateFiles, meshCaProvider, parseAllowedHooks, type ModuleDoc } from "@mesh/shared";
import { createLogger } from "@mesh/shared/service";
import { caFiles, certificatesOf, ensureMeshCa, fingerprintOf } from "@mesh/providers";
import { bindingGeneration, bindingPath, startAgent, type Agent } from "@mesh/agent";
import type { Rotator } from "@mesh/rotator";
import { startPostgres, type Postgres } from "./harness/postgres.js";
import { rotateCommitted, startMeshRotator, startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";
import { markerHook } from "./harness/marker-hook.js";
import { harnessProvider, PG_ADMIN_ENV } from "./fixtures.js";
import { ExitCodes, bufferOutput, runCaRotate } from "../packages/cli/src/index.js";

/**
 * The hook both parts name: it waits for the marker the test leaves once the part uses generation
 * `$MESH_GENERATION` (the server presents that certificate; every holder has queried with that
 * credential), so the agent confirms, and the generation before is retired, only then.
 */
const AWAIT_RELOAD = "await-reload";

const database: ModuleDoc = {
  kind: "Module",
  name: "db",
  parts: [{ name: "server", node: "node-a", installed: true, onRotate: AWAIT_RELOAD }],
  requires: [{ name: "cert", kind: Kinds.TlsCertificate, options: { ipAddresses: ["127.0.0.1"], lifetime: "1h", usage: "server" } }],
};

const shop: ModuleDoc = {
  kind: "Module",
  name: "shop",
  parts: [{ name: "api", node: "node-a", installed: true, onRotate: AWAIT_RELOAD }],
  requires: [{ name: "db", kind: Kinds.PostgresDatabase }],
};

/** The serial of the certificate `pem` starts with. */
const serialOf = (pem: string) => new X509Certificate(pem).serialNumber.toLowerCase();

describe("a PostgreSQL run as a module, with its certificate from the mesh", () => {
  const dir = mkdtempSync(join(tmpdir(), "mesh-pg-module-"));
  const state = join(dir, "state");
  const hook = markerHook(30);
  let mesh: TestMesh;
  let agent: Agent;
  let rotator: Rotator;
  let db: Postgres;
  let env: NodeJS.ProcessEnv;
  let presented = 0;
  let stopWatch = false;
  let watch: Promise<void> | undefined;

  const root = () => join(mesh.bindingsRoot, "node-a");
  /** The server part's certificate files, from the generation directory its binding points at now. */
  const held = () => {
    const d = realpathSync(bindingPath(root(), "db", "server", "cert"));
    return { certPem: readFileSync(join(d, "tls.crt"), "utf8"), keyPem: readFileSync(join(d, "tls.key"), "utf8") };
  };

  beforeAll(async () => {
    const adminPassword = randomBytes(12).toString("hex");
    env = { ...process.env, MESH_STATE_DIR: state, [PG_ADMIN_ENV]: adminPassword };
    mesh = await startTestMesh({ nodes: [], env, verifier: { intervalMs: 1_000 }, probeIntervalMs: 1_000 });
    agent = await startAgent({
      store: mesh.store,
      node: "node-a",
      bindingsRoot: root(),
      hooks: parseAllowedHooks([hook.allow(AWAIT_RELOAD)]),
      probeIntervalMs: 1_000,
      log: createLogger("agent", { destination: mesh.logs, level: "debug" }),
    });
    rotator = await startMeshRotator(mesh, env);
    const ca = caFiles(join(state, StateFiles.caDir));
    await ensureMeshCa(ca, mesh.masterKey);
    expect((await mesh.apply([meshCaProvider({ node: "node-a", certFile: ca.certFile, keyFile: ca.keyFile }), database])).ok).toBe(true);
    await waitFor("db/cert delivered to the server's part", () => bindingGeneration(root(), "db", "server", "cert") === 1, 30_000);

    // The part's process: a PostgreSQL presenting the certificate its binding holds, and presenting each new one before its hook lets the agent confirm.
    db = await startPostgres({ adminPassword, tls: held() });
    presented = 1;
    hook.mark("db", "server", 1);
    watch = (async () => {
      while (!stopWatch) {
        const g = bindingGeneration(root(), "db", "server", "cert") ?? 0;
        if (g > presented) {
          await db.presentCertificate(held());
          presented = g;
          hook.mark("db", "server", g);
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    })();

    const provider = harnessProvider(db, { tls: { mesh: true }, needs: ["db/cert"] });
    const applied = await mesh.apply([provider, shop]);
    expect(applied.ok, JSON.stringify(applied)).toBe(true);
    await mesh.waitForState("shop", "Ready", 30_000);
  }, 120_000);

  afterAll(async () => {
    stopWatch = true;
    await watch;
    await rotator?.stop();
    await agent?.stop();
    await mesh?.stop();
    await db?.stop();
    rmSync(dir, { recursive: true, force: true });
    hook.remove();
  });

  /** A new verified connection to the server from shop's binding alone, as its holder makes one. */
  const connect = () => {
    const binding = bindingPath(root(), "shop", "api", "db");
    return new pg.Client({
      connectionString: `${readFileSync(join(binding, "uri"), "utf8")}&sslrootcert=${encodeURIComponent(join(binding, "sslrootcert"))}`,
      connectionTimeoutMillis: 5_000,
    });
  };

  /** The certificate the server presents to a new verified connection. */
  const served = async (): Promise<X509Certificate> => {
    const c = connect();
    await c.connect();
    try {
      return new X509Certificate((c as unknown as { connection: { stream: TLSSocket } }).connection.stream.getPeerCertificate().raw);
    } finally {
      await c.end();
    }
  };

  /**
   * Two holders opening a verified connection and querying every 50 ms, each query a new
   * handshake, until stopped. Once both have queried with a generation, the part says it uses it
   * (its hook lets the agent confirm): a connection opened with the generation before may be in
   * flight until then.
   */
  function holdersQuerying() {
    const failures: string[] = [];
    let queries = 0;
    let stop = false;
    const usedBy = [0, 0];
    let marked = 0;
    const holders = [0, 1].map(async (i) => {
      while (!stop) {
        // Read before the binding's values: a generation written in between is only said later.
        const generation = bindingGeneration(root(), "shop", "api", "db") ?? 0;
        const c = connect();
        try {
          await c.connect();
          await c.query("select 1");
          queries++;
          usedBy[i] = generation;
          if (Math.min(...usedBy) > marked) {
            marked = Math.min(...usedBy);
            hook.mark("shop", "api", marked);
          }
        } catch (e) {
          failures.push(String(e));
        } finally {
          await c.end().catch(() => undefined);
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    });
    return {
      failures,
      /** Waits for `n` more queries to pass. */
      async more(n: number) {
        const from = queries;
        await waitFor(`${n} more queries (${queries - from} so far)`, () => queries >= from + n, 15_000);
      },
      async stop() {
        stop = true;
        await Promise.all(holders);
      },
    };
  }

  it("rotates the server's certificate while holders connect and query every 50 ms: none fails, and the new serial is presented at the commit", async () => {
    const first = serialOf(held().certPem);
    expect((await served()).serialNumber.toLowerCase()).toBe(first);
    const load = holdersQuerying();
    try {
      await load.more(10);
      await rotateCommitted(mesh, "db/cert", 2);
      const second = serialOf(held().certPem);
      expect(second).not.toBe(first);
      expect((await served()).serialNumber.toLowerCase()).toBe(second);
      await load.more(10);
    } finally {
      await load.stop();
    }
    expect(load.failures).toEqual([]);
    expect((await mesh.moduleStatus("shop"))?.state).toBe("Ready");
  });

  it("rotates the mesh's authority (meshctl ca rotate) while holders connect and query every 50 ms: none fails, and the old root is trusted nowhere", async () => {
    const files = caFiles(join(state, StateFiles.caDir));
    const before = certificatesOf(readFileSync(files.certFile, "utf8")).map(fingerprintOf);
    const load = holdersQuerying();
    const out = bufferOutput();
    try {
      await load.more(10);
      const code = await runCaRotate(mesh.store, files, { masterKey: mesh.masterKey, timeoutMs: 180_000, rotationTimeoutMs: 30_000 }, out);
      expect(code, `${out.stdout}${out.stderr}`).toBe(ExitCodes.Ok);
      await load.more(10);
    } finally {
      await load.stop();
    }
    expect(load.failures).toEqual([]);
    const [newRoot, ...others] = certificatesOf(readFileSync(files.certFile, "utf8"));
    expect(others).toEqual([]);
    expect(before).not.toContain(fingerprintOf(newRoot!));
    // The holders' binding trusts the new root alone, as the grant records; the server presents a certificate of it.
    const binding = bindingPath(root(), "shop", "api", "db");
    expect(certificatesOf(readFileSync(join(binding, "sslrootcert"), "utf8")).map(fingerprintOf)).toEqual([fingerprintOf(newRoot!)]);
    expect((await mesh.grant("shop", "db"))?.resource.trusts).toBe(fingerprintOf(newRoot!));
    expect((await served()).checkIssued(newRoot!)).toBe(true);
    expect(out.stdout).toMatch(/step 1 of 3: .*\n(.*\n)* {2}shop\/db: /);
  });
});
