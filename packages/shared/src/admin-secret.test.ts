/**
 * Telling a server that holds an older generation of its admin secret from one that holds the
 * current one, the staged one, or none: from the logins, and in words.
 */
import { describe, expect, it } from "vitest";
import { adminSecretAdvice, adminSecretGenerations, classifyAdminSecret, type AdminLogin, type AdminSecretTrials } from "./admin-secret.js";

const ok: AdminLogin = { ok: true };
const rejected: AdminLogin = { ok: false, reason: "rejected", message: 'password authentication failed for user "postgres"' };
const down: AdminLogin = { ok: false, reason: "unreachable", message: "connect ECONNREFUSED 127.0.0.1:5433" };
const trials = (current: number, results: Array<[number, AdminLogin]>, staged?: number): AdminSecretTrials => ({
  provider: "pg-apps",
  endpoint: "postgres://127.0.0.1:5433",
  secret: "pg/admin-password",
  current,
  ...(staged ? { staged } : {}),
  trials: results.map(([generation, result]) => ({ generation, result })),
});

describe("adminSecretGenerations", () => {
  it.each([
    [1, undefined, [1, 2]],
    [2, undefined, [2, 3, 1]],
    [3, 4, [3, 4, 2, 1]],
    [5, undefined, [5, 6, 4, 3, 2, 1]],
  ])("current %i, staged %s: %j", (current, staged, want) => {
    expect(adminSecretGenerations(current, staged)).toEqual(want);
  });
});

describe("classifyAdminSecret", () => {
  it("the current generation accepted: current", () => {
    expect(classifyAdminSecret(trials(2, [[2, ok]]))).toEqual({ state: "current", generation: 2 });
  });

  it("the staged generation accepted while a rotation runs: staged, not diverged", () => {
    expect(
      classifyAdminSecret(
        trials(
          2,
          [
            [2, rejected],
            [3, ok],
          ],
          3,
        ),
      ),
    ).toEqual({ state: "staged", generation: 3 });
  });

  it("an older generation accepted: diverged, naming both generations", () => {
    const f = classifyAdminSecret(
      trials(2, [
        [2, rejected],
        [3, rejected],
        [1, ok],
      ]),
    );
    expect(f).toEqual({
      state: "diverged",
      accepted: 1,
      current: 2,
      message:
        "provider pg-apps: the server at postgres://127.0.0.1:5433 accepts generation 1 of pg/admin-password; the mesh holds 2; its data directory was initialised earlier (or restored from a copy made then)",
    });
  });

  it("a newer generation accepted with no rotation running: diverged, saying a rotation set it and never committed", () => {
    const f = classifyAdminSecret(
      trials(2, [
        [2, rejected],
        [3, ok],
      ]),
    );
    expect(f).toMatchObject({ state: "diverged", accepted: 3, current: 2 });
    expect("message" in f && f.message).toContain("a rotation set generation 3 there and never committed it");
  });

  it("none accepted: rejected, listing what was tried and what to do", () => {
    const f = classifyAdminSecret(
      trials(2, [
        [2, rejected],
        [1, rejected],
      ]),
    );
    expect(f.state).toBe("rejected");
    expect("message" in f && f.message).toMatch(
      /accepts none of the generations of pg\/admin-password the mesh holds \(2, 1\).*set the admin user's password at the server to generation 2/,
    );
  });

  it("no answer: unreachable, with the cause", () => {
    const f = classifyAdminSecret(trials(2, [[2, down]]));
    expect(f).toEqual({
      state: "unreachable",
      message: "provider pg-apps: the server at postgres://127.0.0.1:5433 cannot be reached: connect ECONNREFUSED 127.0.0.1:5433",
    });
  });
});

describe("adminSecretAdvice", () => {
  it("auto: what the mesh will do", () => {
    expect(adminSecretAdvice({ accepted: 1, current: 2 }, "pg/admin-password", "auto")).toBe(
      "the mesh will log in with generation 1 and set generation 2 at the server, then carry on (repair: auto on pg/admin-password)",
    );
  });
  it("report: nothing changed, and the command that does it", () => {
    const a = adminSecretAdvice({ accepted: 1, current: 2 }, "pg/admin-password", "report");
    expect(a).toContain("nothing was changed at the server");
    expect(a).toContain("run `meshctl verify pg/admin-password --repair` to log in with generation 1 and set generation 2 at the server");
  });
});
