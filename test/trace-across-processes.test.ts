/**
 * One rotation is one trace across processes: the rotator and an agent (each `mesh-*` process
 * started from sources, exporting with OTEL_EXPORTER_OTLP_ENDPOINT) and two SDK holders (each an
 * application process with its own tracer provider) export to an OTLP/HTTP receiver this test
 * runs (OTLP JSON decoded here; no collector is packaged). The trace holds spans from every
 * process: the rotator's `rotate`, one PRODUCER span per holder (its child), and each holder's
 * CONSUMER span (the producer's child) and its confirmation's PRODUCER span (the consumer's
 * child), with the messaging attributes of semconv 1.27.0, and
 * the resource from OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES with service.version; and the
 * agent's log lines inside its span carry its trace_id and span_id.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kinds, Rotation, RotationStates, keys, subjects, type ModuleDoc } from "@mesh/shared";
import { SEMCONV_SCHEMA_URL, readJson } from "@mesh/shared/runtime";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";
import { expectAcksInConsumers } from "./harness/holder-acks.js";
import { KIND, startReceiver, type OtlpReceiver } from "./harness/otlp-receiver.js";
import { startProcess, stopProcess, type SourceProcess } from "./harness/source-process.js";

const repo = join(import.meta.dirname, "..");
/** The version the services are built as: their resource's `service.version`. */
const servicesVersion = (JSON.parse(readFileSync(join(repo, "services/agent/package.json"), "utf8")) as { version: string }).version;

const traced: ModuleDoc = {
  kind: "Module",
  name: "traced",
  parts: [
    { name: "api", node: "node-a", installed: true },
    { name: "worker", node: "node-b", installed: true },
  ],
  requires: [{ name: "key", kind: Kinds.Secret, parts: ["api", "worker"] }],
};

