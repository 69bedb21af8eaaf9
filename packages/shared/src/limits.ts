/**
 * Bounds on what comes into the mesh from documents, requests and the command line: one place
 * for every number, each listed in docs/security.md ("Limits") and tested at its value and one
 * past it. A value past a limit is refused with a message that names the limit; nothing is
 * truncated silently.
 */
import type { Buckets } from "./subjects.js";

/**
 * The longest delay a Node.js timer keeps: a `setTimeout` past 2^31−1 ms (about 24.8 days)
 * fires at once. Every duration that becomes a timer (`verify.every`, a rotation's deadline,
 * the services' intervals, meshctl's deadlines) is refused past it.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** The longest `rotate: { every }`: it is compared with timestamps, not set as a timer; ten years. */
export const MAX_ROTATE_EVERY_MS = 3_650 * 86_400_000;

export const Limits = {
  /** A manifest file (YAML or JSON), in bytes of UTF-8. */
  manifestBytes: 512 * 1024,
  /**
   * One apply request, as the JSON meshctl sends: under NATS's default `max_payload` (1 MiB),
   * which would refuse a larger message with a bare "maximum payload exceeded".
   */
  applyRequestBytes: 900 * 1024,
  /** Documents in one file, and in one apply request. */
  documents: 256,
  /**
   * Alias expansions in one YAML document, as the yaml library counts them (`maxAliasCount`: per
   * anchor, its resolutions times the aliases inside it): more is the shape of an alias bomb
   * ("billion laughs"), refused before it is expanded.
   */
  yamlAliases: 100,
  /** Parts of one module. */
  parts: 64,
  /** Requirements of one module. */
  requirements: 128,
  /** Parts named by one requirement. */
  requirementParts: 64,
  /** Kinds one provider serves. */
  serves: 16,
  /** Grants one provider needs. */
  needs: 32,
  /** Options of one requirement or provider. */
  options: 32,
  /** Variables one requirement maps to its binding's keys (`env`). */
  env: 32,
  /** Items of one list option of a requirement (a `nats.user`'s subjects…). */
  optionItems: 256,
  /** One option value, and each item of a list option, in characters. */
  optionChars: 4_096,
  /** A provider's endpoint URL, in characters. */
  endpointChars: 2_048,
  /** A path (an admin `passwordFile`), in characters: Linux's PATH_MAX. */
  pathChars: 4_096,
  /** A provider's `tls.ca` bundle (PEM), in characters: a few dozen certificates. */
  caBundleChars: 65_536,
  /**
   * Requests one service instance works on at once, per subject it serves (`serveJson`): one
   * more is answered at once with a retryable `Unavailable`. Above the thousands of holders a
   * rotation fetches for at once, far below what exhausts a service's memory.
   */
  requestsInFlight: 8_192,
} as const;

/** One of the mesh's KV buckets as it is made, and as an existing one is brought up to (bucket-limits.ts). */
export interface BucketLimits {
  /** Revisions kept per key (the stream's `max_msgs_per_subject`). */
  history: number;
  /**
   * The bucket's stream, every revision and delete marker counted (`max_bytes`): the server's
   * limit. The mesh's writers stop at {@link STORE_FILL_SHARE} of it.
   */
  maxBytes: number;
  /** One value (the stream's `max_msg_size`, which counts the value alone). */
  maxValueSize: number;
  /** How long a revision is kept (`max_age`), for a bucket whose records are refreshed while they matter. */
  ttlMs?: number;
  /** What fills it, for the message of a full bucket. */
  holds: string;
}

/**
 * How full the mesh fills a bucket: its writers refuse a write (StoreFull) that would take the
 * bucket past this share of its `max_bytes`, and a bucket made before it had limits gets one
 * only if what it holds is below that. The rest is headroom, because nats-server 2.9.10 does
 * not refuse at `max_bytes` reliably: it checks a write's value and headers against the limit
 * but stores its subject and framing too, and then drops the stream's oldest messages to get
 * back under it, whatever the discard policy (seen here: a bucket at its limit took every
 * further write and lost its first key; nats-io/nats-server#4771, fixed upstream by #4772 in
 * November 2023). The
 * headroom is far more than what every writer's one-second-old view of the size can miss.
 */
