/**
 * An identity that expires is rotated before it does: a `nats.user` grant on a NATS whose
 * operator is the mesh, with user JWTs that live 6 s (`userExpiry`), no `rotate:` schedule,
 * delivered to node-a/api by its agent. The rotator (checking every 200 ms) rotates it once two
 * thirds of each JWT's life have passed, so the holder's binding always holds a JWT that logs
 * in, and the generation before it is revoked. And a `nats.user` past the provider's ceiling
 * is never issued: its grant says why, and what to do.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, credsAuthenticator } from "@nats-io/transport-node";
import { Kinds, Rotation, getCondition, keys, type ModuleDoc } from "@mesh/shared";
import { readJson } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { bindingPath } from "@mesh/agent";
import { startRotator, type Rotator } from "@mesh/rotator";
import { startOperatorNats, type OperatorNats } from "./harness/nats-operator.js";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";

const EXPIRY_S = 6;

const shop: ModuleDoc = {
  kind: "Module",
  name: "shop",
  parts: [{ name: "api", node: "node-a", installed: true }],
  requires: [{ name: "bus", kind: Kinds.NatsUser, parts: ["api"] }],
};

let nats: OperatorNats;
let mesh: TestMesh;
let rotator: Rotator | undefined;

const creds = () => readFileSync(join(bindingPath(join(mesh.bindingsRoot, "node-a"), "shop", "api", "bus"), "creds"), "utf8");
const expiresOf = (c: string) => (JSON.parse(Buffer.from(c.split("\n")[1]!.split(".")[1]!, "base64url").toString()) as { exp: number }).exp;

async function logsIn(c: string): Promise<boolean> {
  try {
    const nc = await connect({ servers: nats.url, authenticator: credsAuthenticator(new TextEncoder().encode(c)), reconnect: false, timeout: 3_000 });
    await nc.close();
    return true;
  } catch (e) {
    if (/authorization violation|authentication (revoked|expired)/i.test(String(e))) return false;
    throw e;
  }
}

beforeAll(async () => {
  nats = await startOperatorNats();
  mesh = await startTestMesh({
    nodes: ["node-a"],
    nats: nats.server,
    auth: { authenticator: credsAuthenticator(new TextEncoder().encode(nats.adminCreds)) },
    masterKey: nats.masterKey,
  });
  rotator = await startRotator({
    store: mesh.store,
    masterKey: mesh.masterKey,
    log: createLogger("rotator", { destination: mesh.logs, level: "debug" }),
    sweepMs: 500,
    scheduleCheckMs: 200,
  });
  const provider = {
    ...nats.providerDoc("nats-op", [Kinds.NatsUser]),
    options: { signingKeysFile: nats.files.signingKeysFile, userExpiry: `${EXPIRY_S}s` },
    // The admin's .creds as the provisioner reads it: from a file.
    admin: { username: "mesh-admin", passwordFile: nats.files.adminCredsFile },
  };
  expect((await mesh.apply([provider, shop])).ok).toBe(true);
  await mesh.waitForState("shop", "Ready");
}, 60_000);

afterAll(async () => {
  await rotator?.stop();
  await mesh?.stop();
  await nats?.stop().catch(() => {});
});

describe("an identity whose JWT expires", () => {
  it("is rotated before it expires, with no schedule: the binding always logs in, the generation before is revoked", async () => {
    const first = await waitFor("the agent's binding", () => {
      try {
        return creds();
      } catch {
        return undefined;
      }
    });
    expect(expiresOf(first) - Math.floor(Date.now() / 1000)).toBeLessThanOrEqual(EXPIRY_S);
    const seen = new Map<number, string>([[expiresOf(first), first]]);
    // Two rotations, about 4 s apart; meanwhile the binding is checked all along.
    const until = Date.now() + 3 * EXPIRY_S * 1000;
    let loginsChecked = 0;
    while (Date.now() < until && seen.size < 3) {
      const c = creds();
      seen.set(expiresOf(c), c);
      expect(expiresOf(c) * 1000, "the delivered JWT has expired").toBeGreaterThan(Date.now());
      if (loginsChecked++ % 5 === 0) expect(await logsIn(c), "the delivered identity logs in").toBe(true);
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(seen.size, "two rotations by the schedule within three JWT lifetimes").toBeGreaterThanOrEqual(3);
    const r = (await readJson(mesh.store.kv.rotations, keys.grant("shop", "bus"), Rotation))?.value;
    expect(r).toMatchObject({ trigger: "schedule" });
    expect(r!.to).toBeGreaterThanOrEqual(3);
    expect(await logsIn(first), "generation 1, revoked after its rotation").toBe(false);
    expect((await mesh.grant("shop", "bus"))?.resource.expires).toMatch(/^\d{4}-\d\d-\d\dT/);
  }, 60_000);

  it("is not issued past the provider's ceiling: a manifest stored past apply's check (as before the ceiling) is ProvisionFailed, saying what to do", async () => {
    const greedy: ModuleDoc = { ...shop, name: "greedy", requires: [{ name: "bus", kind: Kinds.NatsUser, parts: ["api"], options: { publish: ">" } }] };
    // apply refuses it at once…
    const reply = await mesh.apply([greedy]);
    expect(reply.ok).toBe(false);
    // …so it is written the way a manifest stored before the ceiling existed was.
    await mesh.store.kv.manifests.put("greedy", JSON.stringify(greedy));
    const condition = await waitFor("the grant's Provisioned condition", async () => {
      const c = getCondition((await mesh.grant("greedy", "bus"))?.conditions ?? [], "Provisioned");
      return c?.reason === "ProvisionFailed" ? c : undefined;
    });
    expect(condition.status).toBe("False");
    expect(condition.message).toMatch(
      /^provider nats-op: nats\.user greedy\/bus asks to publish ">" \(it reaches "x"\), past the ceiling of provider nats-op, which lets module greedy publish app\.greedy\.>\. Ask the operator to widen/,
    );
    const g = await mesh.grant("greedy", "bus");
    expect(g?.generation).toBe(0);
    expect(g?.resource).toEqual({});
  }, 60_000);
});
