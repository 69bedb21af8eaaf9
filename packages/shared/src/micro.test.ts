import { describe, expect, it } from "vitest";
import { MicroEndpoints, endpointName, microPermissions, microResponse, microSubjects } from "./micro.js";

describe("the NATS micro protocol's answers", () => {
  const service = { name: "mesh-rotator", version: "1.2.3", description: "the mesh's rotator" };
  const started = new Date("2026-12-05T10:00:00.000Z");

  it("counts each endpoint's requests, errors and time in nanoseconds", () => {
    const endpoints = new MicroEndpoints();
    const rotate = endpoints.add("mesh.api.rotate", "mesh-rotator");
    endpoints.add("mesh.api.evict", "mesh-rotator");
    rotate(2);
    rotate(4, "Conflict: already rotating");
    const [r, e] = endpoints.stats();
    expect(r).toEqual({
      name: "mesh-api-rotate",
      subject: "mesh.api.rotate",
      queue_group: "mesh-rotator",
      num_requests: 2,
      num_errors: 1,
      last_error: "Conflict: already rotating",
      processing_time: 6_000_000,
      average_processing_time: 3_000_000,
    });
    expect(e).toMatchObject({ name: "mesh-api-evict", num_requests: 0, average_processing_time: 0 });
  });

  it("answers PING, INFO and STATS in the protocol's shapes", () => {
    const stats = new MicroEndpoints();
    stats.add("mesh.api.rotate", "q")(1);
    const base = { name: "mesh-rotator", id: "abc", version: "1.2.3", metadata: {} };
    expect(microResponse("PING", service, "abc", started, stats.stats())).toEqual({ type: "io.nats.micro.v1.ping_response", ...base });
    expect(microResponse("INFO", { ...service, metadata: { node: "n1" } }, "abc", started, stats.stats())).toEqual({
      type: "io.nats.micro.v1.info_response",
      ...base,
      metadata: { node: "n1" },
      description: "the mesh's rotator",
      endpoints: [{ name: "mesh-api-rotate", subject: "mesh.api.rotate", queue_group: "q", metadata: null }],
    });
    expect(microResponse("STATS", service, "abc", started, stats.stats())).toMatchObject({
      type: "io.nats.micro.v1.stats_response",
      started: "2026-12-05T10:00:00.000Z",
      endpoints: [{ subject: "mesh.api.rotate", num_requests: 1 }],
    });
  });

  it("names endpoints in the protocol's alphabet, and listens, and may listen, under its own name only", () => {
    expect(endpointName("mesh.api.credential.fetch.*.>")).toBe("mesh-api-credential-fetch");
    expect(microSubjects("mesh-resolver", "x1")).toEqual([
      "$SRV.PING",
      "$SRV.PING.mesh-resolver",
      "$SRV.PING.mesh-resolver.x1",
      "$SRV.INFO",
      "$SRV.INFO.mesh-resolver",
      "$SRV.INFO.mesh-resolver.x1",
      "$SRV.STATS",
      "$SRV.STATS.mesh-resolver",
      "$SRV.STATS.mesh-resolver.x1",
    ]);
    expect(microPermissions("mesh-agent-n1").filter((s) => s.includes("mesh-"))).toEqual(
      ["PING", "INFO", "STATS"].flatMap((v) => [`$SRV.${v}.mesh-agent-n1`, `$SRV.${v}.mesh-agent-n1.*`]),
    );
  });
});
