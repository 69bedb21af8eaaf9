/**
 * Where rotations reach their holders (docs/design.md, "Rotation protocol"): a JetStream stream per
 * holder identity, a durable consumer per holder and grant in it, and the broadcast of a
 * rotation published once into each stream that has holders of the grant. A holder confirms by
 * acknowledging the broadcast on its own consumer; the rotator learns of it from JetStream.
 *
 * Why a stream per identity and not one stream for every holder: an ack is a publish to
 * `$JS.ACK.<stream>.<consumer>.…`, and a subject permission can only name whole tokens. With
 * one stream, an identity allowed to ack on its own consumers (whose names are made when a
 * holder registers, long after its identity was issued) would need `$JS.ACK.<stream>.*.>`,
 * and could ack on anyone's. With a stream per identity the stream's token is the identity's
 * own and the consumer's is `*`: the server itself refuses an ack on another identity's
 * consumer. The identities are:
 * - a node's agent, which holds for every part on its node: stream `MESH_HOLD_N_<node>`;
 * - a part of a module on a node, which its SDK instances share: stream
 *   `MESH_HOLD_P_<module>_<node>_<part>`. Instances of one part share the part's identity, so
 *   the server vouches that the part confirmed, not which of its instances did: an instance
 *   could ack on a sibling's consumer (it holds the same credentials under the same identity).
 *
 * A rotation of a grant is therefore one message per holder stream (one for all the instances
 * of a part, one per agent-held part), not one per holder. Pure: names and configurations.
 */
import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  RetentionPolicy,
  StorageType,
  type ConsumerConfig,
  type ConsumerInfo,
  type StreamConfig,
} from "@nats-io/jetstream";
import { parseHolderId } from "./schemas/rotation.js";
import { isValidName } from "./names.js";
import { parseGrantId, subjects } from "./subjects.js";

/** Prefix of every holder stream's name. */
export const HOLDER_STREAM_PREFIX = "MESH_HOLD_";

/** One holder's place in JetStream for one grant: its stream, its consumer there, and the subject the grant's broadcasts take in that stream. */
export interface HolderEndpoint {
  stream: string;
  consumer: string;
  subject: string;
  /** What its stream stores: every broadcast to its identity. */
  streamSubjects: string;
  /** True for an SDK instance (`<node>/<part>/<instance>`), false for a node's agent holding for a part. */
  sdk: boolean;
}

/**
 * What names one broadcast of a rotation: the stream it is published into and its subject there
 * (a stream keeps one message per subject). The rotation record's broadcasts, the broadcaster's
 * targets and the ack tracker all key them by this.
 */
export function broadcastKey(stream: string, subject: string): string {
  return `${stream} ${subject}`;
}

/** The stream of the agent of `node`. */
export function agentHolderStream(node: string): string {
  return `${HOLDER_STREAM_PREFIX}N_${checkedName(node)}`;
}

/** The stream of part `part` of `module` on `node`, shared by its SDK instances. */
export function partHolderStream(module: string, node: string, part: string): string {
  return `${HOLDER_STREAM_PREFIX}P_${checkedName(module)}_${checkedName(node)}_${checkedName(part)}`;
}

/** Endpoints worked out, by `<grant> <holder>`: the rotator asks for every holder's on every rotation. */
const endpoints = new Map<string, Readonly<HolderEndpoint> | undefined>();
/** How many {@link endpoints} are kept (a few MB at most); the oldest go first. */
const ENDPOINTS_KEPT = 50_000;

/**
 * Where holder `holder` (`<node>/<part>` or `<node>/<part>/<instance>`) of grant `grant`
 * (`<module>/<requirement>`) is told of its rotations; undefined for a malformed id.
 * Names use `_` between names, which no name contains, so two holders never share a consumer.
 * Worked out once per pair and kept (frozen: callers share it), since the names are checked on
 * the way and a rotation of thousands of holders asks for each several times.
 */
export function holderEndpoint(grant: string, holder: string): Readonly<HolderEndpoint> | undefined {
  const id = `${grant} ${holder}`;
  const kept = endpoints.get(id);
  if (kept !== undefined || endpoints.has(id)) return kept;
  const e = endpointOf(grant, holder);
  if (endpoints.size >= ENDPOINTS_KEPT) endpoints.delete(endpoints.keys().next().value!);
  endpoints.set(id, e && Object.freeze(e));
  return e;
}

function endpointOf(grant: string, holder: string): HolderEndpoint | undefined {
  const g = parseGrantId(grant);
  const h = parseHolderId(holder);
  if (!g || !h || !isValidName(h.node) || !isValidName(h.part) || (h.instance !== undefined && !isValidName(h.instance))) return undefined;
  if (h.instance === undefined) {
    return {
      stream: agentHolderStream(h.node),
      consumer: `${g.module}_${g.requirement}_${h.part}`,
      subject: subjects.agentRotation(h.node, g.module, g.requirement, h.part),
      streamSubjects: subjects.agentRotationsAll(h.node),
      sdk: false,
    };
  }
  return {
    stream: partHolderStream(g.module, h.node, h.part),
    consumer: `${g.requirement}_${h.instance}`,
    subject: subjects.partRotation(g.module, h.node, h.part, g.requirement),
    streamSubjects: subjects.partRotationsAll(g.module, h.node, h.part),
    sdk: true,
  };
}

