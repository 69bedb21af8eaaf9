/**
 * The node agent against a real nats-server: deliveries become binding files, holders and the
 * `Delivered` condition are recorded, generations replace each other, deliveries survive the
 * agent being down, and no value reaches the log. The agent records what it did in its own
 * node's receipts, which the provisioner's real fold (`foldReceipts`) turns into the grant's
 * holders and conditions; the provisioner's credential source is stood in for by
 * test/harness/credential-responder.ts (real crypto, subjects and schemas).
 */
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeliveryReceipt, Grant, NodeRecord, Streams, getCondition, keys, subjects, type Delivery, type Kind } from "@mesh/shared";
import { connectNats, mutateJson, openStore, readJson, traceHeaders, type Consumption, type NatsConnection, type Store } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { agentDurable, bindingGeneration, startAgent, writeBinding, type Agent } from "@mesh/agent";
import { foldReceipts } from "@mesh/provisioner";
import { startNatsServer, type NatsServer } from "./harness/nats-server.js";
import { LogCapture } from "./harness/log-capture.js";
import { waitFor } from "./harness/wait.js";
import { credentialResponder, type CredentialResponder } from "./harness/credential-responder.js";

const NODE = "node-a";
const GRACE_MS = 300;

let nats: NatsServer;
let nc: NatsConnection;
let store: Store;
let root: string;
let responder: CredentialResponder;
let agent: Agent | undefined;
let folding: Consumption;
const logs = new LogCapture();
const secrets: string[] = [];

/** A fresh secret value, remembered so the log can be searched for it. */
function secret(label: string): string {
  const v = `${label}-${randomBytes(12).toString("hex")}`;
  secrets.push(v);
  return v;
}

const dbValues = (password: string) => ({
  type: "postgresql",
  provider: "pg-main",
  host: "127.0.0.1",
  port: "5432",
  database: "shop_db",
  username: "shop_db_a",
  password,
  uri: `postgresql://shop_db_a:${password}@127.0.0.1:5432/shop_db`,
});

async function putGrant(module: string, requirement: string, kind: Kind, targets: Grant["targets"], generation: number): Promise<void> {
  const now = new Date().toISOString();
  const grant: Grant = {
    id: `${module}/${requirement}`,
    module,
    requirement,
    kind,
    parts: targets.map((t) => t.part),
    targets,
    provider: kind === "secret" ? "builtin-secret" : "pg-main",
    generation,
    resource: {},
    holders: {},
    conditions: [
      { type: "Resolved", status: "True", reason: "ProviderSelected", message: "test", observedAt: now },
      { type: "Provisioned", status: "True", reason: "Provisioned", message: "test", observedAt: now },
    ],
  };
  await store.kv.grants.put(keys.grant(module, requirement), JSON.stringify(grant));
}

async function bumpGeneration(module: string, requirement: string, generation: number): Promise<void> {
  await mutateJson(store.kv.grants, keys.grant(module, requirement), Grant, (g) => (g ? { ...g, generation } : undefined));
}

async function grant(module: string, requirement: string): Promise<Grant | undefined> {
  return (await readJson(store.kv.grants, keys.grant(module, requirement), Grant))?.value;
}

/** Publishes a Delivery; returns its stream sequence. */
async function publishDelivery(d: { module: string; requirement: string; part: string; kind: Kind; generation: number; node?: string }): Promise<number> {
  const delivery: Delivery = {
    grant: `${d.module}/${d.requirement}`,
    module: d.module,
    requirement: d.requirement,
    part: d.part,
    node: d.node ?? NODE,
    kind: d.kind,
    provider: d.kind === "secret" ? "builtin-secret" : "pg-main",
    generation: d.generation,
    publishedAt: new Date().toISOString(),
  };
  const ack = await store.js.publish(subjects.delivery(delivery.node, d.module, d.part, d.requirement), JSON.stringify(delivery), { headers: traceHeaders() });
  return ack.seq;
}

