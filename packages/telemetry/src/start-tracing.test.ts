import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { trace } from "@opentelemetry/api";
import { resourceAttributes, startTracing, tracesEndpoint } from "./start-tracing.js";
import { observed } from "./observed.js";

describe("startTracing", () => {
  let server: Server | undefined;
  // The API takes a global provider once per process: each test starts with none set.
  beforeEach(() => trace.disable());
  afterEach(() => new Promise<void>((r) => (server ? server.close(() => r()) : r())));

  it("exports spans over OTLP/HTTP to <OTEL_EXPORTER_OTLP_ENDPOINT>/v1/traces", async () => {
    const bodies: Array<{ path: string; body: string }> = [];
    server = createServer((req, res) => {
      let body = "";
      req.on("data", (d: Buffer) => (body += d.toString()));
      req.on("end", () => {
        bodies.push({ path: req.url ?? "", body });
        res.writeHead(200, { "content-type": "application/json" }).end("{}");
      });
    });
    await new Promise<void>((r) => server!.listen(0, "127.0.0.1", r));
    const { port } = server.address() as AddressInfo;
    const tracing = await startTracing(
      "mesh-rotator",
      { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}/`, OTEL_RESOURCE_ATTRIBUTES: "deployment.environment.name=test" },
      "0.1.0",
    );
    const span = trace.getTracer("mesh.rotator").startSpan("rotate", { attributes: { "mesh.grant": "shop/db" } });
    span.end();
    await tracing.stop(); // flushes the batch
    expect(bodies).toHaveLength(1);
    expect(bodies[0]!.path).toBe("/v1/traces");
    expect(bodies[0]!.body).toContain("rotate");
    expect(bodies[0]!.body).toContain("shop/db");
    expect(bodies[0]!.body).toContain("mesh-rotator");
    expect(bodies[0]!.body).toContain("deployment.environment.name");
  });

  it("reads the resource from the environment: OTEL_SERVICE_NAME over OTEL_RESOURCE_ATTRIBUTES over the process's own", () => {
    expect(resourceAttributes("mesh-agent", "0.1.0", {})).toEqual({ "service.name": "mesh-agent", "service.version": "0.1.0" });
    expect(
      resourceAttributes("mesh-agent", "0.1.0", { OTEL_RESOURCE_ATTRIBUTES: "service.name=x,host.name=node%2Da, service.namespace = shop ,bad,=v,k=%E0%A4%A" }),
    ).toEqual({ "service.name": "x", "service.version": "0.1.0", "host.name": "node-a", "service.namespace": "shop" });
    expect(resourceAttributes("mesh-agent", undefined, { OTEL_RESOURCE_ATTRIBUTES: "service.name=x", OTEL_SERVICE_NAME: "y" })).toEqual({
      "service.name": "y",
    });
  });

  it.each<[NodeJS.ProcessEnv, string | undefined]>([
    [{}, undefined],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318" }, "http://c:4318/v1/traces"],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318/", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://t/x" }, "http://t/x"],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_SDK_DISABLED: "true" }, undefined],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_TRACES_EXPORTER: "none" }, undefined],
  ])("exports for %j to %s", (env, url) => {
    expect(tracesEndpoint(env)).toBe(url);
  });

  it("an observed service whose stop fails still flushes its spans, and the failure reaches the caller", async () => {
    const bodies: string[] = [];
    server = createServer((req, res) => {
      let body = "";
      req.on("data", (d: Buffer) => (body += d.toString()));
      req.on("end", () => {
        bodies.push(body);
        res.writeHead(200, { "content-type": "application/json" }).end("{}");
      });
    });
    await new Promise<void>((r) => server!.listen(0, "127.0.0.1", r));
    const { port } = server.address() as AddressInfo;
    const start = observed(
      "mesh-rotator",
      "0.1.0",
      async () => ({
        stop: async () => {
          trace
            .getTracer("mesh.rotator")
            .startSpan("rotate", { attributes: { "mesh.rotation": "shop/db#2" } })
            .end();
          throw new Error("a consumer would not stop");
        },
      }),
      { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}` },
    );
    // No NATS here: the connection's status is all the wrapper reads of it, and it never changes.
    const nc = { status: async function* () {}, isClosed: () => false };
    const running = await start({ log: { info: () => undefined }, nc } as unknown as Parameters<typeof start>[0]);
    await expect(running.stop()).rejects.toThrow("a consumer would not stop");
    expect(bodies.join("")).toContain("shop/db#2");
  });

  it("stays a no-op without an endpoint", async () => {
    const tracing = await startTracing("mesh-rotator", {});
    await expect(tracing.stop()).resolves.toBeUndefined();
  });
});
