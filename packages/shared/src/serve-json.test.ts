/**
 * serveJson's bound on requests in flight, at its default value on a real nats-server: 8,192
 * requests held by the handler are all answered once it lets them go; the 8,193rd is answered
 * at once with a retryable Unavailable, not left to time out. And whom it answers: only a reply
 * subject under an inbox root, never one that would make the service act for the sender.
 */
import { describe, expect, it } from "vitest";
import { serveJson } from "./serve-json.js";
import { createLogger } from "./logger.js";
import { Limits } from "./limits.js";
import { ErrorCodes } from "./errors.js";
import { jetstreamManager } from "@nats-io/jetstream";
import { AuditLog } from "./audit-log.js";
import { AuditRecord, AuditedRequests, operatorSubject, operatorSubjectsOf } from "./audit.js";
import { openStore } from "./store.js";
import { Streams } from "./subjects.js";
import { natsForFile } from "../../../test/harness/nats-per-file.js";
import { waitFor } from "../../../test/harness/wait.js";

const { nc: conn } = natsForFile();

describe("serveJson", () => {
  it("works on 8,192 requests at once and answers one more busy (retryable), then takes requests again", async () => {
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let started = 0;
    const api = serveJson(conn(), "test.bounded", "q", createLogger("test", { level: "silent" }), async (body) => {
      started++;
      await released;
      return { ok: true, echo: body };
    });
    await conn().flush();
    const ask = (i: number) =>
      conn()
        .request("test.bounded", JSON.stringify({ i }), { timeout: 30_000 })
        .then((m) => m.json<{ ok: boolean; error?: { code: string; retryable: boolean } }>());
    const held = Array.from({ length: Limits.requestsInFlight }, (_, i) => ask(i));
    await conn().flush();
    await waitFor(
      () => `all ${Limits.requestsInFlight} requests in the handler (${started} reached it)`,
      () => started === Limits.requestsInFlight,
      30_000,
    );

    const extra = await ask(-1);
    expect(extra).toMatchObject({ ok: false, error: { code: ErrorCodes.Unavailable, retryable: true } });
    expect(started).toBe(Limits.requestsInFlight);

    release();
    const answers = await Promise.all(held);
    expect(answers.every((a) => a.ok)).toBe(true);
    expect(await ask(-2)).toMatchObject({ ok: true, echo: { i: -2 } });
    await api.stop();
  }, 60_000);

  it("answers only replies under an inbox root: a request whose reply names a KV key, an ack or an API call runs nothing and is answered nowhere", async () => {
    let handled = 0;
    const api = serveJson(conn(), "test.guard", "q", createLogger("test", { level: "silent" }), async () => {
      handled++;
      return { ok: true };
    });
    const landed: string[] = [];
    const watch = conn().subscribe(">", {
      callback: (_, m) => {
        if (m.subject !== "test.guard" && !m.subject.startsWith("_INBOX.")) landed.push(m.subject);
      },
    });
    await conn().flush();
    // With the response permission, the service may publish once to whatever a request's reply
    // names: a KV write, an ack for another holder, a JetStream API call in its name.
    for (const reply of [
      "$KV.mesh-grants.shop.db",
      "$JS.ACK.MESH_HOLD_N_node-b.shop_key_worker.1.2.2.0.0",
      "$JS.API.STREAM.DELETE.KV_mesh-credentials",
      "mesh.rotation.node.node-b.shop.key.worker",
    ]) {
      conn().publish("test.guard", "{}", { reply });
    }
    // A request after them, on the same connection, is handled after them.
    expect((await conn().request("test.guard", "{}", { timeout: 5_000 })).json()).toEqual({ ok: true });
    expect(handled).toBe(1);
    await conn().flush();
    expect(landed).toEqual([]);
    watch.unsubscribe();
    await api.stop();
  });

  it("records a request in the audit trail before answering it, with who the subject names; refuses one the trail does not take, unserved", async () => {
    await openStore(conn(), { replicas: 1 });
    const jsm = await jetstreamManager(conn());
    const records = async () => {
      const info = await jsm.streams.info(Streams.audit);
      const out: AuditRecord[] = [];
      for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++)
        out.push(AuditRecord.parse((await jsm.streams.getMessage(Streams.audit, { seq }))!.json()));
      return out;
    };
    let handled = 0;
    const trail = new AuditLog(conn(), "rotator", { name: "rotator@test", node: "node-t" });
    const api = serveJson(
      conn(),
      ["test.rotate", operatorSubjectsOf("test.rotate")],
      "q",
      createLogger("test", { level: "silent" }),
      async (body, m) => {
        handled++;
        // The record of the request is in the trail before the handler runs.
        expect((await records()).filter((r) => r.phase === "request")).toHaveLength(handled);
        return { ok: true, who: m.requester };
      },
      { audit: { log: trail, request: AuditedRequests.rotate } },
    );
    await conn().flush();
    const ask = (subject: string, body: object) =>
      conn()
        .request(subject, JSON.stringify(body), { timeout: 10_000 })
        .then((m) => m.json<Record<string, unknown>>());
    expect(await ask(operatorSubject("test.rotate", "alice"), { grant: "shop/db", revoke: { graceMs: 0, reason: "leak", by: "claims to be bob" } })).toEqual({
      ok: true,
      who: { kind: "operator", name: "alice" },
    });
    expect(await ask("test.rotate", { grant: "shop/db" })).toMatchObject({ who: { kind: "admin" } });
    const [req, outcome, req2, outcome2] = await records();
    expect(req).toMatchObject({
      phase: "request",
      who: "operator:alice",
      action: "revoke",
      grant: "shop/db",
      target: { reason: "leak", graceMs: 0 },
      node: "node-t",
    });
    expect(outcome).toMatchObject({ id: req!.id, phase: "outcome", outcome: "ok" });
    expect(req2).toMatchObject({ who: "admin (break-glass)", action: "rotate" });
    expect(outcome2).toMatchObject({ id: req2!.id, outcome: "ok" });
    // What the body called its sender is nowhere in the trail.
    expect(JSON.stringify(await records())).not.toContain("bob");

    // A trail that takes nothing (here: its stream gone) refuses the change before it is worked on.
    await jsm.streams.delete(Streams.audit);
    const refused = await ask("test.rotate", { grant: "shop/db" });
    expect(refused).toMatchObject({ ok: false, error: { code: ErrorCodes.Unavailable, retryable: true } });
    expect(String((refused.error as { message: string }).message)).toContain("nothing is served unrecorded");
    expect(handled).toBe(2);
    // A read is worked out, but its answer is not sent: the refusal is.
    let read = 0;
    const fetches = serveJson(
      conn(),
      "test.fetch",
      "q",
      createLogger("test", { level: "silent" }),
      async () => {
        read++;
        return { ok: true, values: "secret" };
      },
      { audit: { log: trail, request: AuditedRequests.fetch } },
    );
    await conn().flush();
    const answer = await ask("test.fetch", { grant: "shop/db", generation: 2 });
    expect(answer).toMatchObject({ ok: false, error: { code: ErrorCodes.Unavailable } });
    expect(JSON.stringify(answer)).not.toContain("secret");
    expect(read).toBe(1);
    await Promise.all([api.stop(), fetches.stop()]);
  }, 30_000);
});
