import { describe, expect, it } from "vitest";
import type { CheckResult, ProbeResult } from "@mesh/shared";
import { grantFixture } from "../../../test/fixtures.js";
import { advice, foldVerified, probeWorthStoring, verificationBasis } from "./fold.js";

const now = Date.parse("2026-01-01T00:01:00.000Z");
const at = (secondsAgo: number) => new Date(now - secondsAgo * 1000).toISOString();

const grant = grantFixture({
  resource: { role: "shop_db_b", provider: "pg-main" },
  holders: { "node-a/api": { generation: 2, deliveredAt: at(30) } },
});

const verifierOk: CheckResult = { ok: true, message: "generation 2 logs in at provider pg-main from the verifier", generation: 2, observedAt: at(1) };
const probe = (over: Partial<ProbeResult>): ProbeResult => ({
  ok: true,
  message: "generation 2 logs in at provider pg-main from node x",
  generation: 2,
  observedAt: at(1),
  intervalMs: 1_000,
  ...over,
});
const unreachableB = probe({
  ok: false,
  reason: "ProviderUnreachable",
  message: "provider pg-main cannot be reached from node node-b: connect ECONNREFUSED 127.0.0.1:5432",
});

describe("foldVerified", () => {
  it("is Verified when the verifier and every current probe pass, naming where from", () => {
    const c = foldVerified({ grant, verifier: verifierOk, probes: { "node-a/api": probe({}), "node-b/worker": probe({}) }, now, policy: "auto" });
    expect(c).toMatchObject({ type: "Verified", status: "True", reason: "Verified" });
    expect(c.message).toBe("generation 2 logs in at provider pg-main from the verifier and from node node-a (api) and node-b (worker)");
  });

  it("is not verified when a node fails although the verifier passes, and names the node", () => {
    const c = foldVerified({ grant, verifier: verifierOk, probes: { "node-a/api": probe({}), "node-b/worker": unreachableB }, now, policy: "auto" });
    expect(c).toMatchObject({ status: "False", reason: "ProviderUnreachable" });
    expect(c.message).toContain("logs in from the verifier but not from node node-b (part worker)");
    expect(c.message).toContain("make provider pg-main reachable from node node-b");
  });

  it.each([
    { name: "stale (agent silent for more than 3 intervals + 2 s)", p: { ...unreachableB, observedAt: at(6) } },
    { name: "of an older generation", p: { ...unreachableB, generation: 1 } },
  ])("ignores a failing probe that is $name", ({ p }) => {
    expect(foldVerified({ grant, verifier: verifierOk, probes: { "node-b/worker": p }, now, policy: "auto" }).status).toBe("True");
  });

  it("ignores probes of parts that are no longer targets", () => {
    const c = foldVerified({
      grant: { ...grant, targets: [grant.targets[0]!] },
      verifier: verifierOk,
      probes: { "node-b/worker": unreachableB },
      now,
      policy: "auto",
    });
    expect(c.status).toBe("True");
  });

  it("the verifier's failure comes first, with what to do under report", () => {
    const verifier: CheckResult = {
      ok: false,
      reason: "CredentialDiverged",
      divergedTo: 1,
      message: "provider pg-main accepts generation 1 of shop/db, not the current generation 2",
      generation: 2,
      observedAt: at(1),
    };
    const c = foldVerified({ grant, verifier, probes: { "node-b/worker": unreachableB }, now, policy: "report" });
    expect(c).toMatchObject({ status: "False", reason: "CredentialDiverged" });
    expect(c.message).toContain("accepts generation 1");
    expect(c.message).toContain("repair is set to report, so nothing was changed");
    expect(c.message).toContain("meshctl verify shop/db --repair");
  });

  it("the same outcome gives the same message, whatever the times", () => {
    const a = foldVerified({ grant, verifier: verifierOk, probes: { "node-a/api": probe({}) }, now, policy: "auto" });
    const b = foldVerified({
      grant,
      verifier: { ...verifierOk, observedAt: at(3) },
      probes: { "node-a/api": probe({ observedAt: at(2) }) },
      now: now + 500,
      policy: "auto",
    });
    expect(b).toEqual(a);
  });
});

