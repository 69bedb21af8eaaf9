/**
 * Every record the services store says which format wrote it, and a program meeting a record
 * of a newer format than it reads (a newer release's, during a rolling upgrade or after a
 * rollback) refuses it by name and leaves it as it is, rather than misread or overwrite it;
 * the work waits, and goes on once the record is one it reads. Against the real resolver,
 * provisioner and agent on their own nats-server.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RECORD_VERSION, RECORD_VERSION_FIELD, keys, type ModuleDoc } from "@mesh/shared";
import { bufferOutput, runStatus } from "../packages/cli/src/index.js";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";

let mesh: TestMesh;

beforeAll(async () => {
  mesh = await startTestMesh();
});

afterAll(async () => {
  await mesh?.stop();
});

const shop = (parts: string[]): ModuleDoc => ({
  kind: "Module",
  name: "fmt-shop",
  parts: parts.map((name) => ({ name, node: "node-a", installed: true })),
  requires: [{ name: "key", kind: "secret" }],
});

const formatOf = async (kv: TestMesh["store"]["kv"][keyof TestMesh["store"]["kv"]], key: string) =>
  ((await kv.get(key))?.json() as Record<string, unknown> | undefined)?.[RECORD_VERSION_FIELD];

describe("records and their formats", () => {
  it("every record the services write says the format that wrote it", async () => {
    expect((await mesh.apply([shop(["api"])])).ok).toBe(true);
    await mesh.waitForState("fmt-shop", "Ready");
    const g = (await mesh.grant("fmt-shop", "key"))!;
    const { kv } = mesh.store;
    expect(await formatOf(kv.manifests, "fmt-shop"), "the manifest").toBe(RECORD_VERSION);
    expect(await formatOf(kv.modules, "fmt-shop"), "the module's state").toBe(RECORD_VERSION);
    expect(await formatOf(kv.grants, keys.grant("fmt-shop", "key")), "the grant").toBe(RECORD_VERSION);
    expect(await formatOf(kv.credentials, keys.credential("fmt-shop", "key", g.generation)), "the credential").toBe(RECORD_VERSION);
    expect(await formatOf(kv.nodes, "node-a"), "the node").toBe(RECORD_VERSION);
  });

  it("a record of a newer format is refused by name and left as it is; the work goes on once it is one this release reads", async () => {
    const key = keys.grant("fmt-shop", "key");
    const stored = (await mesh.store.kv.grants.get(key))!.json() as Record<string, unknown>;
    // As a newer release would store it: a format this one does not know, with a field it never heard of.
    const newer = JSON.stringify({ ...stored, [RECORD_VERSION_FIELD]: RECORD_VERSION + 1, holdersBy: "a newer meaning" });
    await mesh.store.kv.grants.put(key, newer);
    const refusal = new RegExp(`record mesh-grants/fmt-shop\\.key was written by a newer release of the mesh \\(record format ${RECORD_VERSION + 1};`);

    await expect(runStatus(mesh.store, { module: "fmt-shop" }, bufferOutput())).rejects.toThrow(refusal);

    // A change that makes the resolver write the grant (a second part holds it): refused, said in the log, and the record untouched.
    const logged = mesh.logs.lines.length;
    expect((await mesh.apply([shop(["api", "worker"])])).ok).toBe(true);
    await waitFor("the refusal in the log", () => mesh.logs.lines.slice(logged).some((l) => refusal.test(l)), 15_000);
    expect((await mesh.store.kv.grants.get(key))!.string()).toBe(newer);

    // The record as a release from before formats were recorded stored it (no recordVersion: format 1): read, the change goes
    // through, and it is written back in this release's format.
    const { [RECORD_VERSION_FIELD]: _format, ...unversioned } = stored;
    await mesh.store.kv.grants.put(key, JSON.stringify(unversioned));
    await waitFor("the second part to hold the grant", async () => ((await mesh.grant("fmt-shop", "key"))?.parts ?? []).includes("worker"), 30_000);
    await mesh.waitForState("fmt-shop", "Ready");
    expect(await formatOf(mesh.store.kv.grants, key)).toBe(RECORD_VERSION);
  });
});
