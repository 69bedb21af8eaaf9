import { afterEach, describe, expect, it } from "vitest";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { trace } from "@opentelemetry/api";
import { startTracing } from "./otel.js";

describe("startTracing", () => {
  let server: Server | undefined;
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
    const tracing = await startTracing("mesh-rotator", { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}/` });
    const span = trace.getTracer("mesh.rotator").startSpan("rotate", { attributes: { "mesh.grant": "shop/db" } });
    span.end();
    await tracing.stop(); // flushes the batch
    expect(bodies).toHaveLength(1);
    expect(bodies[0]!.path).toBe("/v1/traces");
    expect(bodies[0]!.body).toContain("rotate");
    expect(bodies[0]!.body).toContain("shop/db");
    expect(bodies[0]!.body).toContain("mesh-rotator");
  });

  it("stays a no-op without an endpoint", async () => {
    const tracing = await startTracing("mesh-rotator", {});
    await expect(tracing.stop()).resolves.toBeUndefined();
  });
});
