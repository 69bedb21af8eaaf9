/**
 * What `meshctl console` knows of the mesh: the last value of every record it shows, by bucket
 * and key, as plain data. `mesh-credentials` is not among them, by design: the console never
 * reads that bucket, so no value of it can reach a page.
 */
import { Grant, ModuleDoc, ModuleStatus, NodeRecord, ProviderDoc, ReachabilityRecord, Rotation, Verification } from "@mesh/shared";

/** The buckets the console reads (by the store's names for them), with the schema of their values. */
export const CONSOLE_BUCKETS = {
  manifests: ModuleDoc,
  modules: ModuleStatus,
  grants: Grant,
  providers: ProviderDoc,
  nodes: NodeRecord,
  verifications: Verification,
  reachability: ReachabilityRecord,
  rotations: Rotation,
} as const;

export type ConsoleBucket = keyof typeof CONSOLE_BUCKETS;

/** The value type of each bucket the console reads. */
export interface ConsoleValues {
  manifests: ModuleDoc;
  modules: ModuleStatus;
  grants: Grant;
  providers: ProviderDoc;
  nodes: NodeRecord;
  verifications: Verification;
  reachability: ReachabilityRecord;
  rotations: Rotation;
}

/** One record as the console keeps it: its value and KV revision. */
export interface Held<T> {
  value: T;
  revision: number;
}

/** The console's picture: per bucket, the records by KV key. */
export type ConsoleSnapshot = { [B in ConsoleBucket]: Map<string, Held<ConsoleValues[B]>> };

/** A snapshot with nothing in it. */
export function emptySnapshot(): ConsoleSnapshot {
  return {
    manifests: new Map(),
    modules: new Map(),
    grants: new Map(),
    providers: new Map(),
    nodes: new Map(),
    verifications: new Map(),
    reachability: new Map(),
    rotations: new Map(),
  };
}

/**
 * Applies one change seen on `bucket` (a value, or undefined for a delete) at `revision`; a
 * change not newer than the record held is ignored, so a listing followed by the changes a
 * watch saw meanwhile (some of which the listing already has) ends where the bucket is.
 * Returns whether anything changed.
 */
export function applyChange<B extends ConsoleBucket>(
  snap: ConsoleSnapshot,
  bucket: B,
  key: string,
  value: ConsoleValues[B] | undefined,
  revision: number,
): boolean {
  const records = snap[bucket] as Map<string, Held<unknown>>;
  const held = records.get(key);
  if (held && held.revision >= revision) return false;
  if (value === undefined) return records.delete(key);
  records.set(key, { value, revision });
  return true;
}

/** The values of one bucket, in key order. */
export function valuesOf<B extends ConsoleBucket>(snap: ConsoleSnapshot, bucket: B): Array<ConsoleValues[B]> {
  return [...(snap[bucket] as Map<string, Held<ConsoleValues[B]>>).entries()].sort(([a], [b]) => a.localeCompare(b)).map(([, h]) => h.value);
}