export const STORE_FILL_SHARE = 0.8;

const KiB = 1024;
const MiB = 1024 * KiB;
const GiB = 1024 * MiB;

/**
 * The scale the store is sized for: ten times the benchmarks' (bench/: 1,000 grants verified,
 * 1,000 identities issued) and twice their 5,000 SDK holders of one grant, with two years of
 * monthly rotations. The sizes below are that many records, of the size measured for a
 * typical record with about 70 bytes of subject and stream overhead each, at every revision
 * the history keeps, and then at least doubled within {@link STORE_FILL_SHARE} of each
 * `max_bytes` (bucket-limits.test.ts checks it); a value's limit is what one record can be.
 * Together about 4 GiB of disk at most.
 */
export const STORE_SCALE = { grants: 10_000, holders: 10_000, modules: 2_000, nodes: 1_000, providers: 256, generations: 24 } as const;

/**
 * The mesh's KV buckets (subjects.ts `Buckets`): history, size and value limits. A value's limit
 * of 1 MiB is NATS's default `max_payload`, which no write can pass anyway: for records that
 * copy what a document says (options, messages), bounded by the 900 KiB of an apply.
 */
export const BUCKET_LIMITS: Record<keyof typeof Buckets, BucketLimits> = {
  // 2,000 modules × 5 revisions × a document of about 8 KiB = 80 MB.
  manifests: { history: 5, maxBytes: 256 * MiB, maxValueSize: MiB, holds: "the modules' manifests, 5 revisions each" },
  // 256 providers × 5 × about 4 KiB = 5 MB; one document may be as large as an apply.
  providers: { history: 5, maxBytes: 64 * MiB, maxValueSize: MiB, holds: "the providers' documents, 5 revisions each" },
  // 16 revisions kept for diagnosis, as for credentials.
  // 10,000 grants × 16 revisions × about 2.5 KiB (measured: 1.4 KiB with 4 conditions and 2
  // holders, more with repairs and many targets) = 400 MB; a deleted one keeps its history.
  grants: { history: 16, maxBytes: GiB, maxValueSize: MiB, holds: "every requirement's grant, 16 revisions each, and the history of removed ones" },
  // Every generation is kept: 10,000 grants × 24 generations × (a write-ahead record of 0.4 KiB
  // and the record with its bindings, 2.7 KiB for a nats.user's .creds, as measured) = 750 MB.
  credentials: {
    history: 16,
    maxBytes: 2 * GiB,
    maxValueSize: 64 * KiB,
    holds: "the last generations of every credential (CREDENTIAL_HISTORY, 5 by default; older ones are purged at each commit)",
  },
  // 2,000 modules × 5 × about 0.3 KiB = 3 MB; a message may list every requirement.
  modules: { history: 5, maxBytes: 32 * MiB, maxValueSize: 64 * KiB, holds: "each module's state, 5 revisions each" },
  // 1,000 nodes × 5 × at most 4.3 KiB (a bindings root may be a 4 KiB path) = 21 MB.
  nodes: { history: 5, maxBytes: 32 * MiB, maxValueSize: 16 * KiB, holds: "each node's agent record, 5 revisions each" },
  // 10,000 grants × 5 × about 2 KiB (the verifier's check and an agent's probe per target) = 100 MB.
  verifications: { history: 5, maxBytes: 256 * MiB, maxValueSize: 256 * KiB, holds: "the verifier's record of each grant, 5 revisions each" },
  // 1,000 nodes × 16 providers each × 5 × about 0.3 KiB = 24 MB.
  reachability: { history: 5, maxBytes: 64 * MiB, maxValueSize: 16 * KiB, holds: "whether each node reaches each provider, 5 revisions each" },
  // 10,000 grants × 5 × about 2 KiB = 100 MB, and a record grows by about 60 bytes per holder:
  // one of 10,000 holders is 590 KiB (1 MiB, the most a value can be, is about 17,000 holders).
  rotations: { history: 5, maxBytes: 256 * MiB, maxValueSize: MiB, holds: "the latest rotation of each grant, 5 revisions each" },
  // 10,000 live instances × 5 × about 0.35 KiB = 18 MB. Every instance is a key of its own, and
  // one that stopped left its revisions and a delete marker for good: the hour's age limit
  // (a live one refreshes every 30 s, and is stale after 90 s) keeps that to an hour of churn.
  holders: { history: 5, maxBytes: 64 * MiB, maxValueSize: 4 * KiB, ttlMs: 3_600_000, holds: "the SDK instances' registrations of the last hour" },
  // 10,000 grants × 2 parts on nodes × 5 × about 0.6 KiB (one with a hook's failure of a few
  // hundred bytes; one that only records a delivery is 0.1 KiB) = 58 MB; a value is bounded by
  // the two messages it may carry (RECEIPT_MESSAGE_MAX each).
  receipts: { history: 5, maxBytes: 256 * MiB, maxValueSize: 16 * KiB, holds: "what each node's agent delivered to each part on its node, 5 revisions each" },
  // A heartbeat of about 0.2 KiB per live instance, renewed each second; the minute's age limit
  // drops those of instances that died without leaving.
  instances: { history: 1, maxBytes: 8 * MiB, maxValueSize: 4 * KiB, ttlMs: 60_000, holds: "the live service instances' heartbeats of the last minute" },
};

