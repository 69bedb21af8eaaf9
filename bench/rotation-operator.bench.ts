/**
 * Rotation fan-out in operator mode: rotation.bench.ts's measure (rotate → `Committed` of a
 * `secret` grant, beside a floor of core NATS on the holders' own connections, interleaved) on
 * a nats-server whose operator is the mesh (test/harness/nats-operator.ts: decentralized JWT
 * authentication), so every holder's permissions are the server's to enforce. Two modes:
 *
 * - **SDK holders** (`sdk`): N SDK instances of one part (`app` of module `sdk<N>` on node
 *   `sdk`), each on its own connection made with the part's workload identity: the `identity`
 *   binding the node's agent writes (kind `mesh.identity`, issued by the bootstrap provider
 *   `mesh-nats` with its signing keys), read by `connectWithIdentity` (the part's creds and
 *   inbox prefix, not following the identity's own rotations, so each connection holds the one
 *   grant measured), each holding grant `key` with `holdCredential` and confirming.
 *   The node's agent runs (as the admin) only until it has written that binding, before the
 *   module declares `key`: the part's instances are the grant's only holders.
 * - **Agent-held parts** (`agents`): N parts over `BENCH_NODES` nodes (default 10), each
 *   holding a `secret` grant through its node's agent (`startAgent`, one forked process per
 *   node, bench/agent-process.ts), each agent on the identity the mesh issued it: as
 *   `meshctl bootstrap` does, module `mesh` (`controlPlaneManifest`) is applied, the agents
 *   start as the admin, deliver their own `nats.user` identities (`mesh/nats-agent-<node>`),
 *   and are started again on them (creds and inbox prefix from the binding). A module has at
 *   most 64 parts (`Limits.parts`), so one grant has at most 64 agent-held parts: N parts are
 *   `ceil(N / 64)` modules of one `secret` grant each, and a round rotates all of them at once,
 *   timed until the last commits.
 *
 * The resolver and the provisioner (one forked process) and the rotator (this process) connect
 * as the operator's admin: their permissions are not what is measured. The floor is one
 * message per holder identity (one for the part's instances, one per node for the agents) to
 * a subject under that identity's inbox prefix, where its N responders listen on the holders'
 * connections, each answering on a subject its permissions allow (an ack subject of its own
 * holder stream that no consumer has: a part's identity has no response permission), timed
 * until all N answered. Each mode prints whether the server refused its connections a publish
 * outside their permissions (so the permissions were in force).
 *
 * Prints figures; asserts nothing. `BENCH_SIZES` (default 1000), `BENCH_RUNS` (rounds per
 * size after a first one not counted; default 20), `BENCH_MODES` (`sdk,agents`),
 * `BENCH_NODES`, `BENCH_PHASES=1` and `BENCH_PROFILE_DIR` as in rotation.bench.ts.
 */
import { randomBytes } from "node:crypto";
import { JetStreamApiError } from "@nats-io/jetstream";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  CONTROL_PLANE_MODULE,
  IDENTITY_BINDING,
  Kinds,
  Limits,
  ModuleStatus,
  agentHolderStream,
  agentPart,
  bootstrapProvider,
  controlPlaneManifest,
  identityRequirement,
  parseMasterKey,
  partHolderStream,
  subjects,
  type ModuleDoc,
} from "@mesh/shared";
import { connectNats, openStore, readJson } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { bindingPath } from "@mesh/agent";
import { startRotator } from "@mesh/rotator";
import { startOperatorNats } from "../test/harness/nats-operator.js";
import { BenchChild } from "./bench-child.js";
import { forkServices } from "./services-fork.js";
import {
  CommitWatch,
  Floor,
  HOLDERS_PER_PROCESS,
  applyDocs,
  benchSizes,
  measureRounds,
  measureSdkHolders,
  printRounds,
  rotateOnce,
  roundsHeader,
  waitProvisioned,
  waitUntil,
  type FloorTarget,
} from "./rotation-rounds.js";

const sizes = benchSizes("1000");
const modes = new Set((process.env.BENCH_MODES ?? "sdk,agents").split(",").filter(Boolean));
const RUNS = Number(process.env.BENCH_RUNS || 20);
const NODES = Array.from({ length: Number(process.env.BENCH_NODES || 10) }, (_, i) => `a${i}`);
/** The node of the SDK holders' part: no agent runs there while they hold. */
const SDK_NODE = "sdk";
/** The token the floor's subjects and answers carry. */
const FLOOR = "bench_floor";