describe("advice", () => {
  const ctx = { grant: "shop/db", generation: 2, provider: "pg-main" };
  it.each([
    {
      reason: "ResourceMissing",
      policy: "report",
      text: "re-create it with generation 2's credential with `meshctl verify shop/db --repair`, or find out who removed it",
    },
    { reason: "CredentialRejected", policy: "report", text: "or find out who changed the password" },
    { reason: "CredentialDiverged", policy: "auto", text: "the verifier will re-apply generation 2's credential" },
    { reason: "ProviderUnreachable", policy: "auto", text: "check that provider pg-main runs" },
  ] as const)("$reason under $policy", ({ reason, policy, text }) => {
    expect(advice(reason, { ...ctx, policy })).toContain(text);
  });
  it("for a secret that is a provider's admin password: what the mesh does about its server, or the command", () => {
    const secret = { grant: "pg/admin-password", generation: 2, provider: "builtin-secret", kind: "secret" as const, divergedTo: 1 };
    expect(advice("CredentialDiverged", { ...secret, policy: "auto" })).toBe(
      "the mesh will log in with generation 1 and set generation 2 at the server, then carry on (repair: auto on pg/admin-password)",
    );
    expect(advice("CredentialDiverged", { ...secret, policy: "report" })).toContain("run `meshctl verify pg/admin-password --repair`");
    expect(advice("ProviderUnreachable", { ...secret, policy: "auto" })).toBe(
      "make that server run and answer at its endpoint; the verifier checks again by itself",
    );
    expect(advice("ProviderUnreachable", { ...secret, policy: "auto" })).not.toContain("builtin-secret");
  });
  it("says when a repair failed, or a rotation holds it back", () => {
    expect(advice("CredentialRejected", { ...ctx, policy: "auto", repairFailed: "admin rejected" })).toContain("repair failed (admin rejected)");
    expect(advice("CredentialRejected", { ...ctx, policy: "auto", rotating: true })).toContain("rotation of shop/db is in progress");
  });
});

describe("verificationBasis", () => {
  it("changes with what a check depends on, not with conditions", () => {
    const b = verificationBasis(grant);
    expect(verificationBasis({ ...grant, conditions: [{ type: "Verified", status: "True", reason: "Verified", message: "x", observedAt: at(0) }] })).toBe(b);
    expect(verificationBasis({ ...grant, generation: 3 })).not.toBe(b);
    expect(verificationBasis({ ...grant, holders: { ...grant.holders, "node-b/worker": { generation: 2, deliveredAt: at(0) } } })).not.toBe(b);
    expect(verificationBasis({ ...grant, repair: "report" })).not.toBe(b);
    // A repair recorded by another service (the provisioner, of a provider's admin secret).
    const repaired = {
      at: at(1),
      by: "provisioner@h/1",
      action: "reapply",
      reason: "CredentialDiverged",
      generation: 2,
      outcome: "repaired",
      message: "m",
      requested: false,
    } as const;
    expect(verificationBasis({ ...grant, repairs: [repaired] })).not.toBe(b);
    expect(verificationBasis({ ...grant, targets: [...grant.targets].reverse() })).toBe(b);
  });
});

describe("probeWorthStoring", () => {
  const p = probe({ observedAt: at(10) });
  it.each([
    { name: "first", prev: undefined, next: p, store: true },
    { name: "same, within an interval", prev: p, next: { ...p, observedAt: at(9.5) }, store: false },
    { name: "same, an interval later", prev: p, next: { ...p, observedAt: at(9) }, store: true },
    { name: "different outcome", prev: p, next: { ...unreachableB, observedAt: at(9.9) }, store: true },
    { name: "older than stored", prev: p, next: { ...unreachableB, observedAt: at(11) }, store: false },
  ])("$name → $store", ({ prev, next, store }) => {
    expect(probeWorthStoring(prev, next)).toBe(store);
  });
});
