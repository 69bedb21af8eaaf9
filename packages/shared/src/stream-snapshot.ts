/**
 * A stream's snapshot and its restore, through JetStream's own API (`$JS.API.STREAM.SNAPSHOT`
 * and `$JS.API.STREAM.RESTORE`, which nats-server 2.9 serves and `@nats-io/jetstream` has no
 * helper for). A snapshot is the server's archive of the stream: its messages with their
 * sequences, and its consumers with their state (delivered and acknowledged floors), which a
 * copy made by reading the messages would lose. It is taken while the stream is written to.
 *
 * Snapshot: the request names an inbox; the server answers with the stream's configuration
 * and state, then sends the archive to the inbox in chunks, each with a reply subject the
 * client answers (the server's flow control), and an empty message at the end. Restore: the
 * request carries the configuration and state and is answered with a subject; every chunk is
 * sent there as a request the server acknowledges, and an empty one ends it, answered with
 * the restored stream's info (or the server's error).
 */
import { createInbox, type NatsConnection } from "@nats-io/transport-node";
import { JetStreamApiError, type ApiError, type StreamConfig, type StreamInfo, type StreamState } from "@nats-io/jetstream";
import { ErrorCodes, MeshError } from "./errors.js";
import { subjects } from "./subjects.js";

/** A stream as its snapshot holds it. */
export interface StreamSnapshot {
  config: StreamConfig;
  state: StreamState;
  /** The server's archive (a tar of the stream's store, s2-compressed). */
  data: Uint8Array;
}

/** The chunks asked of the server: its own default. */
const CHUNK_BYTES = 128 * 1024;
/** How long a snapshot or restore may go without hearing from the server before it fails. */
const QUIET_MS = 30_000;

/** The snapshot of `stream`; `progress` hears the bytes received so far. */
export async function snapshotStream(nc: NatsConnection, stream: string, progress?: (bytes: number) => void): Promise<StreamSnapshot> {
  // Under the connection's own inbox prefix: an identity may subscribe under its own alone (inboxes.ts).
  const inbox = createInbox((nc as unknown as { options?: { inboxPrefix?: string } }).options?.inboxPrefix);
  const sub = nc.subscribe(inbox);
  try {
    const reply = (
      await nc.request(subjects.streamSnapshot(stream), JSON.stringify({ deliver_subject: inbox, chunk_size: CHUNK_BYTES, jsck: false }), {
        timeout: QUIET_MS,
      })
    ).json<{ config?: StreamConfig; state?: StreamState; error?: ApiError }>();
    if (reply.error) throw new JetStreamApiError(reply.error);
    if (!reply.config || !reply.state) throw new MeshError(ErrorCodes.Internal, `the server's snapshot of ${stream} came without its configuration`);
    const chunks: Uint8Array[] = [];
    let bytes = 0;
    const iter = sub[Symbol.asyncIterator]();
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const quiet = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new MeshError(ErrorCodes.Unavailable, `the server sent nothing of ${stream}'s snapshot for ${QUIET_MS / 1000} s`, { retryable: true })),
          QUIET_MS,
        );
      });
      const next = await Promise.race([iter.next(), quiet]).finally(() => clearTimeout(timer));
      if (next.done) throw new MeshError(ErrorCodes.Unavailable, `the connection closed during ${stream}'s snapshot`, { retryable: true });
      const m = next.value;
      if (m.data.length === 0) break;
      chunks.push(m.data);
      bytes += m.data.length;
      progress?.(bytes);
      if (m.reply) m.respond();
    }
    return { config: reply.config, state: reply.state, data: Buffer.concat(chunks) };
  } finally {
    sub.unsubscribe();
  }
}

/** Restores `snap` as a new stream (the server refuses one whose name is in use); `progress` hears the bytes sent so far. */
export async function restoreStream(nc: NatsConnection, snap: StreamSnapshot, progress?: (bytes: number) => void): Promise<StreamInfo> {
  const name = snap.config.name;
  const started = (await nc.request(subjects.streamRestore(name), JSON.stringify({ config: snap.config, state: snap.state }), { timeout: QUIET_MS })).json<{
    deliver_subject?: string;
    error?: ApiError;
  }>();
  if (started.error) throw new JetStreamApiError(started.error);
  if (!started.deliver_subject) throw new MeshError(ErrorCodes.Internal, `the server named no subject to restore ${name} to`);
  for (let at = 0; at < snap.data.length; at += CHUNK_BYTES) {
    await nc.request(started.deliver_subject, snap.data.subarray(at, at + CHUNK_BYTES), { timeout: QUIET_MS });
    progress?.(Math.min(at + CHUNK_BYTES, snap.data.length));
  }
  const done = (await nc.request(started.deliver_subject, new Uint8Array(0), { timeout: 5 * QUIET_MS })).json<StreamInfo & { error?: ApiError }>();
  if (done.error) throw new JetStreamApiError(done.error);
  return done;
}
