import { describe, expect, it } from "vitest";
import { ErrorCodes } from "@mesh/shared";
import { ExitCodes } from "./exit-codes.js";
import { exitCodeOf, notRunningMessage, notUnderstood, refusal } from "./service-request.js";

describe("a service's answers, as meshctl says them", () => {
  it("says which service is not running, what was therefore not done, and how to start it", () => {
    const m = notRunningMessage("rotator", "nats://127.0.0.1:4222", "nothing was rotated");
    expect(m).toContain("no rotator answers at nats://127.0.0.1:4222: the rotator is not running, so nothing was rotated.");
    expect(m).toContain("npx meshctl up");
    expect(m).toContain("NATS_URL=nats://127.0.0.1:4222 node services/rotator/dist/main.js");
    expect(m).toContain("MESH_MASTER_KEY_FILE");
    expect(notRunningMessage("resolver", "nats://h:1", "nothing was applied")).toContain("npx meshctl up -f FILE");
  });

  it("turns a refusal into the service's message with the exit code its error code stands for", () => {
    const missing = refusal({ ok: false, error: { code: ErrorCodes.NotFound, message: "no grant shop/db", retryable: false } }, "rotator");
    expect(missing?.message).toBe("the rotator refused: no grant shop/db.");
    expect(missing?.exitCode).toBe(ExitCodes.NotFound);
    const busy = refusal({ ok: false, error: { code: ErrorCodes.Unavailable, message: "busy, try again.", retryable: true } }, "resolver");
    expect(busy?.message).toBe("the resolver refused: busy, try again. Trying again later may succeed.");
    expect(busy?.exitCode).toBe(ExitCodes.Failure);
    expect(refusal({ ok: true }, "resolver")).toBeUndefined();
    expect(exitCodeOf(ErrorCodes.InvalidRequest)).toBe(ExitCodes.Usage);
    expect(notUnderstood("resolver").message).toContain("are meshctl and the resolver of the same version?");
  });
});
