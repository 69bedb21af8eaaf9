/** Who asked, read from a request's subject alone; what the trail records of a body: names, never a value. */
import { describe, expect, it } from "vitest";
import {
  AuditedRequests,
  checkOperatorName,
  operatorOfInboxPrefix,
  operatorOfRequirement,
  operatorRequirement,
  operatorSubject,
  requesterName,
  requesterOf,
} from "./audit.js";
import { subjects } from "./subjects.js";

describe("requesterOf", () => {
  it("names the admin on a bare operator subject, a named operator on its own, and a part on a part's subject", () => {
    expect(requesterOf(subjects.rotate)).toEqual({ kind: "admin" });
    expect(requesterOf(operatorSubject(subjects.rotate, "alice"))).toEqual({ kind: "operator", name: "alice" });
    expect(requesterOf(operatorSubject(subjects.apply, "alice"))).toEqual({ kind: "operator", name: "alice" });
    expect(requesterOf(subjects.applyPart("shop", "node-a", "api"))).toEqual({ kind: "part", module: "shop", node: "node-a", part: "api" });
    expect(requesterOf(subjects.credentialFetch("shop", "db", "node-a", "api"))).toEqual({ kind: "part", module: "shop", node: "node-a", part: "api" });
    expect(requesterOf(subjects.credentialList("shop", "node-a", "api"))).toEqual({ kind: "part", module: "shop", node: "node-a", part: "api" });
  });

  it("takes a part on a node or module called op for that part, not for an operator", () => {
    expect(requesterOf(subjects.applyPart("shop", "op", "api"))).toEqual({ kind: "part", module: "shop", node: "op", part: "api" });
    expect(requesterOf(subjects.credentialFetch("op", "db", "op", "api"))).toMatchObject({ kind: "part", module: "op", part: "api" });
  });

  it("reads as the trail writes it", () => {
    expect(requesterName({ kind: "admin" })).toBe("admin (break-glass)");
    expect(requesterName({ kind: "operator", name: "alice" })).toBe("operator:alice");
    expect(requesterName({ kind: "part", module: "shop", node: "node-a", part: "api" })).toBe("part:shop/api@node-a");
  });
});

describe("operator names", () => {
  it("round-trips through the requirement and the inbox prefix of the identity", () => {
    expect(operatorOfRequirement(operatorRequirement("alice"))).toBe("alice");
    expect(operatorOfInboxPrefix(subjects.grantInboxPrefix("mesh", operatorRequirement("alice")))).toBe("alice");
    // Not an operator's: another module's grant, a control-plane service's, a part's.
    expect(operatorOfInboxPrefix(subjects.grantInboxPrefix("shop", operatorRequirement("alice")))).toBeUndefined();
    expect(operatorOfInboxPrefix(subjects.grantInboxPrefix("mesh", "nats-rotator"))).toBeUndefined();
    expect(operatorOfInboxPrefix(subjects.partInboxPrefix("mesh", "node-a", "operator-alice"))).toBeUndefined();
    expect(operatorOfInboxPrefix(undefined)).toBeUndefined();
  });

  it("refuses a name that is not one, or too long for its requirement", () => {
    expect(checkOperatorName("alice")).toBeUndefined();
    for (const bad of ["Alice", "a.b", "a*", "", "x".repeat(60)]) expect(checkOperatorName(bad), bad).toContain("is refused");
    expect(() => operatorSubject(subjects.rotate, "a.b")).toThrow();
  });
});

describe("AuditedRequests", () => {
  it("records names and numbers of a body, never a value it carries", () => {
    const secret = "s3cr3t-value";
    const bodies: Array<[keyof typeof AuditedRequests, unknown]> = [
      ["apply", { documents: [{ kind: "Module", name: "shop", requires: [{ name: "db", options: { password: secret } }] }], source: secret }],
      ["declare", { documents: [{ kind: "Module", name: "shop", parts: [{ name: secret }] }] }],
      ["delete", { documents: [{ kind: "Module", name: "shop" }], retained: ["shop/db"], force: true }],
      ["rotate", { grant: "shop/db", requestId: secret, revoke: { graceMs: 0, by: secret, reason: "leak" } }],
      ["evict", { grant: "shop/db", holders: ["node-a/api"] }],
      ["verify", { grant: "shop/db", repair: true }],
      ["fetch", { grant: "shop/db", part: "api", node: "node-a", generation: 3, recipient: secret, partKey: true }],
      ["list", { anything: secret }],
    ];
    for (const [name, body] of bodies) {
      const d = AuditedRequests[name].describe(body, "mesh.api.x");
      expect(JSON.stringify(d), name).not.toContain(secret);
    }
    expect(AuditedRequests.rotate.describe({ grant: "shop/db", revoke: { graceMs: 0, reason: "leak" } }, "")).toEqual({
      action: "revoke",
      grant: "shop/db",
      target: { trigger: undefined, reason: "leak", graceMs: 0 },
    });
    expect(AuditedRequests.verify.describe({ grant: "shop/db", repair: true }, "").action).toBe("repair");
    expect(AuditedRequests.fetch.describe({ grant: "shop/db", generation: 3 }, "").target).toMatchObject({ generation: 3 });
    expect(AuditedRequests.apply.describe({ documents: [{ kind: "Module", name: "shop" }] }, "").target).toMatchObject({ documents: ["Module/shop"] });
  });

  it("describes a body that is not an object without throwing", () => {
    for (const r of Object.values(AuditedRequests)) for (const body of [null, 3, "x", [], {}]) expect(() => r.describe(body, "s")).not.toThrow();
  });
});
