/**
 * A service's metrics and health over HTTP (`MESH_METRICS_LISTEN`): the rotator's own process,
 * scraped as Prometheus would scrape it, before and after a rotation it commits; readiness
 * following its NATS connection.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kinds, RotationStates, keys, Rotation, subjects, type ModuleDoc } from "@mesh/shared";
import { MetricNames, readJson } from "@mesh/shared/runtime";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";
import { freePort } from "./harness/ports.js";

const main = join(import.meta.dirname, "..", "services", "rotator", "dist", "main.js");

const shop: ModuleDoc = {
  kind: "Module",
  name: "shop",
  parts: [{ name: "api", node: "node-a", installed: true }],
  requires: [{ name: "key", kind: Kinds.Secret }],
};

/** One sample's value from Prometheus text: the line whose name is `name` and whose labels include every one of `labels`. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = m[2] ?? "";
    if (Object.entries(labels).every(([k, v]) => have.includes(`${k}="${v}"`))) return Number(m[3]);
  }
  return undefined;
}

describe("metrics and health of a service (MESH_METRICS_LISTEN)", () => {
  let mesh: TestMesh;
  let rotator: ChildProcess;
  let base: string;
  let out = "";
  const get = async (path: string) => {
    const r = await fetch(`${base}${path}`);
    return { status: r.status, text: await r.text() };
  };

  beforeAll(async () => {
    mesh = await startTestMesh({ nodes: ["node-a"] });
    expect((await mesh.apply([shop])).ok).toBe(true);
    await mesh.waitForState("shop", "Ready");
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    rotator = spawn(process.execPath, [main], {
      env: {
        ...process.env,
        NATS_URL: mesh.nats.url,
        MESH_MASTER_KEY: mesh.masterKey.key.toString("hex"),
        MESH_METRICS_LISTEN: `127.0.0.1:${port}`,
        MESH_LOG_LEVEL: "info",
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    rotator.stdout!.on("data", (b: Buffer) => (out += b.toString()));
    rotator.stderr!.on("data", (b: Buffer) => (out += b.toString()));
    await waitFor("the rotator ready", async () => (await get("/readyz").catch(() => undefined))?.status === 200, 30_000);
  }, 60_000);
  afterAll(async () => {
    rotator?.kill("SIGKILL");
    await mesh?.stop();
  });

  it("counts the requests it answered and the rotation it committed, with its duration, as Prometheus reads them", async () => {
    const before = await get("/metrics");
    expect(before.status).toBe(200);
    expect(sample(before.text, "mesh_rotations_total", { mesh_outcome: "committed" })).toBeUndefined();
    // The process says what it is (the resource), and nothing of what it holds.
    expect(before.text).toMatch(/target_info\{[^}]*service_name="mesh-rotator"/);

    const reply = (await mesh.nc.request(subjects.rotate, JSON.stringify({ grant: "shop/key" }), { timeout: 15_000 })).json<{ ok: boolean }>();
    expect(reply.ok, JSON.stringify(reply)).toBe(true);
    await waitFor(
      "the rotation committed",
      async () => (await readJson(mesh.store.kv.rotations, keys.grant("shop", "key"), Rotation))?.value.state === RotationStates.Committed,
      30_000,
    );
    const after = await waitFor(
      "the commit counted",
      async () => {
        const m = await get("/metrics");
        return sample(m.text, "mesh_rotations_total", { mesh_kind: "secret", mesh_outcome: "committed" }) === 1 ? m.text : undefined;
      },
      10_000,
    );
    expect(sample(after, "mesh_rotation_duration_count", { mesh_kind: "secret" })).toBe(1);
    expect(sample(after, "mesh_rotation_duration_sum", { mesh_kind: "secret" })).toBeGreaterThan(0);
    expect(sample(after, "mesh_requests_total", { mesh_endpoint: "mesh-api-rotate", mesh_outcome: "ok" })).toBe(1);
    expect(sample(after, "mesh_request_duration_count", { mesh_endpoint: "mesh-api-rotate" })).toBe(1);
    // No grant, module or holder name in any series.
    expect(after).not.toMatch(/shop/);

    // A refused request is counted by its error code.
    const refused = (await mesh.nc.request(subjects.rotate, JSON.stringify({ grant: "nope" }), { timeout: 15_000 })).json<{ ok: boolean }>();
    expect(refused.ok).toBe(false);
    await waitFor(
      "the refusal counted",
      async () => sample((await get("/metrics")).text, "mesh_requests_total", { mesh_endpoint: "mesh-api-rotate", mesh_outcome: "error" }) === 1,
      10_000,
    );
  });

  it("answers liveness and readiness, and an unknown path or method with what it serves", async () => {
    expect(await get("/healthz")).toEqual({ status: 200, text: "ok\n" });
    expect(await get("/readyz")).toEqual({ status: 200, text: "ok\n" });
    expect((await get("/nothing")).text).toMatch(/serves \/metrics, \/healthz and \/readyz/);
    expect((await fetch(`${base}/metrics`, { method: "POST" })).status).toBe(405);
  });

  it("is not ready while its NATS server is gone, and still live", async () => {
    await mesh.nats.stop();
    const notReady = await waitFor(
      "readiness to drop",
      async () => {
        const r = await get("/readyz");
        return r.status === 503 ? r.text : undefined;
      },
      15_000,
    );
    expect(notReady).toMatch(/not ready: its NATS connection is down/);
    expect((await get("/healthz")).status).toBe(200);
  });
});

describe("MESH_METRICS_LISTEN that is not HOST:PORT", () => {
  it("stops the service at start, saying what the variable must be", async () => {
    const child = spawn(process.execPath, [main], {
      env: { ...process.env, NATS_URL: "nats://127.0.0.1:1", MESH_METRICS_LISTEN: "9464", MESH_MASTER_KEY: "00".repeat(32) },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let err = "";
    child.stderr!.on("data", (b: Buffer) => (err += b.toString()));
    const code = await new Promise<number | null>((r) => child.once("exit", r));
    expect(code).toBe(2);
    // Said before anything reaches for NATS (here a port where nothing answers).
    expect(err).toMatch(/MESH_METRICS_LISTEN="9464" is not HOST:PORT/);
  }, 30_000);
});

describe("the dashboard and the alerts", () => {
  it("name only metrics the services export", () => {
    const exported = new Set(
      Object.values(MetricNames).flatMap((n) => {
        const base = n.replace(/\./g, "_");
        return [base, `${base}_total`, `${base}_bucket`, `${base}_sum`, `${base}_count`];
      }),
    );
    // The attributes (metrics.ts names each with its metric): every other mesh_… name must be a metric the services export.
    const attributes = new Set(
      ["endpoint", "outcome", "error_code", "kind", "provider", "condition", "status", "state", "node", "result", "reason", "action"].map((a) => `mesh_${a}`),
    );
    const root = join(import.meta.dirname, "..");
    for (const file of ["deploy/grafana-dashboard.json", "docs/observability.md"]) {
      const named = [...readFileSync(join(root, file), "utf8").matchAll(/\bmesh_[a-z_]+\b/g)].map((m) => m[0]);
      const metricsNamed = named.filter((n) => !attributes.has(n));
      expect(metricsNamed.length, file).toBeGreaterThan(0);
      for (const n of metricsNamed) expect(exported, `${file} names ${n}`).toContain(n);
    }
  });
});
