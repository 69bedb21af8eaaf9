import { describe, expect, it } from "vitest";
import { createSealingKey, sealTo } from "./crypto.js";
import { fetchCredential } from "./credential-fetch.js";
import { errorFromReply } from "./request-json.js";
import { retryDelayMs } from "./stream-consumers.js";
import { isMeshError } from "./errors.js";
import { subjects } from "./subjects.js";
import { natsForFile } from "../../../test/harness/nats-per-file.js";

const { nc: conn } = natsForFile();

const target = { grant: "shop/db", part: "api", node: "node-a", generation: 2 };

/** Answers one fetch with whatever `reply` makes of the request. */
function answerOnce(reply: (req: { recipient: string; generation: number }) => unknown): void {
  const sub = conn().subscribe(subjects.credentialFetch("shop", "db", "node-a", "api"), { max: 1 });
  void (async () => {
    for await (const m of sub) m.respond(JSON.stringify(reply(m.json())));
  })();
}

describe("fetchCredential", () => {
  it("opens values sealed to the caller, and says which key sealed them", async () => {
    const sender = createSealingKey();
    answerOnce((req) => ({ ok: true, generation: req.generation, sender: sender.getPublicKey(), sealed: sealTo(sender, req.recipient, { password: "pw" }) }));
    expect(await fetchCredential(conn(), target, createSealingKey())).toEqual({ generation: 2, values: { password: "pw" }, sender: sender.getPublicKey() });
  });

  it("refuses values sealed to someone else, without quoting them", async () => {
    const sender = createSealingKey();
    const other = createSealingKey();
    answerOnce((req) => ({
      ok: true,
      generation: req.generation,
      sender: sender.getPublicKey(),
      sealed: sealTo(sender, other.getPublicKey(), { password: "pw-xyz" }),
    }));
    const err = await fetchCredential(conn(), target, createSealingKey()).catch((e: unknown) => e);
    expect(isMeshError(err, "Decrypt")).toBe(true);
    expect((err as Error).message).not.toContain("pw-xyz");
  });

  it("refuses another generation than the one asked for, and values that are not strings", async () => {
    const sender = createSealingKey();
    answerOnce((req) => ({ ok: true, generation: 3, sender: sender.getPublicKey(), sealed: sealTo(sender, req.recipient, { a: "b" }) }));
    expect(isMeshError(await fetchCredential(conn(), target, createSealingKey()).catch((e: unknown) => e), "Internal")).toBe(true);
    answerOnce((req) => ({ ok: true, generation: 2, sender: sender.getPublicKey(), sealed: sealTo(sender, req.recipient, { port: 5432 }) }));
    const err = await fetchCredential(conn(), target, createSealingKey()).catch((e: unknown) => e);
    expect(isMeshError(err, "Internal")).toBe(true);
    expect((err as Error).message).not.toContain("5432");
  });

  it("passes the provisioner's error on with its code and retryability", async () => {
    answerOnce(() => ({ ok: false, error: { code: "NotFound", message: "not a holder", retryable: false } }));
    const err = await fetchCredential(conn(), target, createSealingKey()).catch((e: unknown) => e);
    expect(isMeshError(err, "NotFound")).toBe(true);
    expect((err as { retryable: boolean }).retryable).toBe(false);
    expect((err as Error).message).toContain("not a holder");
  });

  it("says Unavailable, retryable, when no provisioner answers", async () => {
    const err = await fetchCredential(conn(), target, createSealingKey(), { timeoutMs: 500 }).catch((e: unknown) => e);
    expect(isMeshError(err, "Unavailable")).toBe(true);
    expect((err as { retryable: boolean }).retryable).toBe(true);
    expect((err as Error).message).toContain("mesh-provisioner");
  });
});

describe("errorFromReply", () => {
  it.each([
    [{ ok: false, error: { code: "Conflict", message: "m", retryable: true } }, "Conflict"],
    [{ ok: false, error: { code: "SomethingNew", message: "m", retryable: false } }, "Internal"],
    [{ ok: true }, undefined],
    [{ ok: false, problems: [] }, undefined],
    [null, undefined],
  ])("%j → %s", (reply, code) => {
    expect(errorFromReply(reply)?.code).toBe(code);
  });
});

describe("retryDelayMs", () => {
  it("doubles from 0.5 s and stops at 30 s", () => {
    expect([1, 2, 3, 4, 7, 8, 100].map((n) => retryDelayMs(n, () => 0))).toEqual([500, 1_000, 2_000, 4_000, 30_000, 30_000, 30_000]);
    // With jitter: between half and all of it, so messages that failed together do not all come back together.
    for (const n of [1, 4, 100]) {
      const full = retryDelayMs(n, () => 0);
      const d = retryDelayMs(n);
      expect(d).toBeGreaterThanOrEqual(full / 2);
      expect(d).toBeLessThanOrEqual(full);
    }
  });
});
