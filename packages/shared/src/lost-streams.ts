/**
 * Telling a server that lost the mesh's streams from a stream that is missing for a moment.
 *
 * nats-server 2.9.10, after a reload (SIGHUP) that read its configuration file half-written and
 * then one that read it whole, answers JetStream requests again, but every stream of the account
 * is "stream not found" until the server restarts; the store on disk is whole, and a restart
 * recovers it (test/nats-config-reload.test.ts shows the server's side). A publish to a stream's
 * subject then finds no stream ("jetstream is not enabled"). On a cluster a stream is also missing
 * for moments, while it is placed or elects a leader, and that passes by itself: so only a server
 * that is not part of a cluster is said to have lost its streams.
 */
import { JetStreamApiError, type JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { ErrorCodes, MeshError } from "./errors.js";

/** JetStream's code for "stream not found". */
const STREAM_NOT_FOUND = 10059;

/** What the operator is told: what happened, that nothing is lost, and what to run. */
export function streamsLostMessage(server: string, stream: string): string {
  return (
    `the NATS server at ${server} lost the mesh's streams while it runs (${stream}: stream not found, though JetStream answers). ` +
    `nats-server 2.9.10 does this after a reload (SIGHUP) that read its configuration file half-written; its store on disk is whole. ` +
    `Restart nats-server (systemctl restart nats-server, or stop and start it) and the mesh carries on where it was. ` +
    `Before a reload, write the new configuration beside the old file and rename it over (deploy/README.md)`
  );
}

/**
 * Whether stream `stream`, which the mesh made, is lost on the server `nc` is connected to (see
 * the file's comment): a `StreamsLost` MeshError saying what to do, or undefined when it is there,
 * when JetStream itself does not answer (a gap of its own), or when the server is part of a cluster.
 */
export async function lostStream(nc: NatsConnection, jsm: JetStreamManager, stream: string): Promise<MeshError | undefined> {
  if (nc.info?.cluster) return undefined;
  try {
    await jsm.streams.info(stream);
    return undefined;
  } catch (e) {
    if (!(e instanceof JetStreamApiError && e.code === STREAM_NOT_FOUND)) return undefined;
    return new MeshError(ErrorCodes.StreamsLost, streamsLostMessage(nc.getServer(), stream), { cause: e });
  }
}
