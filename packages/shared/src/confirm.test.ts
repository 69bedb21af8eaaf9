/**
 * ReplyLine and sendConfirmation against a real nats-server: replies find their requests, no
 * responder and a closed line are retryable `Unavailable`s; a confirmation is sent again until
 * a rotator answers, and a refusal ends it at once.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { ErrorCodes, ReplyLine, isMeshError, sendConfirmation, subjects, type Confirmation } from "./index.js";
import { startNatsServer, type NatsServer } from "../../../test/harness/nats-server.js";

let nats: NatsServer;
let nc: NatsConnection;
let server: NatsConnection;

beforeAll(async () => {
  nats = await startNatsServer();
  nc = await connect({ servers: nats.url });
  server = await connect({ servers: nats.url });
});

afterAll(async () => {
  await nc?.close();
  await server?.close();
  await nats?.stop();
});

const confirmation: Confirmation = { rotation: "cf/key#2", grant: "cf/key", holder: "n1/app/i1", generation: 2, confirmedAt: new Date().toISOString() };

describe("ReplyLine", () => {
  it("gives each request its own reply", async () => {
    const sub = server.subscribe("rl.echo", { callback: (_e, m) => void setTimeout(() => m.respond(JSON.stringify({ n: (m.json() as { n: number }).n * 2 })), Math.random() * 20) });
    await server.flush();
    const line = new ReplyLine(nc, "echo");
    const got = await Promise.all(Array.from({ length: 50 }, (_, n) => line.request("rl.echo", JSON.stringify({ n }))));
    expect(got).toEqual(Array.from({ length: 50 }, (_, n) => ({ n: n * 2 })));
    line.close();
    sub.unsubscribe();
  });

  it("rejects, retryable and naming the service, when nobody subscribes", async () => {
    const line = new ReplyLine(nc, "rotator", 30_000);
    const e = await line.request("rl.nobody", "{}").catch((x: unknown) => x);
    expect(isMeshError(e) && e.code === ErrorCodes.Unavailable && e.retryable).toBe(true);
    // The no-responders answer, not the 30 s timeout.
    expect((e as Error).message).toMatch(/no rotator answers on rl\.nobody.*start mesh-rotator/);
    line.close();
  });

  it("rejects, retryable, a request nobody answers in time, and keeps no timer after", async () => {
    const sub = server.subscribe("rl.late", { callback: () => undefined });
    await server.flush();
    const line = new ReplyLine(nc, "late", 200);
    const e = await line.request("rl.late", "{}").catch((x: unknown) => x);
    expect(isMeshError(e) && e.code === ErrorCodes.Unavailable && e.retryable).toBe(true);
    expect((e as Error).message).toContain("did not answer on rl.late within 200 ms");
    expect((line as unknown as { timer?: unknown }).timer).toBeUndefined();
    line.close();
    sub.unsubscribe();
  });

  it("rejects what still waits when closed", async () => {
    const sub = server.subscribe("rl.silent", { callback: () => undefined });
    await server.flush();
    const line = new ReplyLine(nc, "silent");
    const waiting = line.request("rl.silent", "{}").catch((x: unknown) => x);
    await nc.flush();
    line.close();
    const e = await waiting;
    expect(isMeshError(e) && e.code === ErrorCodes.Unavailable && e.retryable).toBe(true);
    sub.unsubscribe();
  });
});

describe("sendConfirmation", () => {
  it("sends again until a rotator answers, then resolves", async () => {
    const line = new ReplyLine(nc, "rotator");
    const sent = sendConfirmation(line, confirmation);
    // Nobody answers at first; the confirmation is not lost meanwhile.
    await new Promise((r) => setTimeout(r, 400));
    const heard: unknown[] = [];
    const sub = server.subscribe(subjects.rotationConfirm("cf", "key", "n1", "app"), {
      callback: (_e, m) => {
        heard.push(m.json());
        m.respond(JSON.stringify({ ok: true }));
      },
    });
    await server.flush();
    await sent;
    expect(heard).toEqual([confirmation]);
    line.close();
    sub.unsubscribe();
  });

  it("ends at once with the rotator's refusal, not retryable", async () => {
    let asked = 0;
    const refusal = { ok: false, error: { code: ErrorCodes.Conflict, message: "n1/app/i1 does not hold grant cf/key", retryable: false } };
    const sub = server.subscribe(subjects.rotationConfirm("cf", "key", "n1", "app"), {
      callback: (_e, m) => {
        asked++;
        m.respond(JSON.stringify(refusal));
      },
    });
    await server.flush();
    const line = new ReplyLine(nc, "rotator");
    const e = await sendConfirmation(line, confirmation).catch((x: unknown) => x);
    expect(isMeshError(e) && e.code === ErrorCodes.Conflict && !e.retryable).toBe(true);
    expect((e as Error).message).toContain("refused the confirmation of n1/app/i1 for rotation cf/key#2: n1/app/i1 does not hold grant cf/key");
    expect(asked).toBe(1);
    line.close();
    sub.unsubscribe();
  });

  it("refuses at once a confirmation whose grant or holder id has no subject", async () => {
    const line = new ReplyLine(nc, "rotator");
    const e = await sendConfirmation(line, { ...confirmation, holder: "n1" }).catch((x: unknown) => x);
    expect(isMeshError(e, ErrorCodes.InvalidRequest) && !e.retryable).toBe(true);
    expect((e as Error).message).toContain('holder "n1"');
    line.close();
  });

  it("gives up with the last error once its budget is spent", async () => {
    const line = new ReplyLine(nc, "rotator");
    const e = await sendConfirmation(line, { ...confirmation, grant: "cf/none" }, { budgetMs: 300 }).catch((x: unknown) => x);
    expect(isMeshError(e) && e.code === ErrorCodes.Unavailable && e.retryable).toBe(true);
    line.close();
  });
});
