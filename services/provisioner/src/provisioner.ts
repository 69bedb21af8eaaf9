/**
 * The provisioner service: reconciles grants as they change, serves credential values to
 * their holders, and folds the agents' receipts of deliveries into the grants. Several instances share the durable consumer (and so the work); writes use
 * compare-and-set, and resources are created idempotently, so two instances on one grant
 * converge.
 */
import { AuditedRequests, Durables, Buckets, KeyedQueue, QueueGroups, kvKeyOf, meshSealingKey, subjects, type MasterKey } from "@mesh/shared";
import { AuditLog, consumeKeys, serveJson, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";
import { AdapterPool, CredentialStore, keysOf, type CredentialKeys } from "@mesh/providers";
import { handleCredentialFetch, handleCredentialList } from "./fetch.js";
import { reconcileGrant } from "./provision.js";
import type { TakeBackStep } from "./provision-deps.js";
import { foldReceipts } from "./receipts.js";

export interface Provisioner {
  /** Reconciles one grant now (key `<module>.<requirement>`). */
  reconcile(key: string): Promise<void>;
  /** Stops serving and consuming, and closes the adapters. Idempotent. */
  stop(): Promise<void>;
}

export async function startProvisioner(opts: {
  store: Store;
  /** The keys credentials are encrypted under: the service's key ring (storeKeyRing), or one master key. */
  masterKey: MasterKey | CredentialKeys;
  log: Logger;
  env?: NodeJS.ProcessEnv;
  testPauseAfter?: TakeBackStep;
  onTestPause?: (step: TakeBackStep) => void;
}): Promise<Provisioner> {
  const { store, log } = opts;
  const keys = keysOf(opts.masterKey);
  const credentials = new CredentialStore(store.kv.credentials, keys);
  // The local files the adapters open (NATS signing keys) are sealed under the key-encryption key.
  const adapters = new AdapterPool(opts.env ?? process.env, keys.kek);
  const deps = { store, credentials, adapters, log, testPauseAfter: opts.testPauseAfter, onTestPause: opts.onTestPause };
  const queue = new KeyedQueue((key) => reconcileGrant(deps, key), 16);
  // From the key-encryption key, which no rotation changes: holders pin its public half.
  const sealer = meshSealingKey(keys.kek);
  // Every fetch and list is in the audit trail before its answer goes out.
  const trail = new AuditLog(store.nc, "provisioner");
  const api = serveJson(
    store.nc,
    subjects.credentialFetchesAll,
    QueueGroups.provisioner,
    log,
    (body, m) => handleCredentialFetch(store, credentials, body, sealer, m.subject, keys.kek),
    { audit: { log: trail, request: AuditedRequests.fetch } },
  );
  const list = serveJson(store.nc, subjects.credentialListsAll, QueueGroups.provisioner, log, (_body, m) => handleCredentialList(store, m.subject), {
    audit: { log: trail, request: AuditedRequests.list },
  });
  const consumer = await consumeKeys({
    store,
    durable: Durables.provisioner,
    keyOf: kvKeyOf(Buckets.grants),
    queue,
    log,
  });
  // The agents' receipts, folded into the grants (an agent may write no grant).
  const receipts = await foldReceipts({ store, log });
  log.info({ masterKey: keys.kek.id }, "provisioner started");
  let stopped: Promise<void> | undefined;
  return {
    reconcile: (key) => queue.enqueue(key),
    stop() {
      stopped ??= (async () => {
        await Promise.all([api.stop(), list.stop()]);
        await Promise.all([consumer.stop(), receipts.stop()]);
        await adapters.close();
      })();
      return stopped;
    },
  };
}
