import { describe, expect, it } from "vitest";
import type { LoginResult } from "@mesh/providers";
import { classifyCheck, type CheckInputs, type Observation } from "./classify.js";

const ok: LoginResult = { ok: true };
const rejected: LoginResult = { ok: false, reason: "rejected", message: 'password authentication failed for user "shop_db_b"' };
const unreachable: LoginResult = { ok: false, reason: "unreachable", message: "connect ECONNREFUSED 127.0.0.1:5432" };
const missingDb: LoginResult = { ok: false, reason: "missing", message: "database shop_db does not exist at 127.0.0.1:5432" };
const exists: Observation = { exists: true, details: { group: "shop_db", database: "shop_db", role: "shop_db_b" } };
const roleGone: Observation = { exists: false, details: { group: "shop_db", database: "shop_db" }, missing: ["role"] };
const adminDown: Observation = { error: "unreachable", message: "PostgreSQL provider pg-main at postgres://127.0.0.1:5432 is unreachable" };
const adminRefused: Observation = { error: "failed", message: "the admin user was rejected" };

const base = (over: Partial<CheckInputs>): CheckInputs => ({
  grant: "shop/db",
  provider: "pg-main",
  generation: 2,
  observed: exists,
  current: ok,
  older: [],
  from: "the verifier",
  ...over,
});

describe("classifyCheck", () => {
  it.each([
    { name: "current logs in", in: {}, reason: undefined },
    { name: "current logs in though observing failed", in: { observed: adminRefused }, reason: undefined },
    { name: "nothing answers", in: { current: unreachable, observed: adminDown }, reason: "ProviderUnreachable" },
    { name: "login unreachable, admin fine", in: { current: unreachable }, reason: "ProviderUnreachable" },
    { name: "admin unreachable, login says missing", in: { current: missingDb, observed: adminDown }, reason: "ProviderUnreachable" },
    { name: "role gone (scram says 'password failed')", in: { current: rejected, observed: roleGone }, reason: "ResourceMissing" },
    { name: "database gone", in: { current: missingDb }, reason: "ResourceMissing" },
    { name: "password changed", in: { current: rejected }, reason: "CredentialRejected" },
    {
      name: "password changed, older ones rejected too",
      in: { current: rejected, older: [{ generation: 1, result: rejected }] },
      reason: "CredentialRejected",
    },
    { name: "older generation works", in: { current: rejected, older: [{ generation: 1, result: ok }] }, reason: "CredentialDiverged" },
    {
      name: "older works though the current role is gone (alternating roles)",
      in: { current: rejected, observed: roleGone, older: [{ generation: 1, result: ok }] },
      reason: "CredentialDiverged",
    },
    { name: "unobservable and rejected", in: { current: rejected, observed: adminRefused }, reason: "CredentialRejected" },
  ])("$name → $reason", ({ in: input, reason }) => {
    const c = classifyCheck(base(input as Partial<CheckInputs>));
    expect(c.ok).toBe(reason === undefined);
    expect(c.reason).toBe(reason);
  });

  it("names the generation that works, the newest first", () => {
    const c = classifyCheck(
      base({
        generation: 4,
        current: rejected,
        older: [
          { generation: 3, result: rejected },
          { generation: 2, result: ok },
        ],
      }),
    );
    expect(c).toMatchObject({ reason: "CredentialDiverged", divergedTo: 2 });
    expect(c.message).toContain("accepts generation 2 of shop/db, not the current generation 4");
  });

  it("says where an unreachable provider was checked from", () => {
    expect(classifyCheck(base({ current: unreachable, from: "node node-b" })).message).toBe(
      "provider pg-main cannot be reached from node node-b: connect ECONNREFUSED 127.0.0.1:5432",
    );
  });

  it("names what is missing and what is present", () => {
    const c = classifyCheck(base({ current: rejected, observed: roleGone }));
    expect(c.message).toBe("the resource of shop/db at provider pg-main is gone: its role is missing (present: group shop_db, database shop_db)");
  });

  it("says what it can when the adapter does not name what is missing", () => {
    const userGone: Observation = { exists: false, details: { keyPrefix: "shop:", userLogin: "disabled", user: "mesh.shop.cache" } };
    expect(classifyCheck(base({ current: rejected, observed: userGone })).message).toBe(
      "the resource of shop/db at provider pg-main is gone: it is missing or incomplete (present: keyPrefix shop:, user mesh.shop.cache); user mesh.shop.cache may not log in",
    );
  });

  it("says when missing and rejected could not be told apart", () => {
    expect(classifyCheck(base({ current: rejected, observed: adminRefused })).message).toContain("could not be observed");
  });
});
