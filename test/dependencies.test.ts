/**
 * Provisioning in the order the requirements give: a provider that needs grants serves
 * nothing until they are provisioned, and the requirement waiting for it says so and moves on
 * by itself; a wait that leads back to itself is reported as a cycle, naming its members.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getCondition } from "@mesh/shared";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";

describe("providers that need grants", () => {
  let mesh: TestMesh;
  beforeAll(async () => {
    mesh = await startTestMesh();
  }, 60_000);
  afterAll(async () => {
    await mesh?.stop();
  });

  const resolved = async (module: string, requirement: string) => getCondition((await mesh.grant(module, requirement))?.conditions ?? [], "Resolved");

  it("waits, visibly, for what its provider needs, and moves on by itself once that is provisioned", async () => {
    // A store that runs as module infra and needs infra's key before it can serve anything.
    const store = { kind: "Provider", name: "infra-kv", serves: ["kv.bucket"], node: "node-a", endpoint: mesh.nats.url, needs: ["infra/key"] };
    const app = { kind: "Module", name: "app", parts: [{ name: "api", node: "node-a" }], requires: [{ name: "cache", kind: "kv.bucket" }] };
    expect((await mesh.apply([store, app])).ok).toBe(true);
    const waiting = await waitFor("app/cache waiting", async () => {
      const c = await resolved("app", "cache");
      return c?.reason === "AwaitingDependency" ? c : undefined;
    });
    expect(waiting.message).toContain("infra-kv needs infra/key");
    expect((await mesh.waitForState("app", "Pending")).message).toContain("cache (AwaitingDependency)");

    const infra = { kind: "Module", name: "infra", parts: [{ name: "store", node: "node-a" }], requires: [{ name: "key", kind: "secret" }] };
    expect((await mesh.apply([infra])).ok).toBe(true);
    await mesh.waitForState("infra", "Ready");
    await mesh.waitForState("app", "Ready");
    expect(await resolved("app", "cache")).toMatchObject({ status: "True", reason: "ProviderSelected" });
  });

  it("reports a cycle, naming its members, and never provisions its members", async () => {
    // loop-a/files (object.store) can only come from a provider that needs loop-b/db (kv.bucket),
    // whose only provider needs loop-a/files.
    const objects = { kind: "Provider", name: "loop-objects", serves: ["object.store"], node: "node-a", endpoint: mesh.nats.url, needs: ["loop-b/db"] };
    const kv = { kind: "Provider", name: "loop-kv", serves: ["kv.bucket"], node: "node-a", endpoint: mesh.nats.url, needs: ["loop-a/files"] };
    const a = { kind: "Module", name: "loop-a", parts: [{ name: "p", node: "node-a" }], requires: [{ name: "files", kind: "object.store" }] };
    const b = {
      kind: "Module",
      name: "loop-b",
      parts: [{ name: "p", node: "node-a" }],
      requires: [{ name: "db", kind: "kv.bucket", options: { history: 2 } }],
    };
    // infra-kv (from the test above) serves kv.bucket too, and needs nothing any more: retire it
    // from this test by marking it not installed.
    const infraKv = {
      kind: "Provider",
      name: "infra-kv",
      serves: ["kv.bucket"],
      node: "node-a",
      endpoint: mesh.nats.url,
      needs: ["infra/key"],
      installed: false,
    };
    expect((await mesh.apply([objects, kv, a, b, infraKv])).ok).toBe(true);
    const cycle = await waitFor("the cycle reported", async () => {
      const c = await resolved("loop-a", "files");
      return c?.reason === "DependencyCycle" ? c : undefined;
    });
    expect(cycle.message).toContain("loop-a/files → loop-b/db → loop-a/files");
    // The other member learns of the cycle once the first one's grant is stored (its module is
    // reconciled again then), so it is waited for too.
    await waitFor("the other member reported as in the cycle", async () => (await resolved("loop-b", "db"))?.reason === "DependencyCycle" || undefined);
    const state = await mesh.waitForState("loop-a", "Unsatisfiable");
    expect(state.message).toContain("files: DependencyCycle");
    expect((await mesh.grant("loop-a", "files"))?.generation).toBe(0);
  });
});
