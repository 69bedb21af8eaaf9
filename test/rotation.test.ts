/**
 * Rotation with fan-out, end to end on a real nats-server and a scram PostgreSQL: holders on
 * two nodes keep querying through a rotation; an offline holder stalls it and finishes it when
 * back; a forged confirmation is refused; the rotation is one trace; a rotator process killed
 * in each state is finished by a fresh one, which finds the acks that landed while none ran.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import { SpanKind } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import {
  agentHolderStream,
  getCondition,
  holderAckedOn,
  keys,
  Kinds,
  parseAllowedHooks,
  readHolderAcks,
  Rotation,
  RotationStates,
  subjects,
  type AllowedHooks,
  type ModuleDoc,
  type RotationState,
} from "@mesh/shared";
import { readJson, registerTracing, restoreStream, snapshotStream } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { createAdapter, CredentialStore } from "@mesh/providers";
import { startAgent, bindingGeneration, bindingPath, type Agent } from "@mesh/agent";
import { startRotator, type Rotator } from "@mesh/rotator";
import { startPostgres, type Postgres } from "./harness/postgres.js";
import { startMeshRotator, startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";
import { markerHook, type MarkerHook } from "./harness/marker-hook.js";
import { expectAcksInConsumers } from "./harness/holder-acks.js";
import { adminEnv, harnessProvider } from "./fixtures.js";

const exporter = new InMemorySpanExporter();
registerTracing(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }), new W3CTraceContextPropagator());

/** The hook the parts of the first test name, which the agents allow (written in beforeAll). */
const AWAIT_SWITCH = "await-switch";

/** The nodes of {@link moduleDoc}'s parts, and the holders a rotation of its grant waits for. */
const NODES = ["node-a", "node-b"];
const HOLDERS = ["node-a/api", "node-b/worker"];

function moduleDoc(name: string, onRotate?: string): ModuleDoc {
  return {
    kind: "Module",
    name,
    parts: [
      { name: "api", node: "node-a", installed: true, ...(onRotate ? { onRotate } : {}) },
      { name: "worker", node: "node-b", installed: true, ...(onRotate ? { onRotate } : {}) },
    ],
    requires: [{ name: "db", kind: Kinds.PostgresDatabase, parts: ["api", "worker"] }],
  };
}

/** The agent of `node`, writing under the mesh's bindings root and logging into its lines, as the test mesh starts one; with `hooks` allowed. */
function startNodeAgent(mesh: TestMesh, node: string, hooks?: AllowedHooks): Promise<Agent> {
  return startAgent({
    store: mesh.store,
    node,
    bindingsRoot: join(mesh.bindingsRoot, node),
    ...(hooks ? { hooks } : {}),
    log: createLogger("agent", { destination: mesh.logs, level: "debug" }),
  });
}

/**
 * What must hold of committed rotation `r` whatever the timing of its holders' acks: it waited
 * for `holders` and nobody else; each confirmed exactly once, before the commit, with one
 * confirmation record (`c`, on the stream and consumer JetStream names for it, at a sequence its
 * consumer's ack floor has reached), either heard from the ack's metric or found in that ack floor
 * (`f`); the count agrees; every state was entered once, whichever rotator entered it.
 */
async function expectEachHolderConfirmedOnce(mesh: TestMesh, r: Rotation, holders: readonly string[]): Promise<void> {
  expect(r.history.map((h) => h.state)).toEqual([RotationStates.Staged, RotationStates.Broadcast, RotationStates.AwaitingHolders, RotationStates.Committed]);
  expect(Object.keys(r.holders).sort()).toEqual([...holders].sort());
  expect(r.confirmed).toBe(holders.length);
  const committedMs = Date.parse(r.committedAt!) - Date.parse(r.requestedAt);
  for (const [holder, p] of Object.entries(r.holders)) {
    expect(p.e, `${holder} was not evicted`).toBeUndefined();
    expect(p.c, `${holder} confirmed before the commit`).toBeGreaterThanOrEqual(0);
    expect(p.c, `${holder} confirmed before the commit`).toBeLessThanOrEqual(committedMs);
  }
  await expectAcksInConsumers(mesh, r);
}

