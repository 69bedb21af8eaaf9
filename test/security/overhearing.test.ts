/**
 * No identity overhears another or answers in its name, end to end on `meshctl up`'s real
 * process tree (its own nats-server whose operator is the mesh, the services and two agents on
 * their granted identities). An application's `nats.user` credential, node-a's agent, an SDK
 * instance of a part and each service listen on everything their JWT lets them subscribe to, and
 * on every inbox and wildcard an attacker would try, answer every reply subject they hear
 * (`+ACK`, `-NAK`, `+TERM`, `+WPI`, a forged answer to a request) and publish into every other
 * identity's inbox, while a rotation of a secret held on both nodes runs. Node-b's part cannot apply k+1 (its
 * hook is not allowed there), so the rotation must end Stalled naming it, with k kept: no
 * listener hears anything of another identity's, and no forged ack confirms for it. A sibling
 * part declaring the module without the other part's requirements is refused and nothing is
 * taken back. And the rotator's second witness: an ack on node-b's consumer alone, and a receipt
 * alone, each commit nothing; both together do.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { DeliveryReceipt, Grant, ModuleDoc, Rotation, RotationStates, agentPart, identityRequirement, isMeshError, keys, subjects } from "@mesh/shared";
import { openStore, readJson, type Store } from "@mesh/shared/runtime";
import { jwtOfCreds, userClaims } from "@mesh/providers";
import { connectWithIdentity, declare, natsUserConnectOptions } from "@mesh/client";
import { meshctlBin, ownServerTls, runMeshctl } from "../harness/bootstrapped-mesh.js";
import { serverErrors } from "../harness/refusals.js";
import { waitFor } from "../harness/wait.js";

const MANIFEST = `
kind: Module
name: shop
parts:
  - { name: api, node: node-a, onRotate: reload }
  - { name: worker, node: node-b, onRotate: notallowed }
allowKinds: [secret]
requires:
  - { name: key, kind: secret, parts: [api, worker] }
  - { name: apikey, kind: secret, parts: [api] }
  - { name: bus, kind: nats.user, parts: [api] }
---
kind: Module
name: evil
parts:
  - { name: x, node: node-b }
requires:
  - { name: bus, kind: nats.user, parts: [x] }
`;

/** What an attacker subscribes to beside what its JWT allows. */
const WILDCARDS = [">", "*.>", "_INBOX.>", "_INBOX.*.>", "_MESH_INBOX.>", "_GRANT_INBOX.>", "$JS.>", "mesh.>"];

/** What a JetStream delivery's reply may be answered with: each settles it for its consumer. */
const ACK_BODIES = ["+ACK", "-NAK", "+TERM", "+WPI"];

/** Every identity's inbox prefix on this mesh. */
const PREFIXES = [
  ...["resolver", "provisioner", "verifier", "rotator", agentPart("node-a"), agentPart("node-b")].map((p) =>
    subjects.grantInboxPrefix("mesh", identityRequirement(p)),
  ),
  subjects.grantInboxPrefix("shop", "bus"),
  subjects.grantInboxPrefix("evil", "bus"),
  subjects.partInboxPrefix("shop", "node-a", "api"),
  subjects.partInboxPrefix("shop", "node-b", "worker"),
  subjects.partInboxPrefix("evil", "node-b", "x"),
];

const freshEnv = { ...process.env, NATS_URL: "", MESH_NATS_CREDENTIALS: "", MESH_NATS_USER: "", MESH_MASTER_KEY: "", MESH_MASTER_KEY_FILE: "" };
/** `up`'s: its services log at debug level, where the rotator says what it decided of each witness. */
const upEnv = { ...freshEnv, MESH_LOG_LEVEL: "debug" };

interface Heard {
  /** The subscription it came through (what the listener asked for). */
  on: string;
  subject: string;
  reply?: string;
}

/** An identity listening on everything it may and every inbox an attacker would try, answering `+ACK` to every reply it hears. */
interface Listener {
  name: string;
  nc: NatsConnection;
  /** What its JWT lets it subscribe to, its own inbox prefix included. */
  allowed: string[];
  heard: Heard[];
  errors: string[];
}

