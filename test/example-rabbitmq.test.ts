/**
 * `examples/providers/rabbitmq.yaml` as shipped, on a mesh: its admin is RabbitMQ's default
 * `guest` with no variable to set first, and on a broker whose management plugin is off (as on
 * this kind of machine when it starts) the grant's condition names the command that turns it
 * on. The example's addresses are pointed at the test run's own RabbitMQ (and at a port where
 * no management API listens); nothing else of the file is changed.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import amqplib from "amqplib";
import { ProviderDoc } from "@mesh/shared";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { freePort } from "./harness/ports.js";
import { waitFor } from "./harness/wait.js";

const repo = fileURLToPath(new URL("..", import.meta.url));
const AMQP_PORT = Number(process.env.RABBITMQ_TEST_AMQP_PORT ?? 5672);
const MANAGEMENT_URL = process.env.RABBITMQ_TEST_MANAGEMENT_URL ?? "http://127.0.0.1:15672";

const example = ProviderDoc.parse(parse(readFileSync(join(repo, "examples/providers/rabbitmq.yaml"), "utf8")));
const moduleOf = (name: string) => ({
  kind: "Module",
  name,
  parts: [{ name: "app", node: "node-a" }],
  requires: [{ name: "events", kind: "rabbitmq.vhost", parts: ["app"] }],
});

/** A mesh of the describe block's own, whose provisioner has no RABBITMQ_ADMIN_PASSWORD or any other variable set for it. */
function meshPerBlock(): () => TestMesh {
  let mesh: TestMesh | undefined;
  beforeAll(async () => {
    const env = { ...process.env };
    delete env.RABBITMQ_ADMIN_PASSWORD;
    mesh = await startTestMesh({ env });
  });
  afterAll(async () => {
    await mesh?.stop();
  });
  return () => mesh!;
}

describe("the RabbitMQ example provider, as shipped", () => {
  const mesh = meshPerBlock();

  it("names guest alone as its admin, with nothing for the user to set first", () => {
    expect(example.admin).toEqual({ username: "guest" });
  });

  it("provisions a vhost a holder logs in to, as guest with RabbitMQ's default password", async () => {
    const provider = { ...example, endpoint: `amqp://127.0.0.1:${AMQP_PORT}`, options: { managementUrl: MANAGEMENT_URL } };
    expect((await mesh().apply([provider, moduleOf("ex-rabbit")])).ok).toBe(true);
    await mesh().waitForState("ex-rabbit", "Ready", 30_000);
    expect((await mesh().grant("ex-rabbit", "events"))?.resource).toMatchObject({ vhost: "ex__rabbit_events" });
    const uri = readFileSync(join(mesh().bindingsRoot, "node-a/ex-rabbit/app/events/uri"), "utf8");
    const conn = await amqplib.connect(uri, { timeout: 3_000 });
    await conn.close();
  });
});

describe("the RabbitMQ example provider, on a broker with its management plugin off", () => {
  const mesh = meshPerBlock();

  it("leaves the grant Provisioned False with a message that names the command that enables the plugin", async () => {
    // The broker's real AMQP port, and a port where no management API listens: a fresh install.
    const provider = { ...example, endpoint: `amqp://127.0.0.1:${AMQP_PORT}`, options: { managementUrl: `http://127.0.0.1:${await freePort()}` } };
    expect((await mesh().apply([provider, moduleOf("ex-rabbit-off")])).ok).toBe(true);
    const c = await waitFor("the grant's Provisioned condition", async () => {
      const cond = (await mesh().grant("ex-rabbit-off", "events"))?.conditions.find((x) => x.type === "Provisioned");
      return cond?.status === "False" ? cond : undefined;
    });
    expect(c.message).toContain("`rabbitmq-plugins enable rabbitmq_management`");
    // The module's state follows its grant's condition (the resolver derives it right after).
    await mesh().waitForState("ex-rabbit-off", "Degraded");
  });
});
