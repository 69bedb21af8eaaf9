/**
 * The README's first command, as a new user runs it: `meshctl up` with the example files and
 * no NATS_URL, as a real process tree (meshctl, its own nats-server whose operator is the mesh,
 * resolver, provisioner, agents) and the machine's PostgreSQL on 127.0.0.1:5432, which the
 * example provider names. This machine's shared NATS holds 4222, so up starts its server on a
 * free port and says which. Output is not a terminal, so `up` prints one line per change. Then
 * `up` on a named server without authentication: it runs, and says loudly what that exposes.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn, type ChildProcess } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { connect } from "@nats-io/transport-node";
import { connectWithIdentity } from "@mesh/client";
import { isTcpPortFree } from "@mesh/cli";
import { servedCertificate } from "@mesh/shared/runtime";
import { ownServerTls, runMeshctl } from "./harness/bootstrapped-mesh.js";
import { plainClient } from "./harness/plain-nats-client.js";
import { entriesOpenToOthers } from "./harness/file-modes.js";
import { startNatsServer, type NatsServer } from "./harness/nats-server.js";
import { dropFromSharedPostgres, holdSharedPostgresNames } from "./harness/postgres.js";
import { waitFor } from "./harness/wait.js";
import { scratchDir } from "./harness/scratch.js";

const repo = fileURLToPath(new URL("..", import.meta.url));
const meshctl = join(repo, "packages/cli/bin/meshctl.js");
const examples = ["examples/providers/postgres.yaml", "examples/shop.yaml", "examples/nothing.yaml"].map((f) => join(repo, f));

// The example provisions shop's database on the machine's shared server; drop what it made.
const dropShop = () => dropFromSharedPostgres("shop");

/** The environment of a new user's shell: no NATS address or identity of the mesh's. */
const freshEnv = { ...process.env, NATS_URL: "", MESH_NATS_CREDENTIALS: "", MESH_NATS_USER: "", MESH_MASTER_KEY: "", MESH_MASTER_KEY_FILE: "" };

