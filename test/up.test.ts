/**
 * The README's first command, as a new user runs it: `meshctl up` with the example files, as
 * a real process tree (meshctl, resolver, provisioner, agents) against a nats-server and the
 * machine's PostgreSQL on 127.0.0.1:5432, which the example provider names. Output is not a
 * terminal, so `up` prints one line per change.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { startNatsServer, type NatsServer } from "./harness/nats-server.js";
import { waitFor } from "./harness/wait.js";

const repo = fileURLToPath(new URL("..", import.meta.url));
const meshctl = join(repo, "packages/cli/bin/meshctl.js");
const examples = ["examples/providers/postgres.yaml", "examples/shop.yaml", "examples/nothing.yaml"].map((f) => join(repo, f));

// The example provisions shop's database on the machine's shared server; drop what it made.
async function dropShop(): Promise<void> {
  const c = new pg.Client({ host: "127.0.0.1", port: 5432, user: "postgres", database: "postgres" });
  await c.connect();
  const { rows } = await c.query<{ datname: string }>("select datname from pg_database where datname like 'shop\\_%'");
  for (const r of rows) await c.query(`drop database if exists "${r.datname}" with (force)`);
  const roles = await c.query<{ rolname: string }>("select rolname from pg_roles where rolname like 'shop\\_%' order by length(rolname) desc");
  for (const r of roles.rows) await c.query(`drop role if exists "${r.rolname}"`);
  await c.end();
}

describe("meshctl up with the examples", () => {
  let nats: NatsServer;
  let cwd: string;
  let up: ChildProcess;
  let out = "";

  beforeAll(async () => {
    await dropShop();
    nats = await startNatsServer();
    cwd = mkdtempSync(join(tmpdir(), "mesh-up-"));
    up = spawn(process.execPath, [meshctl, "up", ...examples.flatMap((f) => ["-f", f])], {
      cwd,
      env: { ...process.env, NATS_URL: nats.url, MESH_MASTER_KEY: "", MESH_MASTER_KEY_FILE: "" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    up.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    up.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  });

  afterAll(async () => {
    if (up && up.exitCode === null) up.kill("SIGKILL");
    await nats?.stop();
    if (cwd) rmSync(cwd, { recursive: true, force: true });
    await dropShop();
  });

  it("brings shop to Ready and static-site to NothingRequired, with working files", async () => {
    await waitFor("shop Ready in up's output", () => /\bshop Ready\b/.test(out), 30_000).catch((e) => {
      throw new Error(`${(e as Error).message}\n--- up printed:\n${out}`);
    });
    await waitFor("static-site NothingRequired", () => /static-site NothingRequired/.test(out), 10_000);
    expect(out).toMatch(/module\/shop created/);

    const db = join(cwd, ".mesh/bindings/node-a/shop/api/db");
    const client = new pg.Client({ connectionString: readFileSync(join(db, "uri"), "utf8") });
    await client.connect();
    await client.query("create table orders (id int)");
    await client.end();
    expect(existsSync(join(cwd, ".mesh/bindings/node-a/shop/api/session-key/value"))).toBe(true);
    expect(existsSync(join(cwd, ".mesh/bindings/node-b/shop/worker"))).toBe(false);
    expect(statSync(join(cwd, ".mesh/master.key")).mode & 0o777).toBe(0o600);

    // No secret in what up printed or in any service log.
    const password = readFileSync(join(db, "password"), "utf8");
    expect(out).not.toContain(password);
    for (const f of ["resolver", "provisioner", "agent-node-a"]) {
      expect(readFileSync(join(cwd, `.mesh/logs/${f}.log`), "utf8")).not.toContain(password);
    }
  });

  it("stops every service and exits 0 on SIGTERM", async () => {
    const exited = new Promise<number | null>((resolve) => up.once("exit", (code) => resolve(code)));
    up.kill("SIGTERM");
    expect(await exited).toBe(0);
    // Nothing it started still holds a connection to this NATS server.
    const conns = await waitFor("the services' connections to close", async () => {
      const r = await fetch(`http://127.0.0.1:${nats.monitorPort}/connz`).catch(() => undefined);
      if (!r) return undefined;
      const j = (await r.json()) as { num_connections: number };
      return j.num_connections === 0 ? j : undefined;
    }, 10_000);
    expect(conns.num_connections).toBe(0);
  });
});