/**
 * The audit trail's stream (`MESH_AUDIT`, audit.ts): records older than `maxAgeMs` age out
 * (the operator sets it: `meshctl up --audit-retention`), and past `maxBytes` the oldest go
 * first, so the trail never refuses for being full. A record is about 0.5 KiB with its subject
 * and framing: 2 GiB is about 4 million records, a year of 10,000 holders fetching a monthly
 * rotation of each of 30 grants, besides the operators' requests.
 */
export const AUDIT_LIMITS = { maxAgeMs: 90 * 24 * 3_600_000, maxBytes: 2 * GiB, maxRecordSize: 16 * KiB } as const;

/**
 * The nats.user adapter's records on its provider's server (`mesh-nats-identities`, one
 * revision per key): a record per generation whose JWT has not expired (about 1.5 KiB) and an
 * index entry per revoked key (0.3 KiB). 10,000 grants × 4 live generations × 1.8 KiB = 72 MB.
 */
export const IDENTITY_RECORDS_LIMITS: BucketLimits = {
  history: 1,
  maxBytes: 256 * MiB,
  maxValueSize: 16 * KiB,
  holds: "a record of every nats.user identity whose JWT has not expired, and of every revoked key",
};

/**
 * How many generations of each credential the store keeps (`MESH_CREDENTIAL_HISTORY` of the
 * rotator): the current one and the ones just before it, which the verifier tries to tell a
 * diverged credential (an older generation still logs in) from a rejected one. Older ones are
 * purged at each rotation's commit; never those of a grant a provider needs (its server may
 * have been initialised with one of them: its admin password).
 */
export const CREDENTIAL_HISTORY = 5;

/** `n` bytes in the largest unit that keeps it whole or short: `512 KiB`, `1.5 MiB`. */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} bytes`;
  if (n < 1024 * 1024) return `${Math.round((n / 1024) * 10) / 10} KiB`;
  if (n < 1024 * 1024 * 1024) return `${Math.round((n / 1024 / 1024) * 10) / 10} MiB`;
  return `${Math.round((n / 1024 / 1024 / 1024) * 10) / 10} GiB`;
}
