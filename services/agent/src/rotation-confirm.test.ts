import { describe, expect, it } from "vitest";
import { getCondition, type Grant } from "@mesh/shared";
import { grantFixture } from "../../../test/fixtures.js";
import { clearHookFailure, hookNotAllowed, isHookError, recordHookFailure } from "./rotation-confirm.js";

const now = new Date("2030-01-01T00:00:00Z");
// shop/db at generation 2, rotating to 3.
const d = { part: "api", rotation: "shop/db#3", generation: 3 };
const notAllowed = hookNotAllowed("reload", "node-a", d, new Map([["flush", ["/bin/true"]]]));

describe("hookNotAllowed", () => {
  it("names the hook, the node, what it allows, and how to allow it; retryable", () => {
    expect(notAllowed.message).toBe(
      'the part\'s onRotate names hook "reload", which the agent of node node-a does not allow (it allows flush), so nothing ran and generation 3 is not confirmed (the one before keeps working): ' +
        "start that agent with --allow-hook reload=COMMAND (or MESH_ALLOW_HOOKS, or meshctl up --allow-hook reload=COMMAND), or name a hook it allows in the part's onRotate",
    );
    expect(notAllowed.retryable).toBe(true);
    expect(isHookError(notAllowed)).toBe(true);
    expect(hookNotAllowed("reload", "node-a", d, new Map()).message).toContain("(it allows none)");
  });
});

describe("recordHookFailure and clearHookFailure", () => {
  const rotating = (): Grant =>
    grantFixture({ conditions: [{ type: "Rotating", status: "True", reason: "AwaitingHolders", message: "rotation shop/db#3: generation 2 → 3 (Broadcast), waiting for 2 holders to confirm", observedAt: now.toISOString() }] });

  it("says on the grant which holder the rotation waits for and why, once", () => {
    const g = recordHookFailure(rotating(), "node-a", d, notAllowed, now)!;
    expect(getCondition(g.conditions, "Rotating")).toMatchObject({ status: "True", reason: "HookNotAllowed", message: `rotation shop/db#3 waits for node-a/api: ${notAllowed.message}` });
    expect(recordHookFailure(g, "node-a", d, notAllowed, now)).toBeUndefined();
  });

  it("writes nothing for a grant gone, a rotation committed, or a delivery outside a rotation", () => {
    expect(recordHookFailure(undefined, "node-a", d, notAllowed, now)).toBeUndefined();
    expect(recordHookFailure(grantFixture({ generation: 3 }), "node-a", d, notAllowed, now)).toBeUndefined();
    expect(recordHookFailure(rotating(), "node-a", { part: "api", generation: 3 }, notAllowed, now)).toBeUndefined();
  });

  it("puts Rotating back to AwaitingHolders once that holder confirmed, and leaves anything else alone", () => {
    const failed = recordHookFailure(rotating(), "node-a", d, notAllowed, now)!;
    const cleared = clearHookFailure(failed, "node-a", "api", "shop/db#3", now)!;
    expect(getCondition(cleared.conditions, "Rotating")).toMatchObject({ status: "True", reason: "AwaitingHolders" });
    expect(getCondition(cleared.conditions, "Rotating")!.message).toContain("node-a/api confirmed once its hook ran");
    expect(clearHookFailure(failed, "node-b", "worker", "shop/db#3", now)).toBeUndefined();
    expect(clearHookFailure(failed, "node-a", "api", "shop/db#4", now)).toBeUndefined();
    expect(clearHookFailure(rotating(), "node-a", "api", "shop/db#3", now)).toBeUndefined();
    expect(clearHookFailure(undefined, "node-a", "api", "shop/db#3", now)).toBeUndefined();
  });
});
