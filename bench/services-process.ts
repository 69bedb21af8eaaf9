/**
 * The rotation benchmark's other services, forked by rotation.bench.ts so that the process
 * under measurement runs only the rotator: a resolver and a provisioner on their own NATS
 * connection. Started with `{ op: "start", url, masterKey, env }` (the master key as hex, the
 * providers' admin passwords in `env`), it replies `{ ready: true }`; `{ op: "stop" }` stops
 * them, replies `{ stopped: true }`, and the process exits.
 */
import { connectNats, createLogger, openStore, parseMasterKey } from "@mesh/shared";
import { startResolver } from "@mesh/resolver";
import { startProvisioner } from "@mesh/provisioner";

type Started = { stop(): Promise<void> };
let services: Started[] = [];
let close: (() => Promise<void>) | undefined;

process.on("message", (m: { op: "start"; url: string; masterKey: string; env: Record<string, string> } | { op: "stop" }) => {
  void (async () => {
    if (m.op === "start") {
      const nc = await connectNats(m.url);
      const store = await openStore(nc);
      const log = createLogger("bench-services", { level: "error" });
      const resolver = await startResolver({ store, log });
      const provisioner = await startProvisioner({ store, masterKey: parseMasterKey(m.masterKey), log, env: { ...process.env, ...m.env } });
      services = [provisioner, resolver];
      close = () => nc.close();
      process.send!({ ready: true });
    } else {
      for (const s of services) await s.stop();
      await close?.();
      process.send!({ stopped: true }, () => process.exit(0));
    }
  })().catch((e: unknown) => {
    console.error(`bench services: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  });
});
// The benchmark gone (it failed or was stopped): nothing to serve.
process.on("disconnect", () => process.exit(1));
