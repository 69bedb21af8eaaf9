/**
 * A whole mesh in the test process: its own nats-server, the store, resolver, provisioner and
 * one agent per node, each with a logger whose lines are kept for assertions.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ApplyReply, ModuleStatus, Grant, Rotation, RotationStates, keys, parseMasterKey, subjects, type MasterKey } from "@mesh/shared";
import { connectNats, openStore, readJson, type NatsConnection, type Store } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { startResolver, type Resolver } from "@mesh/resolver";
import { startProvisioner, type Provisioner } from "@mesh/provisioner";
import { startAgent } from "@mesh/agent";
import { startVerifier, type Verifier } from "@mesh/verifier";
import { startRotator, type Rotator } from "@mesh/rotator";
import { startNatsServer, type NatsServer } from "./harness/nats-server.js";
import { LogCapture } from "./harness/log-capture.js";
import { waitFor } from "./harness/wait.js";
import { randomBytes } from "node:crypto";
import type { ConnectionOptions } from "@nats-io/transport-node";

export interface TestMesh {
  nats: NatsServer;
  nc: NatsConnection;
  store: Store;
  logs: LogCapture;
  bindingsRoot: string;
  resolver: Resolver;
  provisioner: Provisioner;
  /** The master key credentials are encrypted under (for tests that act as a rotation would). */
  masterKey: MasterKey;
  /** Started with the `verifier` option. */
  verifier?: Verifier;
  apply(documents: unknown[]): Promise<ApplyReply>;
  moduleStatus(name: string): Promise<ModuleStatus | undefined>;
  grant(module: string, requirement: string): Promise<Grant | undefined>;
  waitForState(module: string, state: ModuleStatus["state"], timeoutMs?: number): Promise<ModuleStatus>;
  stop(): Promise<void>;
}

export interface TestMeshOptions {
  nodes?: string[];
  env?: NodeJS.ProcessEnv;
  /** Also start a verifier, checking each grant every `intervalMs` (default 1 s). */
  verifier?: { intervalMs?: number };
  /** The agents' probe interval (default: theirs, 10 s). */
  probeIntervalMs?: number;
  /** A server the test started itself (with authentication, say) instead of a fresh one; stopped with the mesh. */
  nats?: NatsServer;
  /** The identity the mesh's services connect with, on such a server (a user and password, or an authenticator). */
  auth?: { user: string; pass: string } | Pick<ConnectionOptions, "authenticator">;
  /** The master key (default: a fresh one), e.g. the one an operator server's signing keys are sealed under. */
  masterKey?: MasterKey;
  /** The directory the agents' bindings roots are made in (`<dir>/<node>`; default a fresh one, removed at stop), e.g. one named in `MESH_BINDINGS_ROOT`. */
  bindingsRoot?: string;
}

export async function startTestMesh(opts: TestMeshOptions = {}): Promise<TestMesh> {
  const nats = opts.nats ?? (await startNatsServer());
  const nc = await connectNats(nats.url, opts.auth ?? {});
  const store = await openStore(nc);
  const logs = new LogCapture();
  const logger = (service: string) => createLogger(service, { destination: logs, level: "debug" });
  const bindingsRoot = opts.bindingsRoot ?? mkdtempSync(join(tmpdir(), "mesh-bindings-"));
  const resolver = await startResolver({ store, log: logger("resolver"), env: opts.env ?? process.env });
  const masterKey = opts.masterKey ?? parseMasterKey(randomBytes(32).toString("hex"));
  const provisioner = await startProvisioner({
    store,
    masterKey,
    log: logger("provisioner"),
    env: opts.env ?? process.env,
  });
  const agents = await Promise.all(
    (opts.nodes ?? ["node-a"]).map((node) =>
      startAgent({
        store,
        node,
        bindingsRoot: join(bindingsRoot, node),
        log: logger("agent"),
        ...(opts.probeIntervalMs ? { probeIntervalMs: opts.probeIntervalMs } : {}),
      }),
    ),
  );
  const verifier = opts.verifier
    ? await startVerifier({ store, masterKey, log: logger("verifier"), env: opts.env ?? process.env, intervalMs: opts.verifier.intervalMs ?? 1_000 })
    : undefined;
  const mesh: TestMesh = {
    nats,
    nc,
    store,
    logs,
    bindingsRoot,
    resolver,
    provisioner,
    masterKey,
    ...(verifier ? { verifier } : {}),
    async apply(documents) {
      const m = await nc.request(subjects.apply, JSON.stringify({ documents }), { timeout: 10_000 });
      return ApplyReply.parse(m.json());
    },
    async moduleStatus(name) {
      return (await readJson(store.kv.modules, name, ModuleStatus))?.value;
    },
    async grant(module, requirement) {
      return (await readJson(store.kv.grants, keys.grant(module, requirement), Grant))?.value;
    },
    waitForState(module, state, timeoutMs = 20_000) {
      return waitFor(
        `module ${module} to be ${state}`,
        async () => {
          const s = await mesh.moduleStatus(module);
          return s?.state === state ? s : undefined;
        },
        timeoutMs,
      );
    },
    async stop() {
      await verifier?.stop();
      await Promise.all(agents.map((a) => a.stop()));
      // The provisioner the test left running (it may have replaced the first one).
      await Promise.all([provisioner.stop(), mesh.provisioner.stop()]);
      await Promise.all([resolver.stop(), mesh.resolver.stop()]);
      await nc.close();
      await nats.stop();
      rmSync(bindingsRoot, { recursive: true, force: true });
    },
  };
  return mesh;
}

/**
 * A rotator beside `mesh`, logging into its lines, sweeping every 500 ms; with `env`, the
 * providers' admin passwords it needs. The test stops it.
 */
export function startMeshRotator(mesh: TestMesh, env?: NodeJS.ProcessEnv, opts: { scheduleCheckMs?: number } = {}): Promise<Rotator> {
  return startRotator({
    store: mesh.store,
    masterKey: mesh.masterKey,
    log: createLogger("rotator", { destination: mesh.logs, level: "debug" }),
    ...(env ? { env } : {}),
    sweepMs: 500,
    ...opts,
  });
}

/** Asks for a rotation of `grant` (`<module>/<requirement>`) and waits until it commits generation `to`; the rotation record. */
export async function rotateCommitted(mesh: TestMesh, grant: string, to: number, timeoutMs = 60_000): Promise<Rotation> {
  const reply = await mesh.nc.request(subjects.rotate, JSON.stringify({ grant }), { timeout: 15_000 });
  if (!reply.json<{ ok: boolean }>().ok) throw new Error(`the rotation of ${grant} was refused: ${reply.string()}`);
  const [module, requirement] = grant.split("/") as [string, string];
  return waitFor(
    `the rotation of ${grant} to commit generation ${to}`,
    async () => {
      const r = (await readJson(mesh.store.kv.rotations, keys.grant(module, requirement), Rotation))?.value;
      return r?.state === RotationStates.Committed && r.to === to ? r : undefined;
    },
    timeoutMs,
  );
}
