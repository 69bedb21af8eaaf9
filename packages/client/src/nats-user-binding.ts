/**
 * Connecting as a `nats.user` grant, from its binding directory as the agent writes it
 * (`uri`, `creds`, `inboxPrefix`): the options a NATS client needs. The one an application
 * must not leave out is `inboxPrefix`: its identity may subscribe to no other inbox, so without
 * it its requests get no reply and its JetStream consumers no message.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { ConnectionOptions } from "@nats-io/transport-node";
import { natsIdentity, natsTls } from "@mesh/shared/runtime";

/**
 * `servers`, the credentials (read again at every reconnect, so a rotated generation is taken)
 * and `inboxPrefix` of the `nats.user` binding at `dir`; throws a MeshError naming the file it
 * could not read.
 */
export function natsUserConnectOptions(dir: string): Partial<ConnectionOptions> {
  const identity = natsIdentity({ MESH_NATS_CREDENTIALS: dir });
  const uri = readFileSync(join(dir, "uri"), "utf8").trim();
  // A binding that carries the authority's bundle (ca.crt): the server is verified against it.
  return { servers: uri.split(","), ...identity, ...natsTls({ MESH_NATS_CREDENTIALS: dir }) };
}