const masterKeyHex = randomBytes(32).toString("hex");
const masterKey = parseMasterKey(masterKeyHex);
const nats = await startOperatorNats({ masterKey });
const bindingsRoot = mkdtempSync(join(tmpdir(), "bench-rotation-operator-"));
// A step that fails ends this process: its server and directories go with it (the forked processes exit when their parent is gone).
process.on("exit", () => {
  try {
    process.kill(nats.server.pid);
  } catch {
    // stopped already
  }
  for (const dir of [bindingsRoot, nats.files.dir]) rmSync(dir, { recursive: true, force: true });
});
console.log(`on one server in operator mode (decentralized JWT authentication): ${nats.url}`);
// The benchmark, the rotator, and the resolver and provisioner (forked with this environment) connect as the operator's admin.
process.env.MESH_NATS_CREDENTIALS = nats.files.adminCredsFile;
const log = createLogger("bench", { level: "error" });
// The rotator's connection, and the benchmark's own (requests, the floor, watching for the commit).
const store = await openStore(await connectNats(nats.url));
const nc = await connectNats(nats.url);
const driver = await openStore(nc);
const services = await forkServices({ url: nats.url, masterKeyHex });
const rotator = await startRotator({ store, masterKey, log, env: process.env, sweepMs: 1_000 });
/** A node's bindings root, as its agent writes it. */
const rootOf = (node: string) => join(bindingsRoot, node);
// The mesh's NATS as the provider of identities, as bootstrap declares it (the services' ceilings included).
await applyDocs(nc, [
  bootstrapProvider({
    url: nats.url,
    node: NODES[0]!,
    auth: { signingKeysFile: nats.files.signingKeysFile, admin: { username: "mesh-admin", passwordFile: nats.files.adminCredsFile } },
  }),
]);

/** An agent in a process of its own (agent-process.ts). */
const agentProcess = (node: string) => new BenchChild(new URL("./agent-process.ts", import.meta.url), `the agent process of ${node}`);
type AgentStarted = { inboxPrefix: string; refused: boolean };

const yesNo = (xs: readonly unknown[]) => (xs.every(Boolean) ? "yes" : xs.some(Boolean) ? "some" : "no");
const serverPids = [nats.server.pid];

if (modes.has("sdk")) {
  console.log(
    `\nSDK holders: N instances of one part, each on its own connection with the part's identity (mesh.identity), in holder processes of at most ${HOLDERS_PER_PROCESS}; the rotator in a process of its own; floor and rotations interleaved`,
  );
  console.log(roundsHeader("holders"));
  for (const n of sizes) {
    const module = `sdk${n}`;
    const identityDir = await deliverPartIdentity(module, "app");
    await applyDocs(nc, [
      {
        kind: "Module",
        name: module,
        parts: [{ name: "app", node: SDK_NODE, installed: true }],
        requires: [{ name: "key", kind: Kinds.Secret }],
      } satisfies Partial<ModuleDoc>,
    ]);
    await waitProvisioned(driver, module, "key");
    const inbox = subjects.partInboxPrefix(module, SDK_NODE, "app");
    const started = await measureSdkHolders({
      n,
      nc,
      store: driver,
      start: { url: nats.url, module, part: "app", node: SDK_NODE, requirement: "key", floorSubject: `${inbox}.${FLOOR}`, identityDir },
      replyTo: `$JS.ACK.${partHolderStream(module, SDK_NODE, "app")}.${FLOOR}`,
      runs: RUNS,
      label: `sdk-${n}`,
      pids: { services: [services.pid], server: serverPids },
    });
    if (!started) continue;
    const refused = started.map((s) => (s as { refused?: boolean }).refused);
    console.log(
      `        holders' identity: part app of ${module} on ${SDK_NODE} (inbox ${inbox}); a publish outside its permissions refused by the server: ${yesNo(refused)}`,
    );
  }
}

/**
 * The identity binding of part `part` of `module` on {@link SDK_NODE}: the module is applied
 * with no requirement, and the node's agent (as the admin) runs until it has written the part's
 * `identity` binding, then stops, so that it holds none of the grants declared after.
 */
async function deliverPartIdentity(module: string, part: string): Promise<string> {
  await applyDocs(nc, [{ kind: "Module", name: module, parts: [{ name: part, node: SDK_NODE, installed: true }] } satisfies Partial<ModuleDoc>]);
  const dir = bindingPath(rootOf(SDK_NODE), module, part, IDENTITY_BINDING);
  const agent = agentProcess(SDK_NODE);
  try {
    await agent.call("start", { url: nats.url, node: SDK_NODE, bindingsRoot: rootOf(SDK_NODE) });
    await waitUntil(`the identity of ${module}/${part}`, () => existsSync(join(dir, "creds")), 60_000, 100);
  } finally {
    await agent.stop();
  }
  return dir;
}

if (modes.has("agents")) {
  const agents = await startAgentsOnTheirIdentities();
  try {
    console.log(
      `\nagent-held parts: N parts over ${NODES.length} nodes, each holding a secret grant through its node's agent (one process per node, on the agent's own identity), ${Limits.parts} parts a module at most so ceil(N/${Limits.parts}) grants rotated at once; floor and rotations interleaved`,
    );
    console.log(
      `        agents' identities: mesh/nats-agent-<node> (inboxes ${agents.started[0]?.inboxPrefix} …); a publish outside their permissions refused by the server: ${yesNo(agents.started.map((s) => s.refused))}; module ${CONTROL_PLANE_MODULE}: ${agents.controlPlane}`,
    );
    console.log(roundsHeader("parts"));
    for (const n of sizes) await measureAgentHeld(n, agents);
  } finally {
    await Promise.all(agents.procs.map((p) => p.stop()));
  }
}

