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
});
