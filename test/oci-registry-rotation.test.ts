/**
 * A rotation of an `oci.registry` grant through the mesh itself (rotator, agent, confirmation),
 * against the test's own registry and issuer, with a holder pulling an image throughout with the
 * credential its agent delivered: not one pull fails, the holder ends on generation 2, and
 * generation 1 is refused once the rotation committed.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Rotation, RotationStates, keys, subjects } from "@mesh/shared";
import { readJson } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { createOciRegistryAdapter } from "@mesh/providers";
import { startRotator, type Rotator } from "@mesh/rotator";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { ociRegistryProvider, startOwnOciRegistry, type OwnOciRegistry } from "./harness/oci-registry.js";
import { OciHolder, pullThroughout } from "./harness/oci-client.js";
import { waitFor } from "./harness/wait.js";

/** Short, so the retired generation's tokens are gone within the test. */
const LIFETIME_S = 3;
let mesh: TestMesh;
let registry: OwnOciRegistry;
let rotator: Rotator;

beforeAll(async () => {
  [mesh, registry] = await Promise.all([startTestMesh(), startOwnOciRegistry({ lifetimeSeconds: LIFETIME_S })]);
  rotator = await startRotator({
    store: mesh.store,
    masterKey: mesh.masterKey,
    log: createLogger("rotator", { destination: mesh.logs, level: "debug" }),
    env: process.env,
    sweepMs: 500,
  });
}, 60_000);
afterAll(async () => {
  await rotator?.stop();
  await mesh?.stop();
  await registry?.stop();
});

describe("rotation of an oci.registry grant through the mesh", () => {
  it("keeps a holder's pulls working throughout, ends it on generation 2, and retires generation 1", async () => {
    const provider = ociRegistryProvider(registry, "oci-rot", registry.dir);
    const module = {
      kind: "Module",
      name: "rot",
      parts: [{ name: "app", node: "node-a" }],
      requires: [{ name: "images", kind: "oci.registry", parts: ["app"] }],
    };
    expect((await mesh.apply([provider, module])).ok).toBe(true);
    await mesh.waitForState("rot", "Ready", 30_000);
    await waitFor("the holder on generation 1", async () => (await mesh.grant("rot", "images"))?.holders["node-a/app"]?.generation === 1);

    // The holder reads its binding as the agent wrote it before each pull: the username stays, the password changes.
    const dir = join(mesh.bindingsRoot, "node-a/rot/app/images");
    const read = () => Object.fromEntries(["url", "username", "password"].map((k) => [k, readFileSync(join(dir, k), "utf8")]));
    const g1 = read();
    const ref = { repository: "rot/app", tag: "v1" };
    const layer = Buffer.from("the layer every pull must get");
    await new OciHolder(g1).pushImage(ref, layer);
    const puller = pullThroughout(new OciHolder(g1), ref, layer, read);
    await puller.past(3);

    const reply = await mesh.nc.request(subjects.rotate, JSON.stringify({ grant: "rot/images" }), { timeout: 15_000 }).then((m) => m.json<{ ok: boolean }>());
    expect(reply.ok).toBe(true);
    await waitFor(
      "the rotation committed",
      async () => (await readJson(mesh.store.kv.rotations, keys.grant("rot", "images"), Rotation))?.value.state === RotationStates.Committed,
      30_000,
    );
    const atCommit = puller.pulls;
    // Past the token lifetime, so tokens the holder got with generation 1 are gone too.
    await new Promise((r) => setTimeout(r, (LIFETIME_S + 1) * 1000));
    await puller.stop();

    expect(puller.failures).toEqual([]);
    expect(puller.pulls).toBeGreaterThan(atCommit);
    const g2 = read();
    expect(g2.username).toBe(g1.username);
    expect(g2.password).not.toBe(g1.password);
    expect((await mesh.grant("rot", "images"))?.generation).toBe(2);
    const adapter = createOciRegistryAdapter({ name: "oci-rot", node: "node-a", endpoint: registry.registryUrl, options: { issuerUrl: registry.issuerUrl } });
    expect(await adapter.login({ bindings: g2 })).toEqual({ ok: true });
    expect(await adapter.login({ bindings: g1 })).toMatchObject({ ok: false, reason: "rejected" });
  }, 90_000);
});