/** Waits until the agent's consumer has acknowledged everything up to `seq`. */
async function waitAcked(seq: number): Promise<void> {
  await waitFor(`the agent to acknowledge stream sequence ${seq}`, async () => {
    const ci = await store.jsm.consumers.info(Streams.deliveries, agentDurable(NODE));
    return ci.ack_floor.stream_seq >= seq && ci.num_ack_pending === 0 && ci.num_pending === 0;
  });
}

const read = (...p: string[]) => readFileSync(join(root, ...p), "utf8");

/**
 * Generation `generation` of `module/requirement` (a postgres.database with `password`, unless
 * `values` are given) stored, set on the grant (made at generation 1), and delivered to part
 * `api` on this node; returns the delivery's stream sequence.
 */
async function deliver(module: string, requirement: string, generation: number, password: string, values?: Record<string, string>): Promise<number> {
  const kind: Kind = values ? "secret" : "postgres.database";
  if (generation === 1) await putGrant(module, requirement, kind, [{ part: "api", node: NODE }], 1);
  else await bumpGeneration(module, requirement, generation);
  await responder.put(module, requirement, generation, values ?? dbValues(password));
  return publishDelivery({ module, requirement, part: "api", kind, generation });
}

/** Waits until `module`'s part api has `password` in its binding of `requirement`. */
async function onDisk(module: string, requirement: string, password: string, timeoutMs?: number): Promise<void> {
  const file = join(root, module, "api", requirement, "password");
  await waitFor(`${module}/api's ${requirement} password on disk`, () => existsSync(file) && readFileSync(file, "utf8") === password, timeoutMs);
}

function start(): Promise<Agent> {
  return startAgent({ store, node: NODE, bindingsRoot: root, log: createLogger("agent", { destination: logs, level: "debug" }), graceMs: GRACE_MS });
}

beforeAll(async () => {
  nats = await startNatsServer();
  nc = await connectNats(nats.url);
  store = await openStore(nc);
  root = mkdtempSync(join(tmpdir(), "mesh-agent-test-"));
  // The stand-in provisioner logs elsewhere: this test's log assertions are about the agent.
  responder = credentialResponder(store, createLogger("test-provisioner", { destination: new LogCapture() }));
  folding = await foldReceipts({ store, log: createLogger("test-provisioner", { destination: new LogCapture() }) });
  agent = await start();
});

