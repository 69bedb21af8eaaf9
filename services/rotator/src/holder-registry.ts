/**
 * The SDK holders' registrations (KV `mesh-holders`), kept in memory from one watch of the
 * bucket, so that starting a rotation lists its holders without a read per holder (a thousand
 * holders were a thousand KV reads, 50–170 ms), and so that each holder's consumer is made when
 * it registers, not on the rotation's path.
 *
 * A list is as fresh as a read: it waits until the watch has seen the bucket's last revision
 * as of the call. Should the watch lag past {@link CATCH_UP_MS} or have ended, the bucket is
 * read key by key as before.
 */
import { Buckets, HolderRegistration, keys, kvStream } from "@mesh/shared";
import { listJson, watchedJson, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";

/** A live view of the holders' registrations. */
export interface HolderRegistry {
  /** The registrations of `module`'s `requirement`, as the bucket holds them now. */
  list(module: string, requirement: string): Promise<HolderRegistration[]>;
  stop(): Promise<void>;
}

/** How long a list waits for the watch to catch up before it reads the bucket itself. */
export const CATCH_UP_MS = 2_000;

/**
 * Starts watching the registrations. `onChange` is called with each registration as it arrives
 * (refreshed or new) and with undefined when one goes (the rotator makes and removes the holders' consumers).
 */
export async function watchHolderRegistry(opts: {
  store: Store;
  log: Logger;
  onChange?: (key: string, registration: HolderRegistration | undefined) => void;
}): Promise<HolderRegistry> {
  const { store, log } = opts;
  // By `<module>.<requirement>` (the keys' first two tokens), then by key.
  const byGrant = new Map<string, Map<string, HolderRegistration>>();
  let seen = 0;
  let ended = false;
  const waiters = new Set<{ revision: number; resolve: () => void }>();
  const grantOf = (key: string) => key.split(".", 2).join(".");
  const refused = (err: Error) => log.warn({ err }, "a holder registration is left out");

  // The latest value of every key, then every change.
  const watch = await store.kv.holders.watch();
  const done = (async () => {
    for await (const e of watch) {
      const grant = grantOf(e.key);
      const regs = byGrant.get(grant);
      if (e.operation !== "PUT" || !e.length) {
        regs?.delete(e.key);
        if (regs?.size === 0) byGrant.delete(grant);
        opts.onChange?.(e.key, undefined);
      } else {
        const r = HolderRegistration.safeParse(watchedJson(e, refused));
        if (r.success) {
          if (regs) regs.set(e.key, r.data);
          else byGrant.set(grant, new Map([[e.key, r.data]]));
          opts.onChange?.(e.key, r.data);
        } else regs?.delete(e.key);
      }
      seen = Math.max(seen, e.revision);
      for (const w of waiters) {
        if (seen < w.revision) continue;
        waiters.delete(w);
        w.resolve();
      }
    }
  })()
    .catch((e: unknown) => log.warn({ err: e }, "the watch of holder registrations ended; rotations read them from the bucket"))
    .finally(() => {
      ended = true;
      for (const w of waiters) w.resolve();
      waiters.clear();
    });

  /** True once the watch has seen revision `revision`; false when it did not within {@link CATCH_UP_MS}. */
  const caughtUp = async (revision: number): Promise<boolean> => {
    if (seen >= revision) return true;
    if (ended) return false;
    let timer: NodeJS.Timeout | undefined;
    const w = { revision, resolve: () => undefined as void };
    await new Promise<void>((resolve) => {
      w.resolve = resolve;
      waiters.add(w);
      timer = setTimeout(resolve, CATCH_UP_MS);
    });
    clearTimeout(timer);
    waiters.delete(w);
    return seen >= revision;
  };

  return {
    async list(module, requirement) {
      const last = (await store.jsm.streams.info(kvStream(Buckets.holders))).state.last_seq;
      if (!(await caughtUp(last))) {
        log.debug({ module, requirement }, "the watch of holder registrations lags; reading them from the bucket");
        return (await listJson(store.kv.holders, HolderRegistration, keys.holdersOf(module, requirement))).map((r) => r.value);
      }
      return [...(byGrant.get(keys.grant(module, requirement))?.values() ?? [])];
    },
    async stop() {
      watch.stop();
      await done;
    },
  };
}
