/**
 * Rotation on a schedule, end to end on its own nats-server (resolver, provisioner, an agent on
 * node-a, and the rotator in-process, checking schedules every 200 ms): a `secret` requirement
 * with `rotate: { every: 2s }` is rotated by the schedule alone, with no rotate request, from
 * generation 1 to 2 (a rotation whose trigger is `schedule`), and its holder's binding file gets
 * the new value; a requirement without `rotate`, as old, is not rotated meanwhile.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kinds, Rotation, RotationStates, keys, subjects, type ModuleDoc } from "@mesh/shared";
import { readJson, type NatsConnection } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { CredentialStore } from "@mesh/providers";
import { bindingGeneration, bindingPath } from "@mesh/agent";
import { startRotator, type Rotator } from "@mesh/rotator";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";

const EVERY_MS = 2_000;
const CHECK_MS = 200;

const shop: ModuleDoc = {
  kind: "Module",
  name: "shop",
  parts: [{ name: "api", node: "node-a", installed: true }],
  requires: [
    { name: "key", kind: Kinds.Secret, parts: ["api"], rotate: { every: `${EVERY_MS / 1000}s` } },
    { name: "token", kind: Kinds.Secret, parts: ["api"] },
  ],
};

let mesh: TestMesh;
let rotator: Rotator | undefined;
let rotateRequests: ReturnType<NatsConnection["subscribe"]> | undefined;
let requestsSeen = 0;

/** The `value` the agent wrote for node-a/api's requirement, and the generation its symlink names. */
function binding(requirement: string): { generation: number | undefined; value: string } {
  const root = join(mesh.bindingsRoot, "node-a");
  return {
    generation: bindingGeneration(root, "shop", "api", requirement),
    value: readFileSync(join(bindingPath(root, "shop", "api", requirement), "value"), "utf8"),
  };
}

/** The stored value of a generation of a requirement, straight from the credential store. */
async function storedValue(requirement: string, generation: number): Promise<{ value: string; createdAt: string }> {
  const cred = await new CredentialStore(mesh.store.kv.credentials, mesh.masterKey).read("shop", requirement, generation);
  const value = cred?.bindings?.value;
  if (!cred || value === undefined) throw new Error(`no stored credential for shop/${requirement} generation ${generation}`);
  return { value, createdAt: cred.record.createdAt };
}

async function rotationOf(requirement: string): Promise<Rotation | undefined> {
  return (await readJson(mesh.store.kv.rotations, keys.grant("shop", requirement), Rotation))?.value;
}

beforeAll(async () => {
  mesh = await startTestMesh({ nodes: ["node-a"] });
  // Every rotate request on the API subject is counted: the schedule must need none.
  rotateRequests = mesh.nc.subscribe(subjects.rotate, {
    callback: () => {
      requestsSeen++;
    },
  });
  rotator = await startRotator({
    store: mesh.store,
    masterKey: mesh.masterKey,
    log: createLogger("rotator", { destination: mesh.logs, level: "debug" }),
    sweepMs: 500,
    scheduleCheckMs: CHECK_MS,
  });
  expect((await mesh.apply([shop])).ok).toBe(true);
  await mesh.waitForState("shop", "Ready");
});

afterAll(async () => {
  rotateRequests?.unsubscribe();
  await rotator?.stop();
  await mesh?.stop();
});

describe("a requirement's rotate: { every } schedule", () => {
  it("rotates the grant by itself, the holder gets the new value, and a requirement without rotate stays", async () => {
    // Generation 1 of both, held by node-a/api.
    await waitFor("node-a/api holding generation 1 of both", async () => {
      const [k, t] = [await mesh.grant("shop", "key"), await mesh.grant("shop", "token")];
      return k?.holders["node-a/api"]?.generation === 1 && t?.holders["node-a/api"]?.generation === 1;
    });
    const key1 = await storedValue("key", 1);
    const token1 = await storedValue("token", 1);
    expect(binding("key")).toEqual({ generation: 1, value: key1.value });
    expect(binding("token")).toEqual({ generation: 1, value: token1.value });

    // The schedule rotates shop/key 1 → 2 once generation 1 is EVERY_MS old. Polled well inside
    // EVERY_MS, so the record is seen before the next scheduled rotation (#3) replaces it.
    const r = await waitFor(
      "the scheduled rotation shop/key#2 to commit",
      async () => {
        const rot = await rotationOf("key");
        return rot?.id === "shop/key#2" && rot.state === RotationStates.Committed ? rot : undefined;
      },
      EVERY_MS + 15_000,
    );
    const bindingAtCommit = binding("key");
    const grantAtCommit = await mesh.grant("shop", "key");

    expect(r).toMatchObject({ grant: "shop/key", from: 1, to: 2, trigger: "schedule" });
    expect(Object.keys(r.holders)).toEqual(["node-a/api"]);
    expect(r.holders["node-a/api"]?.c).toBeTypeOf("number");
    // Not before the schedule said: generation 1 was at least EVERY_MS old when it was requested.
    expect(Date.parse(r.requestedAt) - Date.parse(key1.createdAt)).toBeGreaterThanOrEqual(EVERY_MS);
    expect(grantAtCommit?.generation).toBe(2);
    expect(grantAtCommit?.holders["node-a/api"]?.generation).toBe(2);

    // The holder's binding file has generation 2's value, a new one.
    const key2 = await storedValue("key", 2);
    expect(key2.value).not.toBe(key1.value);
    expect(bindingAtCommit).toEqual({ generation: 2, value: key2.value });

    // shop/token, as old as shop/key was, is left alone: give the schedule a few more checks
    // past the age at which it would have been due, then look.
    const tokenDueAt = Date.parse(token1.createdAt) + EVERY_MS + 3 * CHECK_MS;
    await new Promise((res) => setTimeout(res, Math.max(0, tokenDueAt - Date.now())));
    expect(await rotationOf("token")).toBeUndefined();
    const token = await mesh.grant("shop", "token");
    expect(token?.generation).toBe(1);
    expect(token?.holders["node-a/api"]?.generation).toBe(1);
    expect(binding("token")).toEqual({ generation: 1, value: token1.value });

    // No rotate request was sent: the schedule started the rotation itself.
    await mesh.nc.flush();
    expect(requestsSeen).toBe(0);
    expect(mesh.logs.text.includes("scheduled rotation of shop/key started")).toBe(true);
  });
});