describe("a rotation as one trace across processes", () => {
  let mesh: TestMesh;
  let receiver: OtlpReceiver;
  const procs: Record<string, SourceProcess> = {};

  beforeAll(async () => {
    receiver = await startReceiver();
    // Resolver and provisioner in this process; no agent here: node-a's runs in its own.
    mesh = await startTestMesh({ nodes: [] });
    const otel = {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_RESOURCE_ATTRIBUTES: "deployment.environment.name=test,service.namespace=mesh",
      OTEL_BSP_SCHEDULE_DELAY: "200",
      MESH_LOG_LEVEL: "info",
    };
    const common = { NATS_URL: mesh.nats.url };
    procs.rotator = startProcess([join(repo, "services/rotator/src/main.ts")], { ...common, ...otel, MESH_MASTER_KEY: mesh.masterKey.key.toString("hex") });
    procs.agent = startProcess([join(repo, "services/agent/src/main.ts"), "--node", "node-a", "--bindings", join(mesh.bindingsRoot, "node-a")], {
      ...common,
      ...otel,
    });
    await waitFor(
      "both services to start",
      () => procs.rotator!.output().includes("rotator started") && procs.agent!.output().includes("agent started"),
      40_000,
    ).catch((e: Error) => {
      throw new Error(`${e.message}\nrotator:\n${procs.rotator!.output()}\nagent:\n${procs.agent!.output()}`);
    });
    expect((await mesh.apply([traced])).ok).toBe(true);
    await waitFor("node-a's agent to hold generation 1", async () => (await mesh.grant("traced", "key"))?.holders["node-a/api"]?.generation === 1, 30_000);
    for (const instance of ["h1", "h2"]) {
      procs[instance] = startProcess([join(repo, "test/harness/traced-holder.ts")], {
        ...common,
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_SERVICE_NAME: `traced-worker-${instance}`,
        HOLD_MODULE: "traced",
        HOLD_REQUIREMENT: "key",
        HOLD_NODE: "node-b",
        HOLD_PART: "worker",
        HOLD_INSTANCE: instance,
      });
    }
    await waitFor(
      "both SDK holders on generation 1 and registered",
      async () => {
        if (!["h1", "h2"].every((h) => procs[h]!.output().includes("generation 1\n"))) return false;
        const keysSeen = await mesh.store.kv.holders.keys();
        let n = 0;
        for await (const k of keysSeen) if (k.startsWith("traced.key.")) n++;
        return n === 2;
      },
      40_000,
    ).catch((e: Error) => {
      throw new Error(`${e.message}\nh1:\n${procs.h1!.output()}\nh2:\n${procs.h2!.output()}`);
    });
  }, 120_000);

  afterAll(async () => {
    await Promise.all(Object.values(procs).map((p) => stopProcess(p)));
    await mesh?.stop();
    await receiver?.close();
  });

  it("holds spans from the rotator, the agent and both SDK holders in one trace, with messaging attributes", async () => {
    const reply = await mesh.nc
      .request(subjects.rotate, JSON.stringify({ grant: "traced/key" }), { timeout: 15_000 })
      .then((m) => m.json<{ ok: boolean; rotation?: Rotation }>());
    expect(reply.ok).toBe(true);
    expect(Object.keys(reply.rotation!.holders).sort()).toEqual(["node-a/api", "node-b/worker/h1", "node-b/worker/h2"]);
    await waitFor(
      "the rotation committed",
      async () => (await readJson(mesh.store.kv.rotations, keys.grant("traced", "key"), Rotation))?.value.state === RotationStates.Committed,
      30_000,
    );
    // Each holder's confirmation is its JetStream ack of the broadcast, recorded by the server on its own consumer (looked at while the holders still run: their consumers go with them).
    await expectAcksInConsumers(mesh, (await readJson(mesh.store.kv.rotations, keys.grant("traced", "key"), Rotation))!.value);
    // Stopping flushes what each process still buffers.
    await Promise.all(Object.values(procs).map((p) => stopProcess(p)));

    const rotate = await waitFor(
      "the rotation's span",
      () => receiver.spans.find((s) => s.span.name === "rotate" && s.attrs["mesh.rotation"] === "traced/key#2"),
      15_000,
    ).catch((e: Error) => {
      // What did arrive, and what the rotator said, so a failure says where the span was lost.
      const got = receiver.spans.map((s) => `${s.resource["service.name"]}: ${s.span.name} ${s.attrs["mesh.rotation"] ?? ""}`);
      throw new Error(
        `${e.message}\nspans received (${got.length}):\n${got.join("\n")}\nrotator (exit ${procs.rotator!.child.exitCode ?? procs.rotator!.child.signalCode}):\n${procs.rotator!.output()}`,
      );
    });
    const traceId = rotate.span.traceId;
    const trace = receiver.spans.filter((s) => s.span.traceId === traceId);
    const services = [...new Set(trace.map((s) => s.resource["service.name"]))].sort();
    expect(services).toEqual(["mesh-agent", "mesh-rotator", "traced-worker-h1", "traced-worker-h2"]);

    // The services' resource: the environment's attributes and their version.
    for (const s of trace.filter((x) => x.resource["service.name"]!.startsWith("mesh-"))) {
      expect(s.resource).toMatchObject({ "deployment.environment.name": "test", "service.namespace": "mesh", "service.version": servicesVersion });
    }
    expect(rotate.span.kind).toBe(KIND.internal);
    expect(rotate.schemaUrl).toBe(SEMCONV_SCHEMA_URL);

    // One PRODUCER span per message of the broadcast, the rotation's child, in the rotator: one
    // into the agent's stream for the part it holds for, one into the part's stream for both SDK instances.
    const producers = trace.filter((s) => s.span.kind === KIND.producer && s.span.parentSpanId === rotate.span.spanId);
    expect(producers.every((p) => p.resource["service.name"] === "mesh-rotator")).toBe(true);
    expect(producers.map((p) => p.attrs["mesh.holder"]).sort()).toEqual(["node-a/api", "node-b/worker"]);
    for (const p of producers) {
      expect(p.attrs).toMatchObject({
        "messaging.system": "nats",
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
        "mesh.rotation": "traced/key#2",
        "mesh.generation": 2,
      });
      expect(p.span.name).toBe(`publish ${p.attrs["messaging.destination.template"]}`);
    }
    const byHolder = (holder: string) => producers.find((p) => p.attrs["mesh.holder"] === holder.split("/").slice(0, 2).join("/"))!;
    expect(byHolder("node-a/api").attrs["messaging.destination.name"]).toBe(subjects.agentRotation("node-a", "traced", "key", "api"));
    expect(byHolder("node-b/worker/h1").attrs["messaging.destination.name"]).toBe(subjects.partRotation("traced", "node-b", "worker", "key"));

    // Each holder's CONSUMER span, in its own process, the child of the producer span of its message.
    const consumers = trace.filter((s) => s.span.kind === KIND.consumer);
    const expected: Record<string, string> = { "node-a/api": "mesh-agent", "node-b/worker/h1": "traced-worker-h1", "node-b/worker/h2": "traced-worker-h2" };
    for (const [holder, service] of Object.entries(expected)) {
      const c = consumers.find((x) => x.attrs["mesh.holder"] === holder);
      expect(c, `the CONSUMER span of ${holder}`).toBeDefined();
      expect(c!.resource["service.name"]).toBe(service);
      expect(c!.span.parentSpanId).toBe(byHolder(holder).span.spanId);
      expect(c!.attrs).toMatchObject({
        "messaging.system": "nats",
        "messaging.operation.type": "process",
        "messaging.destination.name": byHolder(holder).attrs["messaging.destination.name"],
        "mesh.rotation": "traced/key#2",
        "mesh.generation": 2,
      });
      expect(c!.span.name).toBe(`process ${c!.attrs["messaging.destination.template"]}`);
    }
    expect(consumers.find((x) => x.attrs["mesh.holder"] === "node-a/api")!.attrs["messaging.consumer.group.name"]).toBe("agent-node-a");

    // The agent's log lines inside its span carry the trace's ids.
    const agentSpan = consumers.find((x) => x.attrs["mesh.holder"] === "node-a/api")!.span;
    const written = procs
      .agent!.output()
      .split("\n")
      .find((l) => l.includes('"msg":"binding written"') && l.includes('"generation":2'));
    expect(JSON.parse(written!)).toMatchObject({ trace_id: traceId, span_id: agentSpan.spanId });
  }, 90_000);
});