describe("meshctl up with the examples", () => {
  let cwd: string;
  let up: ChildProcess;
  let out = "";
  let release: (() => void) | undefined;

  /** The address up's own nats-server listens on, as up printed it; waited for once, by whichever test asks first. */
  let listening: Promise<string> | undefined;
  const serverUrl = () =>
    (listening ??= waitFor("up to start its nats-server", () => /listening on (nats:\/\/127\.0\.0\.1:\d+).*no monitoring port/.exec(out)?.[1], 30_000).catch(
      (e: unknown) => {
        throw new Error(`${(e as Error).message}\n--- up printed:\n${out}`);
      },
    ));

  // On an idle machine of this kind shop is Ready about 18 s after up starts its server: six
  // services start (each imports for about a second of CPU, on two cores), answer, move onto
  // their granted identities and start again. Under CI, beside the other test files, that took
  // past 30 s. up itself waits 60 s for the resolver and 120 s for the control plane, so the
  // tests allow what a user would wait through, not a fraction of it.
  let ready: Promise<void> | undefined;
  const shopReady = () =>
    (ready ??= waitFor("shop Ready in up's output", () => /\bshop Ready\b/.test(out), 150_000).then(
      () => undefined,
      (e: unknown) => {
        throw new Error(`${(e as Error).message}\n--- up printed:\n${out}`);
      },
    ));

  // test/release.test.ts runs the same example on the same server: each waits for the other.
  beforeAll(async () => {
    release = await holdSharedPostgresNames("shop");
    await dropShop();
    cwd = mkdtempSync(join(tmpdir(), "mesh-up-"));
    up = spawn(process.execPath, [meshctl, "up", ...examples.flatMap((f) => ["-f", f])], { cwd, env: freshEnv, stdio: ["ignore", "pipe", "pipe"] });
    up.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    up.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  }, 320_000);

  afterAll(async () => {
    if (up && up.exitCode === null) up.kill("SIGKILL");
    if (cwd) rmSync(cwd, { recursive: true, force: true });
    await dropShop();
    release?.();
  });

  it("starts a NATS server of its own whose operator is the mesh, on 4222 or, taken, on a port it names; no client without credentials gets in", async () => {
    const url = await serverUrl();
    // No monitoring port unless asked for (--nats-monitor): its /connz would show anyone every identity's connections.
    expect(readFileSync(join(cwd, ".mesh/nats-operator/server.conf"), "utf8")).not.toMatch(/^\s*(http|http_port|monitor_port)\b/m);
    if (!(await isTcpPortFree("127.0.0.1", 4222))) {
      expect(url).not.toBe("nats://127.0.0.1:4222");
      expect(out).toContain(`port 4222 is taken on 127.0.0.1`);
    }
    await waitFor("up to record where its server listens", () => existsSync(join(cwd, ".mesh/nats-url")) || undefined, 10_000);
    expect(readFileSync(join(cwd, ".mesh/nats-url"), "utf8").trim()).toBe(url);
    for (const f of [".mesh/nats-url", ".mesh/nats-operator/admin.creds", ".mesh/nats-operator/signing-keys.json"]) {
      expect((statSync(join(cwd, f)).mode & 0o777).toString(8), f).toBe("600");
    }
    const refused = await connect({ servers: url, reconnect: false, timeout: 3_000, ...ownServerTls(cwd) }).then(
      async (nc) => (await nc.close(), "connected"),
      (e: unknown) => String(e),
    );
    expect(refused).toMatch(/Authorization Violation/);
  });

  it("its server requires TLS: a client that does not speak it is refused, and the handshake shows a certificate of the mesh's authority for the address", async () => {
    const url = await serverUrl();
    const at = new URL(url);
    const { said, info } = await plainClient({ host: at.hostname, port: Number(at.port) });
    expect(info?.tls_required).toBe(true);
    expect(said).not.toContain("PONG");
    const bundle = readFileSync(join(cwd, ".mesh/mesh-ca/ca.crt"), "utf8");
    // Verified against the bundle (the handshake fails otherwise) for the IP address in the URL.
    const served = await servedCertificate({ host: at.hostname, port: Number(at.port) }, { ca: bundle });
    expect(served.tlsRequired).toBe(true);
    expect(served.certificate!.checkIssued(new X509Certificate(bundle))).toBe(true);
    expect(served.certificate!.subjectAltName).toContain(`IP Address:${at.hostname}`);
    expect(served.certificate!.serialNumber.toLowerCase()).toBe(realpathSync(join(cwd, ".mesh/nats-operator/tls/current")).split("/").pop());
    // The configuration names the link, not a generation: a renewal never rewrites it.
    expect(readFileSync(join(cwd, ".mesh/nats-operator/server.conf"), "utf8")).toMatch(
      /tls \{ cert_file: ".*\/tls\/current\/tls\.crt", key_file: ".*\/tls\/current\/tls\.key"/,
    );
  });

  it("brings shop to Ready and static-site to NothingRequired, with working files", { timeout: 200_000 }, async () => {
    await shopReady();
    const url = await serverUrl();
    await waitFor("static-site NothingRequired", () => /static-site NothingRequired/.test(out), 10_000);
    expect(out).toMatch(/module\/shop created/);

    const db = join(cwd, ".mesh/bindings/node-a/shop/api/db");
    const client = new pg.Client({ connectionString: readFileSync(join(db, "uri"), "utf8") });
    await client.connect();
    await client.query("create table orders (id int)");
    await client.end();
    expect(existsSync(join(cwd, ".mesh/bindings/node-a/shop/api/session-key/value"))).toBe(true);
    // Every service runs on an identity the mesh granted it, not as the operator's admin.
    expect(out).toMatch(/restarted resolver, provisioner, verifier, rotator, agent node-a, agent node-b with the identities the mesh granted them/);
    // Every installed part has its own identity on up's server, the part of a module that requires nothing too.
    for (const part of [".mesh/bindings/node-a/shop/api", ".mesh/bindings/node-a/static-site/web"]) {
      await waitFor(`${part}'s identity`, () => existsSync(join(cwd, part, "identity/creds")) || undefined, 10_000);
      const conn = await connectWithIdentity(join(cwd, part, "identity"), { follow: false });
      // The identity names the server as requiring TLS, and carries the bundle that verifies it.
      expect(conn.identity.url).toBe(url.replace(/^nats:/, "tls:"));
      expect(readFileSync(join(cwd, part, "identity/ca.crt"), "utf8")).toBe(readFileSync(join(cwd, ".mesh/mesh-ca/ca.crt"), "utf8"));
      await conn.nc.flush();
      await conn.close();
    }
    expect(existsSync(join(cwd, ".mesh/bindings/node-b/shop/worker"))).toBe(false);
    expect(statSync(join(cwd, ".mesh/master.key")).mode & 0o777).toBe(0o600);
    // Nothing the mesh keeps here is open to another local user: not the keys, the NATS store,
    // the logs, nor the bindings the agents wrote (symlinks aside: their mode means nothing).
    expect(entriesOpenToOthers(join(cwd, ".mesh"))).toEqual([]);

    // Nothing of Node's own in what a user reads (a leak warning came from up's waits once).
    expect(out).not.toMatch(/\(node:\d+\) \w*Warning/);
    // No secret in what up printed or in any service log.
    const password = readFileSync(join(db, "password"), "utf8");
    expect(out).not.toContain(password);
    for (const f of ["resolver", "provisioner", "agent-node-a"]) {
      expect(readFileSync(join(cwd, `.mesh/logs/${f}.log`), "utf8")).not.toContain(password);
    }
  });

  it(
    "every meshctl command run from that directory finds the server and the operator's credentials, with no flag or variable",
    { timeout: 200_000 },
    async () => {
      await shopReady();
      const url = await serverUrl();
      const r = await runMeshctl(cwd, ["status", "shop", "--json"], freshEnv);
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout)).toMatchObject({ modules: [{ module: "shop", state: "Ready" }] });
      expect(JSON.parse(r.stdout)).not.toHaveProperty("warnings");
      expect(r.stderr).toBe("");
      // From elsewhere, with the address alone, meshctl does not trust the server, and says what to give.
      expect(url).toMatch(/^nats:\/\//);
      const untrusted = await runMeshctl(scratchDir("mesh-elsewhere-"), ["status", "shop"], { ...freshEnv, NATS_URL: url });
      expect(untrusted.code).toBe(1);
      expect(untrusted.stderr).toMatch(/speaks TLS with a certificate this process does not trust .*MESH_NATS_CA_FILE/);
      // Trusting it, with the address alone, the server refuses meshctl and it says what to do.
      const ca = join(cwd, ".mesh/mesh-ca/ca.crt");
      const elsewhere = await runMeshctl(scratchDir("mesh-elsewhere-"), ["status", "shop"], { ...freshEnv, NATS_URL: url, MESH_NATS_CA_FILE: ca });
      expect(elsewhere.code).toBe(1);
      expect(elsewhere.stderr).toMatch(/refused this process's identity/);
      expect(elsewhere.stderr).toContain("--creds .mesh/nats-operator/admin.creds (or NATS_CREDS=, or MESH_NATS_CREDENTIALS=)");
      // Named: with --creds, NATS_CREDS, or a context of the nats CLI that holds the server and the credentials.
      const admin = join(cwd, ".mesh/nats-operator/admin.creds");
      const named = async (args: string[], env: NodeJS.ProcessEnv) => {
        const r = await runMeshctl(scratchDir("mesh-elsewhere-"), [...args, "status", "shop", "-o", "json"], { ...freshEnv, ...env });
        expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBe(0);
        expect(JSON.parse(r.stdout)).toMatchObject({ modules: [{ module: "shop", state: "Ready" }] });
      };
      await named(["--creds", admin], { NATS_URL: url, MESH_NATS_CA_FILE: ca });
      await named([], { NATS_URL: url, NATS_CREDS: admin, MESH_NATS_CA_FILE: ca });
      const config = scratchDir("mesh-nats-config-");
      mkdirSync(join(config, "nats/context"), { recursive: true });
      writeFileSync(join(config, "nats/context/mesh.json"), JSON.stringify({ description: "this mesh", url, creds: admin, ca }));
      await named(["--context", "mesh"], { XDG_CONFIG_HOME: config });
      await named([], { XDG_CONFIG_HOME: config, NATS_CONTEXT: "mesh" });
    },
  );

  it("stops every service and its nats-server, and exits 0 on SIGTERM", async () => {
    const url = await serverUrl();
    const exited = new Promise<number | null>((resolve) => up.once("exit", (code) => resolve(code)));
    up.kill("SIGTERM");
    expect(await exited).toBe(0);
    expect(out).toMatch(/stopped nats-server/);
    await waitFor("its nats-server to be gone", async () => (await isTcpPortFree("127.0.0.1", Number(new URL(url).port))) || undefined, 10_000);
  });
});

describe("meshctl up on a named NATS server without authentication", () => {
  let nats: NatsServer;
  let cwd: string;

  beforeAll(async () => {
    nats = await startNatsServer();
    cwd = mkdtempSync(join(tmpdir(), "mesh-up-open-"));
  });
  afterAll(async () => {
    await nats?.stop();
    if (cwd) rmSync(cwd, { recursive: true, force: true });
  });

  it("runs, and it and every service say loudly that anyone on that server can take every credential", async () => {
    const up = spawn(process.execPath, [meshctl, "up", "--nodes", "node-a", "--nats-monitor", "127.0.0.1:0", "-f", join(repo, "examples/nothing.yaml")], {
      cwd,
      env: { ...freshEnv, NATS_URL: nats.url },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    up.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    up.stderr!.on("data", (d: Buffer) => (out += d.toString()));
    try {
      await waitFor("up's live status", () => /live status/.test(out), 30_000).catch((e) => {
        throw new Error(`${(e as Error).message}\n--- up printed:\n${out}`);
      });
      expect(out).toContain(`using the NATS server at ${nats.url}`);
      // A server up does not start is configured by its own operator: its monitoring too.
      expect(out).toContain(`--nats-monitor is left unused: meshctl up did not start the server at ${nats.url}`);
      expect(out).toMatch(
        new RegExp(`WARNING: the NATS server at ${nats.url.replace(/\./g, "\\.")} has no authentication: anyone who can reach it can take every credential`),
      );
      expect(existsSync(join(cwd, ".mesh/nats-operator/admin.creds"))).toBe(false); // nothing of an operator's on a server it does not run
      for (const f of ["resolver", "provisioner", "verifier", "rotator", "agent-node-a"]) {
        await waitFor(`${f}'s warning`, () => readFileSync(join(cwd, `.mesh/logs/${f}.log`), "utf8").includes("has no authentication") || undefined, 10_000);
      }
      // meshctl status shows it on the mesh itself, first, in both forms.
      const text = await runMeshctl(cwd, ["status"], { ...freshEnv, NATS_URL: nats.url });
      expect(text.code, text.stderr).toBe(0);
      expect(text.stderr).toMatch(/^WARNING: the NATS server at .* has no authentication/);
      const json = await runMeshctl(cwd, ["status", "--json"], { ...freshEnv, NATS_URL: nats.url });
      expect((JSON.parse(json.stdout) as { warnings?: string[] }).warnings?.[0]).toMatch(
        /has no authentication: anyone who can reach it can take every credential/,
      );
      // A part's identity carries the url alone: there is no identity to give on such a server.
      const identity = join(cwd, ".mesh/bindings/node-a/static-site/web/identity");
      await waitFor("the part's identity binding", () => existsSync(join(identity, "url")) || undefined, 20_000);
      expect(readFileSync(join(identity, "url"), "utf8")).toBe(nats.url);
      expect(existsSync(join(identity, "creds"))).toBe(false);
      expect(out).toMatch(/the url alone: the server has no authentication/);
    } finally {
      const exited = new Promise<number | null>((resolve) => up.once("exit", (code) => resolve(code)));
      up.kill("SIGTERM");
      expect(await exited).toBe(0);
    }
  }, 60_000);
});