describe("meshctl up with an application, an agent, a part and every service listening for what is not theirs", () => {
  let cwd: string;
  let up: ChildProcess;
  let out = "";
  let admin: NatsConnection;
  let store: Store;
  const listeners: Listener[] = [];
  const bindings = (node: string, ...path: string[]) => join(cwd, ".mesh/bindings", node, ...path);

  /**
   * `name`, on the identity of the binding at `binding`, listening everywhere it may and beyond:
   * every JetStream delivery it hears but through its own inbox (its identity's own work, which
   * this would only sabotage) is answered (`+ACK`, `-NAK`, `+TERM`, `+WPI` in turn), every request
   * heard through anything but its own permissions gets a forged answer, and it publishes into
   * every other identity's inbox.
   */
  const listen = async (name: string, binding: string): Promise<Listener> => {
    // As an application connects with its binding: its creds, and its own inbox prefix.
    const options = natsUserConnectOptions(binding);
    const nc = await connect({ ...options, reconnect: false });
    const claims = userClaims(jwtOfCreds(readFileSync(join(binding, "creds"), "utf8"))!);
    const l: Listener = { name, nc, allowed: claims.subscribe, heard: [], errors: serverErrors(nc) };
    const ownInbox = options.inboxPrefix ? `${options.inboxPrefix}.>` : undefined;
    let answered = 0;
    for (const subject of new Set([...WILDCARDS, ...PREFIXES.map((p) => `${p}.>`), ...claims.subscribe])) {
      nc.subscribe(subject, {
        callback: (err, m) => {
          if (err) return;
          l.heard.push({ on: subject, subject: m.subject, ...(m.reply ? { reply: m.reply } : {}) });
          if (!m.reply) return;
          if (m.reply.startsWith("$JS.ACK.") && subject !== ownInbox) nc.publish(m.reply, ACK_BODIES[answered++ % ACK_BODIES.length]!);
          else if (!claims.subscribe.includes(subject)) nc.publish(m.reply, JSON.stringify({ ok: true, forged: name }));
        },
      });
    }
    // Into every other identity's inbox: refused, whatever it would have said.
    for (const p of PREFIXES.filter((p) => p !== options.inboxPrefix)) nc.publish(`${p}.x`, JSON.stringify({ ok: true, forged: name }));
    await nc.flush();
    listeners.push(l);
    return l;
  };

  /**
   * `meshctl rotate shop/key --wait`, which stalls: node-b's part may not run its hook, so it
   * never confirms. Run once, by whichever test needs the stalled rotation first.
   */
  let stalling: ReturnType<typeof runMeshctl> | undefined;
  const stalledRotation = () => (stalling ??= runMeshctl(cwd, ["rotate", "shop/key", "--wait", "--timeout", "25s"], freshEnv, 90_000));

  const rotation = async (): Promise<Rotation | undefined> => (await readJson(store.kv.rotations, keys.grant("shop", "key"), Rotation))?.value;

  beforeAll(async () => {
    cwd = mkdtempSync(join(tmpdir(), "mesh-overhear-"));
    const manifest = join(cwd, "shop.yaml");
    writeFileSync(manifest, MANIFEST);
    up = spawn(process.execPath, [meshctlBin, "up", "--nodes", "node-a,node-b", "--allow-hook", "reload=/bin/true", "-f", manifest], {
      cwd,
      env: upEnv,
      stdio: ["ignore", "pipe", "pipe"],
    });
    up.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    up.stderr!.on("data", (d: Buffer) => (out += d.toString()));
    // And the server has taken the control plane's grant of its certificate (its one reload).
    const ready = () => /\bshop Ready\b/.test(out) && /\bevil Ready\b/.test(out) && /the NATS server presents generation \d+ of mesh\/nats-tls/.test(out);
    await waitFor("shop and evil Ready in up's output", ready, 150_000).catch((e) => {
      throw new Error(`${(e as Error).message}\n--- up printed:\n${out}`);
    });
    const url = readFileSync(join(cwd, ".mesh/nats-url"), "utf8").trim();
    admin = await connect({
      servers: url,
      authenticator: credsAuthenticator(readFileSync(join(cwd, ".mesh/nats-operator/admin.creds"))),
      ...ownServerTls(cwd),
    });
    store = await openStore(admin);
    for (const [part, node] of [
      ["worker", "node-b"],
      ["api", "node-a"],
    ]) {
      await waitFor(
        `shop/${part}'s key and identity`,
        () => (existsSync(bindings(node!, "shop", part!, "key", "value")) && existsSync(bindings(node!, "shop", part!, "identity", "creds"))) || undefined,
        30_000,
      );
    }
    await waitFor("evil/bus delivered to evil/x", () => existsSync(bindings("node-b", "evil", "x", "bus", "creds")) || undefined, 30_000);
  }, 200_000);

  afterAll(async () => {
    for (const l of listeners) await l.nc.close().catch(() => undefined);
    await admin?.close().catch(() => undefined);
    if (up && up.exitCode === null) {
      const exited = new Promise((r) => up.once("exit", r));
      up.kill("SIGTERM");
      await exited;
    }
    if (cwd) rmSync(cwd, { recursive: true, force: true });
  }, 60_000);

  it(
    "a rotation whose holder on node-b cannot apply k+1 ends Stalled naming it, k kept, though seven identities listened everywhere they could, answered all they heard and published into every other inbox",
    { timeout: 120_000 },
    async () => {
      const evil = await listen("evil/bus (an application's nats.user)", bindings("node-b", "evil", "x", "bus"));
      const agent = await listen("node-a's agent", bindings("node-a", "mesh", agentPart("node-a"), identityRequirement(agentPart("node-a"))));
      const part = await listen("shop/api's identity (an SDK instance)", bindings("node-a", "shop", "api", "identity"));
      const services = [];
      for (const service of ["resolver", "provisioner", "verifier", "rotator"])
        services.push(await listen(`the ${service}`, bindings("node-a", "mesh", service, identityRequirement(service))));
      const k = (await readJson(store.kv.grants, keys.grant("shop", "key"), Grant))!.value.generation;
      const workerK = readFileSync(bindings("node-b", "shop", "worker", "key", "value"), "utf8");

      const r = await stalledRotation();
      expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(8); // Stalled
      expect(`${r.stdout}${r.stderr}`).toMatch(/Stalled/);
      expect(`${r.stdout}${r.stderr}`).toContain("node-b/worker");
      const stalled = (await rotation())!;
      expect(stalled.state).toBe(RotationStates.Stalled);
      expect(stalled.holders["node-b/worker"]?.c).toBeUndefined();
      expect(stalled.holders["node-a/api"]?.c).toBeDefined();
      // k is kept: the grant is still at k, whose value the store still holds; node-b's part has
      // k+1 written and waits for its hook (an agent writes the files first).
      expect(stalled.from).toBe(k);
      expect((await readJson(store.kv.grants, keys.grant("shop", "key"), Grant))!.value.generation).toBe(k);
      expect((await store.kv.credentials.get(keys.credential("shop", "key", k)))?.operation).toBe("PUT");
      expect(readFileSync(bindings("node-b", "shop", "worker", "key", "value"), "utf8")).not.toBe(workerK);
      expect(readFileSync(join(cwd, ".mesh/logs/agent-node-b.log"), "utf8")).toMatch(/HookNotAllowed|does not allow/);

      // Nobody heard anything but through what its own JWT names (its own inbox, its own
      // subjects), however wide it subscribed: the server refused the rest, or dropped it.
      for (const l of listeners) {
        const foreign = l.heard.filter((h) => !l.allowed.includes(h.on));
        expect(foreign, `${l.name} heard`).toEqual([]);
        expect(
          l.heard.filter((h) => h.reply?.includes("MESH_HOLD_N_node-b")),
          `${l.name} heard node-b's deliveries`,
        ).toEqual([]);
        expect(l.nc.isClosed(), `${l.name}'s connection`).toBe(false);
      }
      // The application and the part heard nothing at all; each wildcard and other inbox was refused.
      expect(evil.heard).toEqual([]);
      expect(
        part.heard.filter(
          (h) => h.on !== `${subjects.partInboxPrefix("shop", "node-a", "api")}.>` && !/^mesh\.(delivery|withdrawal)\.node-a\.shop\.api\./.test(h.subject),
        ),
      ).toEqual([]);
      for (const l of [evil, agent, part, ...services]) {
        expect(l.errors.join("\n"), l.name).toMatch(/Permissions Violation for Subscription to "_INBOX\.>"/);
        // Its publishes into the others' inboxes: each refused by the server.
        for (const p of PREFIXES.filter((p) => !l.allowed.includes(`${p}.>`)))
          expect(l.errors.join("\n"), `${l.name} publishing into ${p}`).toContain(`Permissions Violation for Publish to "${p}.x"`);
      }
    },
  );

  it(
    "part worker declaring shop without apikey and bus is refused as Forbidden, and both stay provisioned and delivered to api",
    { timeout: 60_000 },
    async () => {
      const worker = await connectWithIdentity(bindings("node-b", "shop", "worker", "identity"), { follow: false });
      try {
        const doc = (await readJson(store.kv.manifests, "shop", ModuleDoc))!.value;
        const without = { ...doc, requires: doc.requires.filter((r) => r.name !== "apikey" && r.name !== "bus") };
        const e = await declare(worker.nc, [without]).then(
          () => undefined,
          (err: unknown) => err,
        );
        expect(isMeshError(e, "Forbidden"), String(e)).toBe(true);
        expect((e as Error).message).toContain("part worker may not remove requirement apikey: it is not among its parts (api)");
        expect((e as Error).message).toContain("part worker may not remove requirement bus, a nats.user");
      } finally {
        await worker.close();
      }
      expect((await readJson(store.kv.manifests, "shop", ModuleDoc))!.value.requires.map((r) => r.name).sort()).toEqual(["apikey", "bus", "key"]);
      for (const req of ["apikey", "bus"]) {
        const g = (await readJson(store.kv.grants, keys.grant("shop", req), Grant))!.value;
        expect(g.generation, req).toBeGreaterThanOrEqual(1);
        expect(
          g.targets.map((t) => t.part),
          req,
        ).toEqual(["api"]);
        expect(existsSync(bindings("node-a", "shop", "api", req)), req).toBe(true);
      }
    },
  );

  it(
    "the rotator counts node-b's part only with both witnesses: a forged ack alone, or a forged receipt alone, commits nothing; both do",
    { timeout: 120_000 },
    async () => {
      await stalledRotation();
      const r = (await rotation())!;
      expect(r.state).toBe(RotationStates.Stalled);
      const receiptKey = keys.receipt("node-b", "shop", "key", "worker");
      const real = (await store.kv.receipts.get(receiptKey))!;
      expect(DeliveryReceipt.parse(real.json()).confirmed?.rotation).not.toBe(r.id);
      const rotatorInbox = `${subjects.grantInboxPrefix("mesh", identityRequirement("rotator"))}.>`;
      // What the rotator hears of a receipt: its watch of the receipts, delivered to its inbox (the operator may listen there).
      const forgeReceipt = async (value: Uint8Array | string) => {
        const data = typeof value === "string" ? new TextEncoder().encode(value) : value;
        const heard = new Promise<void>((resolve) => {
          const sub = admin.subscribe(rotatorInbox, {
            callback: (_, m) => {
              if (Buffer.compare(Buffer.from(m.data), Buffer.from(data)) !== 0) return;
              sub.unsubscribe();
              resolve();
            },
          });
        });
        await admin.flush();
        await store.kv.receipts.put(receiptKey, data);
        await heard;
      };
      // What the rotator decided of node-b's part, as its log says at debug level: a witness
      // alone is not counted (a count would commit, this being the last holder).
      const decisions = (decision: RegExp) =>
        readFileSync(join(cwd, ".mesh/logs/rotator.log"), "utf8")
          .split("\n")
          .filter((l) => decision.test(l) && l.includes('"holder":"node-b/worker"') && l.includes(r.id)).length;
      const RECEIPT_ALONE = /a receipt says the part applied the rotation; it counts once/;
      const ACK_ALONE = /an ack not counted yet: its node's receipt does not say/;
      const still = async (what: string, decision: RegExp, before: number) => {
        await waitFor(`the rotator's decision ${what}`, () => decisions(decision) > before, 20_000);
        expect((await rotation())!.state, what).toBe(RotationStates.Stalled);
      };

      // 1. A receipt saying the part applied this rotation, with no ack on its consumer.
      const forged = JSON.stringify({ ...DeliveryReceipt.parse(real.json()), confirmed: { rotation: r.id, generation: r.to } });
      const receiptsBefore = decisions(RECEIPT_ALONE);
      await forgeReceipt(forged);
      await still("with a forged receipt alone", RECEIPT_ALONE, receiptsBefore);

      // 2. The real receipt back, and an ack on node-b's consumer, sent by whoever heard the delivery (the operator here, who may).
      await forgeReceipt(real.value);
      const acksBefore = decisions(ACK_ALONE);
      const agentInbox = `${subjects.grantInboxPrefix("mesh", identityRequirement(agentPart("node-b")))}.>`;
      const ackMetric = new Promise<void>((resolve) => {
        const sub = admin.subscribe(`$JS.EVENT.METRIC.CONSUMER.ACK.MESH_HOLD_N_node-b.shop_key_worker`, { callback: () => (sub.unsubscribe(), resolve()) });
      });
      const acked = new Promise<void>((resolve) => {
        const sub = admin.subscribe(agentInbox, {
          callback: (_, m) => {
            if (!m.reply?.startsWith("$JS.ACK.MESH_HOLD_N_node-b.shop_key_worker.")) return;
            sub.unsubscribe();
            admin.publish(m.reply, "+ACK");
            resolve();
          },
        });
      });
      await acked; // the agent retries the delivery (its hook is still not allowed), and this ack comes first
      await ackMetric;
      await still("with a forged ack alone", ACK_ALONE, acksBefore);

      // 3. Both: it commits, so the two looks above could have seen a commit had there been one.
      await forgeReceipt(forged);
      await waitFor("the rotation to commit with both witnesses", async () => (await rotation())!.state === RotationStates.Committed || undefined, 30_000);
    },
  );
});
