/**
 * Handovers: a provisioned grant whose provider changed (the resolver moved it to an installed
 * provider with a higher preference) is moved by a rotation whose generation k+1 is made on
 * the new provider; at commit, once every holder confirmed, generation k is retired on the old
 * provider, whose resource is kept with its data (the mesh does not move data, nor drop it). Level-triggered: every change of a grant is
 * looked at, and a handover already running is left alone.
 */
import {
  Durables,
  Buckets,
  Grant,
  KeyedQueue,
  Rotation,
  errorMessage,
  getCondition,
  setCondition,
  isRotationRunning,
  isTrue,
  kvKeyOf,
  type RotateRequest,
} from "@mesh/shared";
import { mutateJson, consumeKeys, readJson, type Consumption, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";

/** The provider a grant must be handed over from, or undefined when it needs no handover. Pure. */
export function handoverFrom(g: Grant): string | undefined {
  const from = g.resource.provider;
  if (!g.provider || g.generation === 0 || from === undefined || from === g.provider) return undefined;
  return isTrue(g.conditions, "Provisioned") ? from : undefined;
}

/** Follows grant changes and asks `rotate` for a handover of each grant that moved. */
export async function startHandovers(opts: { store: Store; log: Logger; rotate: (req: RotateRequest) => Promise<unknown> }): Promise<Consumption> {
  const { store, log } = opts;
  /** Sets (or, with undefined, clears) the grant's Rotating HandoverBlocked condition. */
  const blocked = (key: string, message: string | undefined) =>
    mutateJson(store.kv.grants, key, Grant, (g) => {
      if (!g) return undefined;
      const cur = getCondition(g.conditions, "Rotating");
      if (message === undefined) {
        return cur?.reason === "HandoverBlocked" ? { ...g, conditions: g.conditions.filter((c) => c !== cur) } : undefined;
      }
      if (cur && cur.reason !== "HandoverBlocked") return undefined; // a rotation runs: its condition stands
      const conditions = setCondition(g.conditions, { type: "Rotating", status: "False", reason: "HandoverBlocked", message });
      return conditions === g.conditions ? undefined : { ...g, conditions };
    });

  const queue = new KeyedQueue(async (key: string) => {
    const g = (await readJson(store.kv.grants, key, Grant))?.value;
    const from = g && handoverFrom(g);
    if (!g || !from) {
      if (g && getCondition(g.conditions, "Rotating")?.reason === "HandoverBlocked") await blocked(key, undefined);
      return;
    }
    // A rotation of the grant is running: once it commits, the grant changes and comes back here.
    if (isRotationRunning((await readJson(store.kv.rotations, key, Rotation))?.value)) return;
    try {
      await opts.rotate({ grant: g.id, trigger: "handover" });
      log.info({ grant: g.id, from, to: g.provider }, `handover of ${g.id} from ${from} to ${g.provider} started`);
    } catch (e) {
      // Anything else (the new provider refuses, is down, holds a foreign object of the grant's
      // name) is said on the grant and in the log, and tried again with back-off: never a silent stall.
      const why = `the grant moved from ${from} to ${g.provider}, but the handover cannot start there: ${errorMessage(e)}; holders keep generation ${g.generation} on ${from} meanwhile, and it is tried again by itself`;
      log.warn({ grant: g.id, from, to: g.provider, err: e }, `handover of ${g.id} to ${g.provider} could not start; trying again`);
      await blocked(key, why).catch(() => undefined);
      throw e;
    }
  }, 4);
  return consumeKeys({
    store,
    durable: Durables.rotatorHandovers,
    keyOf: kvKeyOf(Buckets.grants),
    queue,
    log,
  });
}