afterAll(async () => {
  await agent?.stop();
  await responder?.stop();
  await folding?.stop();
  await nc?.close();
  await nats?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("agent", () => {
  it("registers its node and writes a delivered credential's files", async () => {
    const rec = await readJson(store.kv.nodes, NODE, NodeRecord);
    expect(rec?.value).toMatchObject({ node: NODE, bindingsRoot: root });
    expect(logs.text).toContain(`agent for node ${NODE} writing under ${root}`);

    const pw1 = secret("pw1");
    await deliver("shop", "db", 1, pw1);
    await onDisk("shop", "db", pw1);
    expect(readdirSync(join(root, "shop/api/db")).sort()).toEqual(["database", "host", "password", "port", "provider", "type", "uri", "username"]);
    expect(read("shop/api/db/type")).toBe("postgresql");
    expect(read("shop/api/db/username")).toBe("shop_db_a");
    expect(read("shop/api/db/uri")).toBe(dbValues(pw1).uri);
    expect(read("shop/api.env")).toContain(`DB_PASSWORD='${pw1}'\n`);
  });

  it("records itself as holder in its own node's receipt, which sets the grant's holder and Delivered", async () => {
    await deliver("held", "db", 1, secret("held"));
    const g = await waitFor("the holder to be recorded", async () => {
      const g = await grant("held", "db");
      return g?.holders["node-a/api"]?.generation === 1 ? g : undefined;
    });
    expect(getCondition(g.conditions, "Delivered")).toMatchObject({ status: "True", reason: "Delivered" });
    const receipt = await readJson(store.kv.receipts, keys.receipt(NODE, "held", "db", "api"), DeliveryReceipt);
    expect(receipt?.value).toMatchObject({ generation: 1 });
  });

  it("replaces the first generation with the second, and removes the first's files after the grace", async () => {
    const [pw1, pw2] = [secret("pw1"), secret("pw2")];
    await deliver("next", "db", 1, pw1);
    await onDisk("next", "db", pw1);
    const first = readdirSync(join(root, "next/.api.generations")).filter((e) => e.startsWith("db-g1-"));
    expect(first).toHaveLength(1);
    // The part's directory holds its bindings and nothing else.
    expect(readdirSync(join(root, "next/api"))).toEqual(["db"]);
    const seq = await deliver("next", "db", 2, pw2);
    await onDisk("next", "db", pw2);
    expect(bindingGeneration(root, "next", "api", "db")).toBe(2);
    expect(read("next/api.env")).toContain(`DB_PASSWORD='${pw2}'\n`);
    await waitAcked(seq);
    // The agent writes its receipt before it acknowledges; the grant learns of it when the fold has read it.
    expect((await readJson(store.kv.receipts, keys.receipt(NODE, "next", "db", "api"), DeliveryReceipt))?.value).toMatchObject({ generation: 2 });
    const g = await waitFor("the holder at generation 2 in the grant", async () => {
      const g = await grant("next", "db");
      return g?.holders["node-a/api"]?.generation === 2 ? g : undefined;
    });
    expect(getCondition(g.conditions, "Delivered")?.status).toBe("True");
    await waitFor("generation 1's directory to be removed", () => !existsSync(join(root, "next/.api.generations", first[0]!)));
  });

  it("does not move a holder back when an older generation's delivery comes again", async () => {
    const pw2 = secret("pw2");
    await deliver("back", "db", 1, secret("pw1"));
    await waitAcked(await deliver("back", "db", 2, pw2));
    await waitFor("the holder at generation 2 in the grant", async () => (await grant("back", "db"))?.holders["node-a/api"]?.generation === 2);
    const seq = await publishDelivery({ module: "back", requirement: "db", part: "api", kind: "postgres.database", generation: 1 });
    await waitAcked(seq);
    expect(read("back/api/db/password")).toBe(pw2);
    // The receipt, written before the acknowledgement, still names generation 2, so the grant never hears of 1 again.
    expect((await readJson(store.kv.receipts, keys.receipt(NODE, "back", "db", "api"), DeliveryReceipt))?.value).toMatchObject({ generation: 2 });
    expect((await grant("back", "db"))?.holders["node-a/api"]?.generation).toBe(2);
  });

  it("does not write a grant's own generation over the next, which a rotation wrote before that delivery came (again)", async () => {
    const token = [secret("token-1"), secret("token-2")];
    await putGrant("shop", "token", "secret", [{ part: "api", node: NODE }], 1);
    for (const g of [1, 2]) await responder.put("shop", "token", g, { type: "secret", provider: "builtin-secret", value: token[g - 1]! });
    // A rotation's broadcast wrote generation 2 (with the agent's own writer, as its rotation path does) while the grant
    // is still on 1: it moves at the commit, which retires generation 1.
    writeBinding(
      { root, module: "shop", part: "api", requirement: "token", generation: 2, values: { type: "secret", provider: "builtin-secret", value: token[1]! } },
      { graceMs: GRACE_MS },
    );
    const seq = await publishDelivery({ module: "shop", requirement: "token", part: "api", kind: "secret", generation: 1 });
    await waitAcked(seq);
    expect(bindingGeneration(root, "shop", "api", "token")).toBe(2);
    expect(read("shop/api/token/value")).toBe(token[1]);
    expect(logs.lines.some((l) => l.includes("delivery skipped") && l.includes("shop/token"))).toBe(true);
  });

  it("acknowledges and ignores, with a log line, a delivery to a part that is not a target", async () => {
    await putGrant("stray", "db", "postgres.database", [{ part: "api", node: NODE }], 1);
    const seq = await publishDelivery({ module: "stray", requirement: "db", part: "worker", kind: "postgres.database", generation: 1 });
    await waitAcked(seq);
    expect(existsSync(join(root, "stray/worker"))).toBe(false);
    const line = logs.lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === "delivery ignored" && l.grant === "stray/db");
    expect(line).toMatchObject({ part: "worker", generation: 1 });
    expect(String(line?.reason)).toContain("no longer a target");
  });

  it("retries while no provisioner answers, and delivers once one does", async () => {
    const [pw1, sessionKey] = [secret("pw1"), secret("session")];
    await deliver("late", "db", 1, pw1);
    await onDisk("late", "db", pw1);
    await responder.stop();
    try {
      await deliver("late", "session-key", 1, "", { type: "secret", provider: "builtin-secret", value: sessionKey });
      await waitFor("a failed attempt in the log", () =>
        logs.lines.some((l) => l.includes("delivery failed; it is retried") && l.includes("late/session-key")),
      );
      expect(existsSync(join(root, "late/api/session-key"))).toBe(false);
    } finally {
      responder.start();
    }
    await waitFor(
      "the session key file",
      () => existsSync(join(root, "late/api/session-key/value")) && read("late/api/session-key/value") === sessionKey,
      30_000,
    );
    const env = read("late/api.env");
    expect(env).toContain(`SESSION_KEY_VALUE='${sessionKey}'\n`);
    expect(env).toContain(`DB_PASSWORD='${pw1}'\n`);
  });

  it("records a delivery that cannot succeed as Delivered=False/DeliveryFailed, and does not retry it", async () => {
    await putGrant("shop", "broken", "secret", [{ part: "api", node: NODE }], 1);
    // A key that would leave the binding directory: the writer refuses it.
    await responder.put("shop", "broken", 1, { "../escape": secret("broken") });
    const seq = await publishDelivery({ module: "shop", requirement: "broken", part: "api", kind: "secret", generation: 1 });
    const g = await waitFor("the failure on the grant", async () => {
      const g = await grant("shop", "broken");
      return getCondition(g?.conditions ?? [], "Delivered")?.reason === "DeliveryFailed" ? g : undefined;
    });
    expect(getCondition(g.conditions, "Delivered")?.message).toContain(`node ${NODE}`);
    expect(g.holders).toEqual({});
    await waitAcked(seq);
    expect(existsSync(join(root, "shop/api/broken"))).toBe(false);
    expect(existsSync(join(root, "escape"))).toBe(false);
    expect(existsSync(join(root, "shop/api/escape"))).toBe(false);
  });

  it("gets a delivery published while it was stopped once it is back (durable)", async () => {
    const [pw1, pw2] = [secret("pw1"), secret("pw2")];
    await deliver("durable", "db", 1, pw1);
    await onDisk("durable", "db", pw1);
    await agent!.stop();
    await agent!.closed;
    agent = undefined;
    const seq = await deliver("durable", "db", 2, pw2);
    // The agent is stopped (closed above): nothing but it writes there.
    expect(read("durable/api/db/password")).toBe(pw1);
    agent = await start();
    await onDisk("durable", "db", pw2);
    await waitAcked(seq);
    // The provisioner's fold of the agent's receipt comes after, through its own consumer.
    await waitFor("the receipt folded: node-a/api holds generation 2", async () => (await grant("durable", "db"))?.holders["node-a/api"]?.generation === 2);
  });

  it("never logs a secret value", async () => {
    const password = secret("logged");
    await deliver("quiet", "db", 1, password);
    await onDisk("quiet", "db", password);
    await waitFor("the agent's log line of the binding written", () => logs.lines.some((l) => l.includes('"binding written"') && l.includes("quiet/db")));
    for (const s of secrets) expect(logs.text).not.toContain(s);
  });
});
