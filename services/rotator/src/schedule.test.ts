import { beforeAll, describe, expect, it } from "vitest";
import { Grant, ModuleDoc, ProviderDoc, parseDuration } from "@mesh/shared";
import { newAuthority, trustsOf } from "@mesh/providers";
import { isDue, isExpiring, outdatedTls } from "./schedule.js";

const NOW = new Date("2025-06-01T12:00:00.000Z");
const daysAgo = (d: number) => new Date(NOW.getTime() - d * 86_400_000);

describe("isDue for a requirement with rotate: { every: 30d }", () => {
  const doc = ModuleDoc.parse({
    kind: "Module",
    name: "shop",
    parts: [{ name: "api", node: "node-a" }],
    requires: [{ name: "key", kind: "secret", parts: ["api"], rotate: { every: "30d" } }],
  });
  const every = parseDuration(doc.requires[0]!.rotate!.every);

  it.each([
    { name: "a generation 31 days old is due", since: daysAgo(31), due: true },
    { name: "exactly 30 days old is due", since: daysAgo(30), due: true },
    { name: "29 days old is not due", since: daysAgo(29), due: false },
    { name: "made just now is not due", since: NOW, due: false },
    { name: "an unknown age is never due", since: undefined, due: false },
  ])("$name", ({ since, due }) => {
    expect(isDue(since, every, NOW)).toBe(due);
  });

  it("reads the schedule as 30 days", () => {
    expect(every).toBe(30 * 86_400_000);
  });
});

describe("isExpiring for a credential that expires by itself (a NATS user JWT)", () => {
  const expires = new Date(NOW.getTime() + 30 * 86_400_000);
  it.each([
    { name: "in use 61 of its 90 days is due", since: daysAgo(61), due: true },
    { name: "at exactly two thirds is due", since: daysAgo(60), due: true },
    { name: "in use 59 of its 90 days is not due", since: daysAgo(59), due: false },
    { name: "an unknown start counts from the expiry: due only once expired", since: undefined, due: false },
  ])("$name", ({ since, due }) => {
    expect(isExpiring(since, expires, NOW)).toBe(due);
  });

  it("an expired credential, or one whose start is after its expiry, is due", () => {
    expect(isExpiring(daysAgo(10), daysAgo(1), NOW)).toBe(true);
    expect(isExpiring(undefined, NOW, NOW)).toBe(true);
    expect(isExpiring(new Date(expires.getTime() + 1), expires, NOW)).toBe(false);
  });
});

describe("outdatedTls: a grant whose bindings say to reach its provider otherwise than it says now", () => {
  let PEM_A: string;
  let PEM_B: string;
  beforeAll(async () => {
    PEM_A = (await newAuthority()).certificatePem;
    PEM_B = (await newAuthority()).certificatePem;
  });
  const provider = (tls?: ProviderDoc["tls"], endpoint = "postgres://127.0.0.1:5432", serves: ProviderDoc["serves"] = ["postgres.database"]) =>
    ProviderDoc.parse({ kind: "Provider", name: "pg-main", serves, node: "node-a", endpoint, ...(tls ? { tls } : {}) });
  const grant = (resource: Record<string, string>, kind = "postgres.database") =>
    Grant.parse({
      id: "shop/db",
      module: "shop",
      requirement: "db",
      kind,
      parts: ["api"],
      targets: [],
      provider: "pg-main",
      generation: 1,
      resource,
      conditions: [],
    });

  it("is the provider gaining tls, dropping it, or naming another bundle", () => {
    expect(outdatedTls(grant({ role: "shop_db" }), provider({ ca: PEM_A }))).toBe("provider pg-main says tls, and the bindings were made without it");
    expect(outdatedTls(grant({ trusts: trustsOf(PEM_A) }), provider())).toMatch(/no longer says tls/);
    expect(outdatedTls(grant({ trusts: trustsOf(PEM_A) }), provider({ ca: PEM_B }))).toMatch(/tls.ca is not the bundle the bindings carry/);
    expect(outdatedTls(grant({ trusts: trustsOf(PEM_A) }), provider({ ca: `${PEM_A}${PEM_B}` }))).toMatch(/tls.ca is not the bundle/);
  });

  it("is nothing when they agree, for the mesh's own bundle (meshctl ca rotate keeps it), or for a kind tls does not concern", () => {
    expect(outdatedTls(grant({}), provider())).toBeUndefined();
    expect(outdatedTls(grant({ trusts: trustsOf(PEM_A) }), provider({ ca: PEM_A }))).toBeUndefined();
    expect(outdatedTls(grant({ trusts: "another" }), provider({ mesh: true }))).toBeUndefined();
    // A NATS provider's bundle is its options.caFile: its grants record trusts without tls.
    expect(outdatedTls(grant({ trusts: trustsOf(PEM_A) }, "nats.user"), provider(undefined, "tls://127.0.0.1:4222", ["nats.user"]))).toBeUndefined();
    // Another provider's grant, or one being handed over, is not this provider's to judge.
    expect(outdatedTls(grant({ provider: "pg-old" }), provider({ ca: PEM_A }))).toBeUndefined();
    expect(outdatedTls(grant({}), undefined)).toBeUndefined();
  });
});
