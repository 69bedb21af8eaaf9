import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import type { ReachabilityRecord } from "@mesh/shared";
import { probeResultOf, reachabilityChanged, tryConnect } from "./prober.js";

const ctx = { provider: "pg-main", node: "node-b", generation: 2, intervalMs: 1_000, now: new Date("2026-01-01T00:00:00.000Z") };

describe("probeResultOf", () => {
  it.each([
    { login: { ok: true } as const, ok: true, reason: undefined },
    { login: { ok: false, reason: "unreachable", message: "connect ECONNREFUSED 127.0.0.1:5432" } as const, ok: false, reason: "ProviderUnreachable" },
    { login: { ok: false, reason: "rejected", message: "password authentication failed" } as const, ok: false, reason: "CredentialRejected" },
    { login: { ok: false, reason: "missing", message: "database shop_db does not exist" } as const, ok: false, reason: "ResourceMissing" },
  ])("$login.reason → $reason", ({ login, ok, reason }) => {
    const r = probeResultOf(login, ctx);
    expect(r).toMatchObject({ ok, generation: 2, intervalMs: 1_000, observedAt: "2026-01-01T00:00:00.000Z" });
    expect(r.reason).toBe(reason);
    expect(r.message).toContain("node node-b");
  });
});

describe("reachabilityChanged", () => {
  const rec: ReachabilityRecord = { node: "node-b", provider: "p", address: "127.0.0.1:1", reachable: false, message: "no", since: "t" };
  it("writes only what changed", () => {
    expect(reachabilityChanged(undefined, rec)).toBe(true);
    expect(reachabilityChanged(rec, { ...rec })).toBe(false);
    expect(reachabilityChanged(rec, { ...rec, reachable: true, message: "" })).toBe(true);
  });
});

describe("tryConnect", () => {
  it("tells a listening port from a closed one", async () => {
    const server = createServer((s) => s.destroy());
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    expect(await tryConnect("127.0.0.1", port)).toEqual({ ok: true });
    await new Promise<void>((r) => server.close(() => r()));
    const closed = await tryConnect("127.0.0.1", port);
    expect(closed).toEqual({ ok: false, message: `ECONNREFUSED connecting to 127.0.0.1:${port}` });
  });
});
