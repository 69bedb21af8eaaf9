/**
 * A node's agent (`startAgent`, the agent's own code) in a process of its own, forked by
 * rotation-operator.bench.ts, on a connection of its own, answering its parent over IPC
 * (bench-child.ts):
 * - `start` `{ url, node, bindingsRoot, credentials? }`: connects (with `credentials`, the
 *   binding directory of its `nats.user` grant, as the agent's main does with
 *   `MESH_NATS_CREDENTIALS`: its creds and inbox prefix; without, with this process's
 *   environment), opens the store and starts the agent; an agent already running here stops
 *   first. Answers `{ inboxPrefix, refused }`: the connection's inbox prefix, and whether the
 *   server refused it a publish outside its permissions;
 * - `floor` `{ subject, count }`: `count` plain floor responders on the agent's connection
 *   (those of an earlier `floor` go);
 * - `profile`: starts a CPU profile of this process; called again, stops it and returns it;
 * - `stop`: stops the agent, closes the connection, and the process exits.
 */
import { connectNats, natsIdentity, openStore, type NatsConnection } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { startAgent, type Agent } from "@mesh/agent";
import { serveParent } from "./bench-child.js";
import { toggleProfile } from "./profile.js";
import { refusesOutside } from "./refusal.js";

interface Start {
  url: string;
  node: string;
  bindingsRoot: string;
  credentials?: string;
}

let running: { agent: Agent; nc: NatsConnection } | undefined;
let responders: Array<{ unsubscribe(): void }> = [];

async function stop(): Promise<void> {
  for (const r of responders) r.unsubscribe();
  responders = [];
  if (!running) return;
  await running.agent.stop();
  await running.nc.drain();
  running = undefined;
}

async function start(s: Start): Promise<{ inboxPrefix: string; refused: boolean }> {
  await stop();
  const name = `mesh-agent-${s.node}`;
  const nc = await connectNats(s.url, s.credentials ? { ...natsIdentity({ MESH_NATS_CREDENTIALS: s.credentials }), name } : { name });
  const store = await openStore(nc);
  const agent = await startAgent({ store, node: s.node, bindingsRoot: s.bindingsRoot, log: createLogger("bench-agent", { level: "error" }) });
  running = { agent, nc };
  const inboxPrefix = (nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix || "_INBOX";
  return { inboxPrefix, refused: await refusesOutside(nc) };
}

serveParent(async (op, body) => {
  switch (op) {
    case "start":
      return start(body as unknown as Start);
    case "floor": {
      for (const r of responders) r.unsubscribe();
      const nc = running!.nc;
      // The floor's message names the subject to answer on (rotation-rounds.ts's Floor).
      responders = Array.from({ length: body.count as number }, () =>
        nc.subscribe(body.subject as string, { callback: (_e, m) => nc.publish(m.string(), "ok") }),
      );
      await nc.flush();
      return undefined;
    }
    case "profile":
      return toggleProfile();
    case "stop":
      return stop();
    default:
      throw new Error(`unknown op ${op}`);
  }
});