/**
 * The stream and consumer a holder of rotation record `grant` acknowledged on: as the record
 * names them (`s`, `k`: older records always, newer ones only where they are not the holder's
 * own endpoint), else its endpoint's. Undefined for a holder that has not acknowledged (no `q`).
 */
export function holderAckedOn(grant: string, holder: string, p: { s?: string; k?: string; q?: number }): { stream: string; consumer: string } | undefined {
  if (p.q === undefined) return undefined;
  const e = p.s === undefined || p.k === undefined ? holderEndpoint(grant, holder) : undefined;
  const stream = p.s ?? e?.stream;
  const consumer = p.k ?? e?.consumer;
  return stream !== undefined && consumer !== undefined ? { stream, consumer } : undefined;
}

/** The configuration of a holder stream: the last broadcast of each grant kept, nothing older (a rotation supersedes the one before). */
export function holderStreamConfig(endpoint: HolderEndpoint, replicas: number): Partial<StreamConfig> & { name: string } {
  return {
    name: endpoint.stream,
    subjects: [endpoint.streamSubjects],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    num_replicas: replicas,
    max_msgs_per_subject: 1,
    discard: DiscardPolicy.Old,
    // A broadcast is a few hundred bytes: a holder stream never needs more.
    max_msg_size: 64 * 1024,
    duplicate_window: 120_000_000_000,
  };
}

/**
 * How long the server waits for a holder's ack before it delivers the broadcast again. Holders
 * send progress acks while they apply, so this is how soon a holder that died (or missed the
 * message) is given it again. On 2.9.10 a `backoff` needs a finite `max_deliver` (the server
 * refuses `max_deliver: -1` with one: "max deliver is required to be > length of backoff
 * values"), and a finite one could strand a holder that was away: so a fixed `ack_wait`, with
 * no limit on deliveries, and holders that fail to apply ask for a later redelivery themselves (`nak` with a delay).
 */
export const HOLDER_ACK_WAIT_MS = 30_000;

/** An SDK instance's consumer goes by itself after this long with no pull (its registration is long stale by then): none is left behind by an instance that died. */
export const SDK_CONSUMER_INACTIVE_MS = 15 * 60_000;

/**
 * The configuration of a holder's consumer. Explicit ack (the confirmation), the grant's last
 * broadcast first (a consumer made after the broadcast still gets it), every ack sampled (the
 * server publishes an ack metric the rotator counts). On one server: its state in memory (no
 * state file written per ack); a consumer lost with a restart is made again by the rotator, and
 * its holder is delivered the broadcast again, which it acknowledges at once if it has applied
 * it. On a cluster (`replicas` > 1): as many replicas as its stream, on file. An R1 consumer
 * would be cheaper (thousands of holders are thousands of Raft groups otherwise), but one on a
 * server that is down, not lost, can be neither reached nor made again elsewhere, and a
 * rotation waited for it until the server came back (seen in the cluster tests).
 */
export function holderConsumerConfig(endpoint: HolderEndpoint, replicas = 1): Partial<ConsumerConfig> & { durable_name: string } {
  return {
    durable_name: endpoint.consumer,
    filter_subject: endpoint.subject,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.LastPerSubject,
    ack_wait: HOLDER_ACK_WAIT_MS * 1_000_000,
    max_deliver: -1,
    max_ack_pending: 1,
    sample_freq: "100%",
    num_replicas: replicas,
    ...(replicas === 1 ? { mem_storage: true } : {}),
    ...(endpoint.sdk ? { inactive_threshold: SDK_CONSUMER_INACTIVE_MS * 1_000_000 } : {}),
  };
}

/**
 * Why consumer `info` may not be counted as holder `endpoint`'s confirmation, or undefined when
 * its configuration is the one the rotator made: a consumer whose ack policy, filter or
 * delivery was changed could ack by itself, or for messages that are not this grant's.
 */
export function consumerMismatch(info: Pick<ConsumerInfo, "config" | "stream_name">, endpoint: HolderEndpoint): string | undefined {
  const c = info.config;
  if (info.stream_name !== endpoint.stream) return `it is on stream ${info.stream_name}, not ${endpoint.stream}`;
  if (c.ack_policy !== AckPolicy.Explicit) return `its ack policy is ${c.ack_policy}, not explicit`;
  if (c.filter_subject !== endpoint.subject) return `it filters ${c.filter_subject ?? "nothing"}, not ${endpoint.subject}`;
  if (c.max_deliver !== undefined && c.max_deliver !== -1) return `it stops redelivering after ${c.max_deliver} deliveries`;
  return undefined;
}

/**
 * What a holder identity may do on its own holder stream `stream`: look at, pull from and
 * acknowledge on its consumers (any of them: they are all its own), and list them (an agent
 * finds the ones made for it). Nothing that makes, changes or deletes one.
 */
export function holderStreamUse(stream: string): string[] {
  return [`$JS.API.CONSUMER.LIST.${stream}`, `$JS.API.CONSUMER.INFO.${stream}.*`, `$JS.API.CONSUMER.MSG.NEXT.${stream}.*`, `$JS.ACK.${stream}.>`];
}

function checkedName(name: string): string {
  if (!isValidName(name)) throw new Error(`${JSON.stringify(name)} is not a valid name for a holder stream`);
  return name;
}