/** Binding values of one part as the agent wrote them. */
function readBinding(root: string, module: string, part: string): Record<string, string> {
  const dir = bindingPath(root, module, part, "db");
  return Object.fromEntries(["host", "port", "database", "username", "password"].map((k) => [k, readFileSync(join(dir, k), "utf8")]));
}

/** Logs in with a generation's values straight from the credential store. */
async function loginWith(mesh: TestMesh, module: string, generation: number) {
  const cred = await new CredentialStore(mesh.store.kv.credentials, mesh.masterKey).read(module, "db", generation);
  const adapter = createAdapter(Kinds.PostgresDatabase, { name: "pg-main", node: "node-a", endpoint: "postgres://127.0.0.1:1" });
  try {
    return await adapter.login({ bindings: cred!.bindings! });
  } finally {
    await adapter.close();
  }
}

/**
 * A part as a real application runs it: one open connection, a query every 50 ms, and a switch
 * to new credentials when the binding on disk changes (then it leaves a marker the part's
 * onRotate hook waits for, so the agent confirms only once the part switched).
 */
function startPart(root: string, module: string, part: string, hook: MarkerHook) {
  const errors: string[] = [];
  let queries = 0;
  let generation: number | undefined;
  let client: pg.Client | undefined;
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const onDisk = bindingGeneration(root, module, part, "db");
      if (onDisk !== undefined && onDisk !== generation) {
        const b = readBinding(root, module, part);
        const next = new pg.Client({ host: b.host, port: Number(b.port), database: b.database, user: b.username, password: b.password });
        next.on("error", (e) => errors.push(`connection: ${e.message}`));
        try {
          await next.connect();
          const old = client;
          client = next;
          generation = onDisk;
          await old?.end().catch(() => undefined);
          hook.mark(module, part, onDisk);
        } catch (e) {
          errors.push(`connect g${onDisk}: ${(e as Error).message}`);
        }
      }
      if (client) {
        try {
          await client.query("select 1");
          queries++;
        } catch (e) {
          errors.push(`query g${generation}: ${(e as Error).message}`);
        }
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  return {
    errors,
    get queries() {
      return queries;
    },
    get generation() {
      return generation;
    },
    async stop() {
      stopped = true;
      await loop;
      await client?.end().catch(() => undefined);
    },
  };
}

async function rotation(mesh: TestMesh, module: string): Promise<Rotation | undefined> {
  return (await readJson(mesh.store.kv.rotations, keys.grant(module, "db"), Rotation))?.value;
}

function requestRotate(mesh: TestMesh, grant: string, timeoutMs?: number) {
  return mesh.nc
    .request(subjects.rotate, JSON.stringify({ grant, ...(timeoutMs ? { timeoutMs } : {}) }), { timeout: 15_000 })
    .then((m) => m.json<{ ok: boolean; rotation?: Rotation; error?: { code: string; message: string } }>());
}

describe("rotation of a postgres.database grant held on two nodes", () => {
  let db: Postgres;
  let mesh: TestMesh;
  let rotator: Rotator;
  let roots: Record<string, string>;
  let hook: MarkerHook;
  let hooks: Map<string, string[]>;
  const agents: Record<string, Agent> = {};

  beforeAll(async () => {
    db = await startPostgres();
    mesh = await startTestMesh({ nodes: [], env: adminEnv(db) });
    hook = markerHook();
    hooks = parseAllowedHooks([hook.allow(AWAIT_SWITCH)]);
    roots = { "node-a": join(mesh.bindingsRoot, "node-a"), "node-b": join(mesh.bindingsRoot, "node-b") };
    for (const node of NODES) agents[node] = await startNodeAgent(mesh, node, hooks);
    rotator = await startMeshRotator(mesh, adminEnv(db));
  });
  afterAll(async () => {
    await rotator?.stop();
    await Promise.all(Object.values(agents).map((a) => a.stop()));
    await mesh?.stop();
    await db?.stop();
    hook?.remove();
  });

  it("keeps every holder's queries working, ends both on k+1, retires k only at commit, as one trace", async () => {
    expect((await mesh.apply([harnessProvider(db), moduleDoc("shop", AWAIT_SWITCH)])).ok).toBe(true);
    await mesh.waitForState("shop", "Ready");
    await waitFor("both holders on generation 1", async () => {
      const g = await mesh.grant("shop", "db");
      return g?.holders["node-a/api"]?.generation === 1 && g.holders["node-b/worker"]?.generation === 1;
    });
    const parts = [startPart(roots["node-a"]!, "shop", "api", hook), startPart(roots["node-b"]!, "shop", "worker", hook)];
    await waitFor("parts connected on generation 1", () => parts.every((p) => p.generation === 1));
    exporter.reset();

    const reply = await requestRotate(mesh, "shop/db");
    expect(reply.ok).toBe(true);
    expect(reply.rotation).toMatchObject({ id: "shop/db#2", from: 1, to: 2 });
    expect(Object.keys(reply.rotation!.holders).sort()).toEqual(["node-a/api", "node-b/worker"]);
    // A second request while it runs is refused, naming the running rotation.
    const second = await requestRotate(mesh, "shop/db");
    expect(second.ok).toBe(false);
    expect(second.error?.message).toContain("shop/db#2");
    // While holders switch, the old generation still logs in.
    expect(await loginWith(mesh, "shop", 1)).toEqual({ ok: true });

    const done = await waitFor(
      "rotation committed",
      async () => ((await rotation(mesh, "shop"))?.state === RotationStates.Committed ? rotation(mesh, "shop") : undefined),
      30_000,
    );
    const before = parts.map((p) => p.queries);
    await waitFor("queries after the commit, on k+1", () => parts.every((p, i) => p.queries > before[i]!), 10_000);
    await Promise.all(parts.map((p) => p.stop()));

    expect(parts.map((p) => p.errors)).toEqual([[], []]);
    // Each agent ran the parts' hook, which waited for its part to switch, before confirming.
    expect(mesh.logs.lines.filter((l) => l.includes("the part's onRotate hook ran") && l.includes('"grant":"shop/db"')).length).toBe(2);
    parts.forEach((p, i) => expect(p.queries).toBeGreaterThan(before[i]!));
    expect(parts.map((p) => p.generation)).toEqual([2, 2]);
    const g = await mesh.grant("shop", "db");
    expect(g?.generation).toBe(2);
    expect(g?.holders["node-a/api"]?.generation).toBe(2);
    expect(g?.holders["node-b/worker"]?.generation).toBe(2);
    expect(getCondition(g!.conditions, "Rotating")).toBeUndefined();
    // Every holder confirmed by acknowledging the broadcast on its own consumer, and JetStream's own consumer state says so.
    expect(Object.values(done!.holders).every((h) => h.c !== undefined && h.q !== undefined)).toBe(true);
    // The grant said Rotating beside the broadcast, so the record entered Broadcast and AwaitingHolders in one write.
    const entered = (s: RotationState) => done!.history.find((h) => h.state === s)?.at;
    expect(entered(RotationStates.AwaitingHolders)).toBe(entered(RotationStates.Broadcast));
    await expectAcksInConsumers(mesh, done!);
    expect(await loginWith(mesh, "shop", 2)).toEqual({ ok: true });
    expect(await loginWith(mesh, "shop", 1)).toMatchObject({ ok: false, reason: "rejected" });

    // One trace: the rotator's span; per holder, its PRODUCER span and the agent's CONSUMER span, the producer's child.
    const spans = await waitFor("the rotation's span", () => {
      const s = exporter.getFinishedSpans();
      return s.find((x) => x.name === "rotate" && x.attributes["mesh.rotation"] === "shop/db#2") ? s : undefined;
    });
    const root = spans.find((x) => x.name === "rotate")!;
    const children = spans.filter((x) => x.parentSpanContext?.spanId === root.spanContext().spanId && x.kind === SpanKind.PRODUCER);
    expect(children.every((c) => c.spanContext().traceId === root.spanContext().traceId)).toBe(true);
    expect(children.map((c) => `${c.attributes["mesh.node"]}/${c.attributes["mesh.part"]}`).sort()).toEqual(["node-a/api", "node-b/worker"]);
    const consumers = spans.filter((x) => x.kind === SpanKind.CONSUMER && children.some((c) => c.spanContext().spanId === x.parentSpanContext?.spanId));
    expect(consumers.map((c) => c.attributes["mesh.holder"]).sort()).toEqual(["node-a/api", "node-b/worker"]);
  });

  /** Module `name` applied and Ready, both its holders on generation 1, then node-b's agent stopped. */
  async function readyWithNodeBStopped(name: string) {
    expect((await mesh.apply([harnessProvider(db), moduleDoc(name)])).ok).toBe(true);
    await mesh.waitForState(name, "Ready");
    await waitFor("both holders on generation 1", async () => {
      const g = await mesh.grant(name, "db");
      return g?.holders["node-a/api"]?.generation === 1 && g.holders["node-b/worker"]?.generation === 1;
    });
    await agents["node-b"]!.stop();
  }

  /** A rotation of `name`'s grant requested, once node-a/api has confirmed it and node-b/worker (stopped) has not. */
  async function rotateAwaitingNodeB(name: string): Promise<Rotation> {
    expect((await requestRotate(mesh, `${name}/db`)).ok).toBe(true);
    return waitFor(
      "node-a/api confirmed, node-b/worker not",
      async () => {
        const r = await rotation(mesh, name);
        return r?.state === RotationStates.AwaitingHolders && r.confirmed === 1 ? r : undefined;
      },
      20_000,
    );
  }

  it("stalls naming an offline holder, keeps k, refuses a forged confirmation, and commits when the holder is back", async () => {
    await readyWithNodeBStopped("shop2");

    const reply = await requestRotate(mesh, "shop2/db", 1_500);
    expect(reply.ok).toBe(true);
    const stalled = await waitFor(
      "rotation stalled",
      async () => ((await rotation(mesh, "shop2"))?.state === RotationStates.Stalled ? rotation(mesh, "shop2") : undefined),
      20_000,
    );
    expect(
      Object.entries(stalled!.holders)
        .filter(([, p]) => p.c === undefined)
        .map(([h]) => h),
    ).toEqual(["node-b/worker"]);
    const cond = getCondition((await mesh.grant("shop2", "db"))!.conditions, "Rotating");
    expect(cond).toMatchObject({ status: "True", reason: "HolderTimedOut" });
    expect(cond?.message).toContain("node-b/worker");
    expect((await mesh.grant("shop2", "db"))?.generation).toBe(1);
    expect(await loginWith(mesh, "shop2", 1)).toEqual({ ok: true });

    // An ack on another holder's consumer is refused by the server itself: test/security/agent-identity.test.ts and part-identity.test.ts.
    expect((await rotation(mesh, "shop2"))?.state).toBe(RotationStates.Stalled);
    expect(await loginWith(mesh, "shop2", 1)).toEqual({ ok: true });

    agents["node-b"] = await startNodeAgent(mesh, "node-b", hooks);
    await waitFor("rotation committed by itself", async () => (await rotation(mesh, "shop2"))?.state === RotationStates.Committed, 20_000);
    const g = await mesh.grant("shop2", "db");
    expect(g?.generation).toBe(2);
    expect(g?.holders["node-b/worker"]?.generation).toBe(2);
    expect(getCondition(g!.conditions, "Rotating")).toBeUndefined();
    expect(readBinding(roots["node-b"]!, "shop2", "worker").username).toMatch(/_b$/);
    expect(await loginWith(mesh, "shop2", 2)).toEqual({ ok: true });
    expect(await loginWith(mesh, "shop2", 1)).toMatchObject({ ok: false, reason: "rejected" });
  });

  it("publishes the broadcast again into a holder stream that lost it, and commits once that holder confirms it", async () => {
    await readyWithNodeBStopped("shop4");
    const waiting = await rotateAwaitingNodeB("shop4");
    // Gone from node-b's stream before its agent took it, as from a stream restored from a backup taken before the broadcast.
    const lost = waiting.broadcasts.find((b) => b.stream === agentHolderStream("node-b"))!;
    expect(await mesh.store.jsm.streams.deleteMessage(lost.stream, lost.seq)).toBe(true);
    const again = await waitFor(
      "the broadcast published again into node-b's stream",
      async () => {
        const r = await rotation(mesh, "shop4");
        return r?.republished ? r : undefined;
      },
      20_000,
    );
    const republished = again.broadcasts.find((b) => b.stream === lost.stream)!;
    expect(republished.seq).toBeGreaterThan(lost.seq);
    // node-a's broadcast is left alone.
    expect(again.broadcasts.find((b) => b.stream === agentHolderStream("node-a"))).toEqual(
      waiting.broadcasts.find((b) => b.stream === agentHolderStream("node-a")),
    );
    expect(mesh.logs.text).toContain(`rotation ${again.id}: 1 holder streams did not hold its broadcast`);
    expect(again.state).toBe(RotationStates.AwaitingHolders);

    agents["node-b"] = await startNodeAgent(mesh, "node-b", hooks);
    await waitFor("rotation committed", async () => (await rotation(mesh, "shop4"))?.state === RotationStates.Committed, 20_000);
    const done = (await rotation(mesh, "shop4"))!;
    expect(done.holders["node-b/worker"]).toMatchObject({ q: republished.seq });
    expect(holderAckedOn(done.grant, "node-b/worker", done.holders["node-b/worker"]!)?.stream).toBe(lost.stream);
    expect(done.confirmed).toBe(2);
    expect((await mesh.grant("shop4", "db"))?.holders["node-b/worker"]?.generation).toBe(2);
  });

  it("publishes the broadcast again when the holder stream is restored from before it and its sequence holds another subject's message", async () => {
    await readyWithNodeBStopped("shop5");
    const stream = agentHolderStream("node-b");
    const before = await snapshotStream(mesh.nc, stream);
    const waiting = await rotateAwaitingNodeB("shop5");
    const lost = waiting.broadcasts.find((b) => b.stream === stream)!;
    expect(before.state.last_seq).toBeLessThan(lost.seq);
    // The stream as the snapshot had it, then messages of a subject no holder takes up to and past the broadcast's sequence.
    await mesh.store.jsm.streams.delete(stream);
    await restoreStream(mesh.nc, before);
    // One subject each: a holder stream keeps one message per subject.
    const other = (seq: number) => `mesh.rotation.node.node-b.nobody.none.p${seq}`;
    for (let last = before.state.last_seq; last <= lost.seq;) last = (await mesh.store.js.publish(other(last + 1), "not a rotation")).seq;
    expect((await mesh.store.jsm.streams.getMessage(stream, { seq: lost.seq }))?.subject).toBe(other(lost.seq));
    // The agent back at once: its consumer passes over those messages, so only its ack floor says it has not confirmed.
    agents["node-b"] = await startNodeAgent(mesh, "node-b", hooks);
    await waitFor("rotation committed", async () => (await rotation(mesh, "shop5"))?.state === RotationStates.Committed, 30_000);
    const done = (await rotation(mesh, "shop5"))!;
    const republished = done.broadcasts.find((b) => b.stream === stream)!;
    expect(done.republished).toBeGreaterThanOrEqual(1);
    expect(republished.seq).toBeGreaterThan(lost.seq);
    expect(done.holders["node-b/worker"]).toMatchObject({ q: republished.seq });
    expect(holderAckedOn(done.grant, "node-b/worker", done.holders["node-b/worker"]!)?.stream).toBe(stream);
    expect((await mesh.grant("shop5", "db"))?.holders["node-b/worker"]?.generation).toBe(2);
  });
});

describe("a rotator process killed in each state", () => {
  let db: Postgres;
  let mesh: TestMesh;
  const main = join(import.meta.dirname, "..", "services", "rotator", "dist", "main.js");
  const children: ChildProcess[] = [];
  // Started here rather than by the test mesh, so a test can hold their acks by stopping them.
  const agents: Record<string, Agent> = {};

  beforeAll(async () => {
    if (!existsSync(main)) throw new Error(`${main} is not built; run npx tsc -b first`);
    db = await startPostgres();
    mesh = await startTestMesh({ nodes: [], env: adminEnv(db) });
    for (const node of NODES) agents[node] = await startNodeAgent(mesh, node);
    expect((await mesh.apply([harnessProvider(db), moduleDoc("shop")])).ok).toBe(true);
    await mesh.waitForState("shop", "Ready");
  });
  afterAll(async () => {
    for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
    await Promise.all(Object.values(agents).map((a) => a.stop()));
    await mesh?.stop();
    await db?.stop();
  });

  /** The grant's generation, once every holder is on it (the rotation before delivered). */
  const settledGeneration = () =>
    waitFor("every holder on the grant's generation", async () => {
      const g = await mesh.grant("shop", "db");
      return g && HOLDERS.every((h) => g.holders[h]?.generation === g.generation) ? g.generation : undefined;
    });

  /** A rotator process starts a rotation of shop/db and is SIGKILLed right after it persisted `state`; the record as it left it. */
  const rotateAndKillIn = async (state: RotationState): Promise<Rotation> => {
    const child = spawn(process.execPath, [main], {
      env: {
        ...adminEnv(db),
        NATS_URL: mesh.nats.url,
        MESH_MASTER_KEY: mesh.masterKey.key.toString("hex"),
        MESH_ROTATOR_TEST_PAUSE_AFTER: state,
        MESH_LOG_LEVEL: "warn",
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    children.push(child);
    let out = "";
    child.stdout!.on("data", (b: Buffer) => (out += b.toString()));
    child.stderr!.on("data", (b: Buffer) => (out += b.toString()));
    await waitFor(
      "the rotator process to answer",
      async () => {
        const r = await requestRotate(mesh, "shop/db").catch(() => undefined);
        return r?.ok ? r : undefined;
      },
      20_000,
      200,
    );
    await waitFor(`the rotator paused after ${state}`, () => out.includes(`TEST-HOOK paused-after ${state}`), 20_000);
    const left = (await rotation(mesh, "shop"))!;
    expect(left.state).toBe(state);
    child.kill("SIGKILL");
    await new Promise((r) => child.once("exit", r));
    return left;
  };

  /** A fresh rotator in this process takes the rotation over and commits it; the committed record. */
  const finishWithFreshRotator = async (): Promise<Rotation> => {
    const fresh = await startRotator({
      store: mesh.store,
      masterKey: mesh.masterKey,
      log: createLogger("rotator", { destination: mesh.logs, level: "debug" }),
      env: adminEnv(db),
      sweepMs: 500,
    });
    try {
      return await waitFor(
        "the fresh rotator to commit",
        async () => {
          const r = await rotation(mesh, "shop");
          return r?.state === RotationStates.Committed ? r : undefined;
        },
        30_000,
      );
    } finally {
      await fresh.stop();
    }
  };

  for (const state of [RotationStates.Staged, RotationStates.Broadcast, RotationStates.AwaitingHolders] as const) {
    it(`SIGKILLed in ${state}: a fresh rotator finishes, no generation lost, nothing retired early`, async () => {
      const from = await settledGeneration();
      await rotateAndKillIn(state);

      // Nothing retired early, nothing lost: both generations log in, the grant is still on `from`.
      expect(await loginWith(mesh, "shop", from)).toEqual({ ok: true });
      expect(await loginWith(mesh, "shop", from + 1)).toEqual({ ok: true });
      expect((await mesh.grant("shop", "db"))?.generation).toBe(from);

      const done = await finishWithFreshRotator();
      expect((await mesh.grant("shop", "db"))?.generation).toBe(from + 1);
      expect(await loginWith(mesh, "shop", from + 1)).toEqual({ ok: true });
      expect(await loginWith(mesh, "shop", from)).toMatchObject({ ok: false, reason: "rejected" });
      // Each holder's ack landed before the fresh rotator started (found in its consumer's ack
      // floor) or after (heard from its metric), as the timing fell: either way it counts once.
      await expectEachHolderConfirmedOnce(mesh, done, HOLDERS);
    });
  }

  it("acks that land while no rotator runs: the fresh rotator finds each in its holder's consumer, and marks it found", async () => {
    const from = await settledGeneration();
    // The holders take the broadcast only once the rotator that sent it is gone.
    await Promise.all(NODES.map((node) => agents[node]!.stop()));
    const left = await rotateAndKillIn(RotationStates.AwaitingHolders);
    expect((await readHolderAcks(mesh.store.jsm, left)).filter((x) => x.acked).map((x) => x.holder)).toEqual([]);
    for (const node of NODES) agents[node] = await startNodeAgent(mesh, node);
    await waitFor("every holder's ack in its consumer's ack floor", async () => (await readHolderAcks(mesh.store.jsm, left)).every((x) => x.acked), 30_000);

    const done = await finishWithFreshRotator();
    expect((await mesh.grant("shop", "db"))?.generation).toBe(from + 1);
    await expectEachHolderConfirmedOnce(mesh, done, HOLDERS);
    expect(
      Object.entries(done.holders)
        .filter(([, p]) => p.f !== true)
        .map(([h]) => h),
    ).toEqual([]);
  });
});
