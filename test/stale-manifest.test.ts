/**
 * A manifest stored by an earlier version under rules this one no longer has (a part's
 * `onRotate` that was shell text, from before hooks were named) is shown, not retried in
 * silence: the module is Degraded saying where the manifest breaks a rule and what to do, its
 * grants are left as they are, `meshctl status` and `get` still answer, and applying it fixed
 * brings it back. Against the real resolver, provisioner and agent on their own nats-server.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ModuleDoc } from "@mesh/shared";
import { ExitCodes, bufferOutput, runExplain, runGet, runStatus } from "../packages/cli/src/index.js";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";

let mesh: TestMesh;

beforeAll(async () => {
  mesh = await startTestMesh();
});

afterAll(async () => {
  await mesh?.stop();
});

const shop = (onRotate?: string): ModuleDoc => ({
  kind: "Module",
  name: "old-shop",
  parts: [{ name: "api", node: "node-a", installed: true, ...(onRotate ? { onRotate } : {}) }],
  requires: [{ name: "key", kind: "secret" }],
});

describe("a manifest stored under an earlier version's rules", () => {
  it("makes its module Degraded saying what to do, leaves its grants, and is mended by applying it fixed", async () => {
    expect((await mesh.apply([shop()])).ok).toBe(true);
    await mesh.waitForState("old-shop", "Ready");
    const before = await mesh.grant("old-shop", "key");

    // As an earlier version stored it: onRotate was a shell command then.
    await mesh.store.kv.manifests.put(
      "old-shop",
      JSON.stringify({ ...shop(), parts: [{ name: "api", node: "node-a", installed: true, onRotate: "systemctl reload shop" }] }),
    );
    const status = await mesh.waitForState("old-shop", "Degraded");
    expect(status.message).toContain('parts[0].onRotate: "systemctl reload shop" is not a hook name: name a hook the part\'s node allows');
    expect(status.message).toContain("apply -f FILE");
    // Its grant is as it was: nothing taken back.
    const after = await mesh.grant("old-shop", "key");
    expect(after?.generation).toBe(before?.generation);
    expect(after?.removal).toBeUndefined();

    const out = bufferOutput();
    expect(await runStatus(mesh.store, { module: "old-shop" }, out)).toBe(ExitCodes.Ok);
    expect(out.stdout).toContain("Degraded");
    const listed = bufferOutput();
    expect(await runGet(mesh.store, { resource: "modules", name: "old-shop" }, listed)).toBe(ExitCodes.Ok);
    expect(listed.stdout).toMatch(/old-shop +Degraded/);
    const explained = bufferOutput();
    expect(await runExplain(mesh.store, { module: "old-shop" }, explained)).toBe(ExitCodes.Ok);
    expect(explained.stdout).toContain("its stored manifest no longer meets this version's rules");

    expect((await mesh.apply([shop("reload")])).ok).toBe(true);
    await waitFor("old-shop Ready again", async () => (await mesh.moduleStatus("old-shop"))?.state === "Ready");
  });
});
