/**
 * sdkHolderPermissions on a real nats-server with authorization: an SDK instance connected as
 * a user with exactly those permissions holds a secret through a rotation (registers, gets
 * generation 1, is told of generation 2 with its values sealed, confirms, and the rotation
 * commits), while the same user may neither tell another instance of a rotation nor confirm a
 * grant that is not its own. The services run as an admin user.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import {
  Grant,
  Kinds,
  Rotation,
  RotationStates,
  connectNats,
  createLogger,
  keys,
  openStore,
  parseMasterKey,
  readJson,
  sdkHolderPermissions,
  subjects,
  type ModuleDoc,
  type Store,
} from "@mesh/shared";
import { holdCredential, type HeldCredential } from "@mesh/client";
import { startResolver, type Resolver } from "@mesh/resolver";
import { startProvisioner, type Provisioner } from "@mesh/provisioner";
import { startRotator, type Rotator } from "@mesh/rotator";
import { startNatsServer, type NatsServer } from "./harness/nats-server.js";
import { LogCapture } from "./harness/log-capture.js";
import { waitFor } from "./harness/wait.js";

const ADMIN = { user: "admin", pass: randomBytes(12).toString("hex") };
const APP = { user: "shop-app", pass: randomBytes(12).toString("hex") };
const permissions = sdkHolderPermissions("shop", "key", "n1", "app");

let dir: string;
let nats: NatsServer;
let store: Store;
let resolver: Resolver;
let provisioner: Provisioner;
let rotator: Rotator;
const conns: NatsConnection[] = [];
const logs = new LogCapture();
const log = () => createLogger("test", { destination: logs });

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "mesh-holder-perms-"));
  const list = (xs: string[]) => `[${xs.map((x) => JSON.stringify(x)).join(", ")}]`;
  const config = join(dir, "nats.conf");
  writeFileSync(
    config,
    [
      `jetstream { store_dir: ${JSON.stringify(join(dir, "js"))} }`,
      "authorization {",
      "  users: [",
      `    { user: ${JSON.stringify(ADMIN.user)}, password: ${JSON.stringify(ADMIN.pass)} }`,
      `    { user: ${JSON.stringify(APP.user)}, password: ${JSON.stringify(APP.pass)}, permissions: { publish: { allow: ${list(permissions.publish)} }, subscribe: { allow: ${list(permissions.subscribe)} } } }`,
      "  ]",
      "}",
    ].join("\n"),
  );
  nats = await startNatsServer({ configFile: config });
  store = await openStore(await connectNats(nats.url, { user: ADMIN.user, pass: ADMIN.pass }));
  const masterKey = parseMasterKey(randomBytes(32).toString("hex"));
  resolver = await startResolver({ store, log: log() });
  provisioner = await startProvisioner({ store, masterKey, log: log() });
  rotator = await startRotator({ store, masterKey, log: log(), sweepMs: 500 });
});

afterAll(async () => {
  await rotator?.stop();
  await provisioner?.stop();
  await resolver?.stop();
  await Promise.all(conns.map((c) => c.close()));
  await store?.nc.close();
  await nats?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** A connection as the module's user, with the server's refusals collected. */
async function connectAsApp(): Promise<{ nc: NatsConnection; errors: string[] }> {
  const nc = await connect({ servers: nats.url, user: APP.user, pass: APP.pass });
  conns.push(nc);
  const errors: string[] = [];
  void (async () => {
    for await (const st of nc.status()) if (st.type === "error") errors.push(String(st.error));
  })();
  return { nc, errors };
}

describe("sdkHolderPermissions", () => {
  it("are enough for an SDK instance to hold a credential through a rotation, and no more", async () => {
    const doc = { kind: "Module", name: "shop", parts: [{ name: "app", node: "n1", installed: true }], requires: [{ name: "key", kind: Kinds.Secret }] } satisfies Partial<ModuleDoc>;
    const applied = await store.nc.request(subjects.apply, JSON.stringify({ documents: [doc] }), { timeout: 10_000 });
    expect((applied.json() as { ok: boolean }).ok).toBe(true);
    await waitFor("generation 1", async () => ((await readJson(store.kv.grants, keys.grant("shop", "key"), Grant))?.value.generation ?? 0) >= 1 || undefined);

    const { nc, errors } = await connectAsApp();
    const holder = await holdCredential(nc, { module: "shop", part: "app", requirement: "key", node: "n1", instance: "i1" });
    const got: HeldCredential[] = [];
    const held = (async () => {
      for await (const u of holder) {
        got.push(u);
        if (u.rotation) await u.confirm();
      }
    })();
    await waitFor("generation 1 held", () => got.some((u) => u.generation === 1) || undefined);
    const rotation = await rotator.rotate({ grant: "shop/key" });
    expect(Object.keys(rotation.holders)).toEqual(["n1/app/i1"]);
    await waitFor("the commit", async () => (await readJson(store.kv.rotations, keys.grant("shop", "key"), Rotation))?.value.state === RotationStates.Committed || undefined, 20_000);
    expect(got.find((u) => u.generation === 2)?.rotation).toBe(rotation.id);
    expect(errors).toEqual([]);

    // The module's user may not tell another instance of a rotation, nor confirm another grant,
    // nor confirm this grant for another part.
    const other = await connectAsApp();
    other.nc.publish(subjects.holderValues("shop", "key", "n1", "app", "i1"), JSON.stringify({ rotation: "shop/key#9" }));
    other.nc.publish(subjects.rotationConfirm("billing", "key", "n1", "app"), "{}");
    other.nc.publish(subjects.rotationConfirm("shop", "key", "n1", "worker"), "{}");
    await other.nc.flush();
    await waitFor("the server to refuse all three", () => (other.errors.filter((e) => /permissions violation/i.test(e)).length >= 3 ? true : undefined), 5_000);
    expect(other.errors.join("\n")).toMatch(/mesh\.rotation\.values\.shop\.key\.n1\.app\.i1/);
    expect(other.errors.join("\n")).toMatch(/mesh\.api\.confirm\.billing\.key\.n1\.app/);
    expect(other.errors.join("\n")).toMatch(/mesh\.api\.confirm\.shop\.key\.n1\.worker/);

    await holder.stop();
    await held;
  }, 60_000);
});
