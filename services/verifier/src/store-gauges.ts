/**
 * The store's gauges (grants by kind, provider and condition; modules by state; holders still to
 * confirm; the oldest current generation of each kind; each agent's last report), reported by
 * one verifier only: the one that owns {@link STORE_GAUGES_KEY} in the verifiers' membership, so
 * that two verifiers do not count a grant twice. Every verifier keeps a small summary of each
 * grant from the watch it has anyway; the one that owns the gauges reads the modules, the nodes
 * and the running rotations every {@link STORE_GAUGES_REFRESH_MS}, and a scrape reads that.
 */
import {
  ModuleStatus,
  NodeRecord,
  Rotation,
  errorMessage,
  isHolderPending,
  isRotationRunning,
  storeGauges,
  summarizeGrant,
  type GrantSummary,
} from "@mesh/shared";
import { listJson, observeStore, readJsonIfValid, type StoreGauges, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";

/** The membership key whose owner reports the store's gauges. */
export const STORE_GAUGES_KEY = "store-gauges";
/** How often the owner reads the store for them. */
export const STORE_GAUGES_REFRESH_MS = 15_000;

export interface StoreGaugeSource {
  /** A grant's record as the watch saw it (undefined: deleted). */
  note(key: string, record: unknown): void;
  /** Reads the store now when this instance owns the gauges (what the timer does). */
  refresh(): Promise<void>;
  /** The membership changed: an instance that gained the gauges reads the store at once rather than at its next tick. */
  membershipChanged(): void;
  /** What a scrape reports: the last reading, while this instance owns the gauges. */
  read(): StoreGauges | undefined;
  stop(): void;
}

export function startStoreGauges(opts: { store: Store; log: Logger; owns: (key: string) => boolean }): StoreGaugeSource {
  const { store, log, owns } = opts;
  const grants = new Map<string, GrantSummary>();
  // The last reading is kept while another instance owns the gauges: when they come back (a
  // membership that flapped under load), a scrape reads it until the refresh on gaining them is in.
  let last: StoreGauges | undefined;
  let failing = false;
  let owned = false;
  const refresh = async () => {
    owned = owns(STORE_GAUGES_KEY);
    if (!owned) return;
    try {
      const [modules, nodes] = await Promise.all([
        listJson(store.kv.modules, ModuleStatus, ">", { skipInvalid: true }),
        listJson(store.kv.nodes, NodeRecord, ">", { skipInvalid: true }),
      ]);
      const pending: Array<{ kind: string; holders: number }> = [];
      for (const [key, g] of grants) {
        if (!g.rotating) continue;
        const r = (await readJsonIfValid(store.kv.rotations, key, Rotation))?.value;
        if (isRotationRunning(r)) pending.push({ kind: g.kind, holders: Object.values(r.holders).filter(isHolderPending).length });
      }
      last = storeGauges({ grants: grants.values(), modules: modules.map((m) => m.value), nodes: nodes.map((n) => n.value), pending, now: Date.now() });
      if (failing) log.info("the store's gauges are read again");
      failing = false;
    } catch (e) {
      // The last reading stays: a gauge that goes missing reads as a metric that vanished.
      if (!failing) log.warn({ err: errorMessage(e) }, "could not read the store for its gauges; trying again");
      failing = true;
    }
  };
  const timer = setInterval(() => void refresh(), STORE_GAUGES_REFRESH_MS);
  timer.unref();
  // A stopping verifier reports none: its reading no longer follows the store.
  let stopped = false;
  const current = () => (!stopped && owns(STORE_GAUGES_KEY) ? last : undefined);
  observeStore(current);
  return {
    note(key, record) {
      const s = record === undefined ? undefined : summarizeGrant(record);
      if (s) grants.set(key, s);
      else grants.delete(key);
    },
    refresh,
    membershipChanged() {
      // Lost: noted now, so that gaining them back reads the store again before a scrape trusts the last reading.
      if (!owns(STORE_GAUGES_KEY)) owned = false;
      else if (!owned) void refresh();
    },
    read: current,
    stop: () => {
      stopped = true;
      clearInterval(timer);
    },
  };
}
