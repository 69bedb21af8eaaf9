/**
 * Reading what an event announced, on a cluster. A KV get is a direct get, which any replica
 * of the bucket answers, followers included, and a follower may not have applied the write
 * the event came from yet (nats-server serves direct gets from followers by design; 2.9.10
 * predates even nats-io/nats-server#4171, which holds them back after a restart until caught
 * up). A reconciler that handled "look at key k" by reading k from such a follower would see
 * the old value, do nothing, and acknowledge: the change lost for good. Seen on a three-server
 * cluster here: receipts of deliveries that the provisioner never folded into their grants.
 *
 * So the consumer of a bucket's changes notes each key's revision as it hears of it
 * ({@link noteRevision}), and a read of that key waits until a replica answers with at least
 * that revision ({@link revisionFloor}, used by readJson). Revisions only grow per key, so a
 * read at or past the floor is as new as the event, and the floor is then dropped. On one
 * server every read meets its floor at once. No permission changes: the reads are the same
 * direct gets, by key.
 */

/**
 * Floors by bucket handle (the store's KV object): one bucket of one store, never the bucket of
 * the same name on another server or a bucket made again, which start their revisions afresh
 * (a process, a test run above all, may open several).
 */
const floorsOf = new WeakMap<object, Map<string, number>>();
/** Floors kept at most per bucket; past it the oldest go (a read then is only as fresh as a direct get). */
const MAX_FLOORS = 100_000;

/** Records that `key` of bucket `bucket` (a store's KV handle) has reached revision `seq`. */
export function noteRevision(bucket: object, key: string, seq: number): void {
  let floors = floorsOf.get(bucket);
  if (!floors) floorsOf.set(bucket, (floors = new Map()));
  if ((floors.get(key) ?? 0) >= seq) return;
  floors.delete(key);
  floors.set(key, seq);
  if (floors.size > MAX_FLOORS) floors.delete(floors.keys().next().value!);
}

/** The revision a read of `key` must reach to be as new as what this process has heard of (0: any). */
export function revisionFloor(bucket: object, key: string): number {
  return floorsOf.get(bucket)?.get(key) ?? 0;
}

/** Forgets the floor of `key` once a read met it (a later event sets a new one). */
export function metRevision(bucket: object, key: string, revision: number): void {
  const floors = floorsOf.get(bucket);
  if (floors && (floors.get(key) ?? 0) <= revision) floors.delete(key);
}