/**
 * The agents of {@link NODES}, each on the identity the mesh issued it, as `meshctl bootstrap`
 * brings them there: module `mesh` applied, the agents started as the admin until each has
 * written its own identity's binding, then started again with it.
 */
async function startAgentsOnTheirIdentities(): Promise<{ procs: BenchChild[]; started: AgentStarted[]; controlPlane: string }> {
  await applyDocs(nc, [controlPlaneManifest({ servicesNode: NODES[0]!, nodes: NODES })]);
  const identityOf = (node: string) => bindingPath(rootOf(node), CONTROL_PLANE_MODULE, agentPart(node), identityRequirement(agentPart(node)));
  const procs = NODES.map(agentProcess);
  try {
    await Promise.all(procs.map((p, i) => p.call("start", { url: nats.url, node: NODES[i], bindingsRoot: rootOf(NODES[i]!) })));
    await waitUntil("the agents' identities", () => NODES.every((node) => existsSync(join(identityOf(node), "creds"))), 180_000, 200);
    const started = await Promise.all(
      procs.map((p, i) =>
        p.call<AgentStarted>("start", { url: nats.url, node: NODES[i], bindingsRoot: rootOf(NODES[i]!), credentials: identityOf(NODES[i]!) }),
      ),
    );
    const s = (await readJson(driver.kv.modules, CONTROL_PLANE_MODULE, ModuleStatus))?.value;
    return { procs, started, controlPlane: s ? `${s.state}: ${s.message}` : "not processed" };
  } catch (e) {
    await Promise.all(procs.map((p) => p.stop()));
    throw e;
  }
}

/** One size of the agent-held mode: `n` parts spread over the nodes, in modules of at most {@link Limits.parts} parts. */
async function measureAgentHeld(n: number, agents: { procs: BenchChild[]; started: AgentStarted[] }): Promise<void> {
  const moduleCount = Math.ceil(n / Limits.parts);
  const modules = Array.from({ length: moduleCount }, (_, j) => `agt${n}m${j}`);
  // Part i in module i mod moduleCount, on node i mod the nodes.
  const partsOf = modules.map((): Array<{ name: string; node: string }> => []);
  for (let i = 0; i < n; i++) partsOf[i % moduleCount]!.push({ name: `p${i}`, node: NODES[i % NODES.length]! });
  await applyDocs(
    nc,
    modules.map(
      (name, j) =>
        ({
          kind: "Module",
          name,
          parts: partsOf[j]!.map((p) => ({ ...p, installed: true })),
          requires: [{ name: "key", kind: Kinds.Secret }],
        }) satisfies Partial<ModuleDoc>,
    ),
  );
  for (const m of modules) await waitProvisioned(driver, m, "key");
  // Held: every part's consumer made (once its agent's receipt said it holds the grant) and pulled from by its agent.
  const consumers = new Set(modules.flatMap((m, j) => partsOf[j]!.map((p) => `${m}_key_${p.name}`)));
  await waitUntil(
    `${n} agent-held parts consumed by their agents`,
    async () => {
      let pulled = 0;
      for (const node of NODES) {
        try {
          for await (const c of driver.jsm.consumers.list(agentHolderStream(node))) if (consumers.has(c.name) && c.num_waiting > 0) pulled++;
        } catch (e) {
          // The node's holder stream is made with its first consumer.
          if (!(e instanceof JetStreamApiError && /not found/i.test(e.message))) throw e;
        }
      }
      return pulled === n;
    },
    300_000,
    500,
  );
  const perNode = NODES.map((node) => partsOf.flat().filter((p) => p.node === node).length);
  const targets: FloorTarget[] = NODES.map((node, i) => ({
    subject: `${agents.started[i]!.inboxPrefix}.${FLOOR}.${node}`,
    responders: perNode[i]!,
    replyTo: `$JS.ACK.${agentHolderStream(node)}.${FLOOR}`,
  }));
  await Promise.all(agents.procs.map((p, i) => p.call("floor", { subject: targets[i]!.subject, count: targets[i]!.responders })));
  const commits = await Promise.all(modules.map((m) => CommitWatch.open(driver.kv.rotations, m, "key")));
  const floor = new Floor(nc, targets);
  try {
    const rounds = await measureRounds({
      label: `agents-${n}`,
      runs: RUNS,
      floor: () => floor.once(),
      rotate: () => rotateOnce(nc, commits),
      procs: agents.procs,
      pids: { services: [services.pid], server: serverPids },
    });
    await printRounds(n, rounds, { jsm: driver.jsm, serverPids, processes: agents.procs.length });
    const perGrant = partsOf.map((ps) => ps.length);
    console.log(
      `        ${moduleCount} grant(s) rotated at once, of ${Math.min(...perGrant)}–${Math.max(...perGrant)} parts each; ${Math.min(...perNode)}–${Math.max(...perNode)} parts a node`,
    );
  } finally {
    floor.stop();
    for (const c of commits) c.stop();
  }
}

await rotator.stop();
await services.stop();
await nc.close();
await store.nc.close();
await nats.stop();
process.exit(0);
