import { describe, expect, it } from "vitest";
import { hookNotAllowed, isHookError } from "./rotation-confirm.js";

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
