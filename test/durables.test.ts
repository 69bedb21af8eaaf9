/**
 * Every durable consumer the services make on the mesh's buckets is one the permissions know
 * (`Durables`): the identities that may list a bucket are denied every durable of its stream
 * but their own by name, so a durable named anywhere else could be taken over by one of them.
 * A whole mesh (resolver, provisioner, agent, verifier, rotator) on its own nats-server runs
 * through an apply, a delivery, a verification and a rotation; then every consumer of every
 * bucket's stream on the server is looked at.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Buckets, Durables, RotateReply, kvStream, subjects } from "@mesh/shared";
import { createLogger } from "@mesh/shared/service";
import { startRotator, type Rotator } from "@mesh/rotator";
import { servicePermissions } from "@mesh/shared";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";

let mesh: TestMesh;
let rotator: Rotator;

beforeAll(async () => {
  mesh = await startTestMesh({ verifier: { intervalMs: 500 } });
  rotator = await startRotator({ store: mesh.store, masterKey: mesh.masterKey, log: createLogger("rotator", { destination: mesh.logs }), sweepMs: 500 });
});

afterAll(async () => {
  await rotator?.stop();
  await mesh?.stop();
});

describe("the durables on the mesh's buckets", () => {
  it("are every one a durable the permissions name, denied to the identities that list its bucket", async () => {
    expect(
      (
        await mesh.apply([
          { kind: "Module", name: "shop", parts: [{ name: "api", node: "node-a", installed: true }], requires: [{ name: "key", kind: "secret" }] },
        ])
      ).ok,
    ).toBe(true);
    await mesh.waitForState("shop", "Ready");
    const reply = RotateReply.parse((await mesh.nc.request(subjects.rotate, JSON.stringify({ grant: "shop/key" }), { timeout: 15_000 })).json());
    expect(reply.ok).toBe(true);
    await waitFor("the rotation to commit", async () => (await mesh.grant("shop", "key"))?.generation === 2, 20_000);

    const known = new Map(Object.values(Durables).map((d) => [`${kvStream(d.bucket)}/${d.name}`, d]));
    const found: string[] = [];
    for (const bucket of Object.values(Buckets)) {
      for await (const ci of mesh.store.jsm.consumers.list(kvStream(bucket)))
        if (ci.config.durable_name) found.push(`${kvStream(bucket)}/${ci.config.durable_name}`);
    }
    // The services made theirs (at least the resolver's, the provisioner's and the rotator's), and no other.
    expect(found.length).toBeGreaterThanOrEqual(Object.keys(Durables).length);
    expect(found.filter((f) => !known.has(f))).toEqual([]);
    // And each is denied by name to the agent, which lists the providers and its receipts.
    const denied = servicePermissions({ agent: "node-a" }).denyPublish ?? [];
    for (const d of [Durables.resolverProviders, Durables.provisionerReceipts])
      expect(denied).toContain(`$JS.API.CONSUMER.CREATE.${kvStream(d.bucket)}.${d.name}.>`);
  });
});
