/**
 * The benchmarks' other services, forked so that the process under measurement runs only what
 * it measures: a resolver and a provisioner (and, when asked, a node's agent, a verifier or a
 * rotator) on their own NATS connection. Started with `{ op: "start", url, masterKey, env }`
 * (the master key as hex, the providers' admin passwords in `env`; `services` lists which, by
 * default the resolver and the provisioner; `agent` the node and bindings root of an agent), it
 * replies `{ ready: true }`; `{ op: "stop" }` stops them, replies `{ stopped: true }`, and the
 * process exits. One process per service gives each service's RSS (growth.bench.ts). With
 * `BENCH_PROFILE_DIR` set, a CPU profile of the process from start to stop is written there
 * (`services-<pid>.cpuprofile`).
 */
import { startProfile, writeProfile } from "./profile.js";
import { parseMasterKey } from "@mesh/shared";
import { connectNats, openStore } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { startResolver } from "@mesh/resolver";
import { startProvisioner } from "@mesh/provisioner";
import { startAgent } from "@mesh/agent";
import { startVerifier } from "@mesh/verifier";
import { startRotator } from "@mesh/rotator";

/** What a services process may run. */
export type BenchService = "resolver" | "provisioner" | "agent" | "verifier" | "rotator";

type Started = { stop(): Promise<void> };
let services: Started[] = [];
let close: (() => Promise<void>) | undefined;
let stopProfile: (() => Promise<string>) | undefined;

type Start = {
  op: "start";
  url: string;
  masterKey: string;
  env: Record<string, string>;
  services?: BenchService[];
  agent?: { node: string; bindingsRoot: string };
};
process.on("message", (m: Start | { op: "stop" }) => {
  void (async () => {
    if (m.op === "start") {
      if (process.env.BENCH_PROFILE_DIR) stopProfile = await startProfile();
      const nc = await connectNats(m.url);
      const store = await openStore(nc);
      const log = createLogger("bench-services", { level: "error" });
      const masterKey = parseMasterKey(m.masterKey);
      const env = { ...process.env, ...m.env };
      const want = new Set<BenchService>(m.services ?? ["resolver", "provisioner"]);
      // Stopped in the reverse order of their start.
      if (want.has("resolver")) services.unshift(await startResolver({ store, log }));
      if (want.has("provisioner")) services.unshift(await startProvisioner({ store, masterKey, log, env }));
      if (want.has("agent")) services.unshift(await startAgent({ store, node: m.agent!.node, bindingsRoot: m.agent!.bindingsRoot, log }));
      if (want.has("verifier")) services.unshift(await startVerifier({ store, masterKey, log, env }));
      if (want.has("rotator")) services.unshift(await startRotator({ store, masterKey, log, env }));
      close = () => nc.close();
      process.send!({ ready: true });
    } else {
      for (const s of services) await s.stop();
      services = [];
      await close?.();
      if (stopProfile) writeProfile(`services-${process.pid}`, await stopProfile());
      process.send!({ stopped: true }, () => process.exit(0));
    }
  })().catch((e: unknown) => {
    console.error(`bench services: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  });
});
// Loaded (the mesh's modules imported): a benchmark may time the start alone.
process.send?.({ loaded: true });
// The benchmark gone (it failed or was stopped): nothing to serve.
process.on("disconnect", () => process.exit(1));
