/**
 * What the rotator's parts share (staging.ts, broadcast.ts, commit.ts and rotator.ts, which
 * drives the state machine): the store, the credentials and provider adapters, the rotation
 * records, and writing a state (where the test hooks may freeze the process).
 */
import { hostname } from "node:os";
import { BUILTIN_SECRET_PROVIDER, ErrorCodes, Grant, MeshError, ProviderDoc, type MasterKey, type Rotation, type RotationState } from "@mesh/shared";
import { ProviderCatalog, mutateJson, readJson, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";
import { AdapterPool, CredentialStore, keysOf, withAdminSecret, type ProviderAdapter } from "@mesh/providers";
import { DEFAULT_ROTATION_TIMEOUT_MS, type RotatorOptions, type RotatorTestHooks } from "./rotator-options.js";
import { enter } from "./rotation-machine.js";
import { RotationRecords } from "./rotation-records.js";

export interface RotatorContext {
  opts: RotatorOptions;
  store: Store;
  log: Logger;
  credentials: CredentialStore;
  /** The local key-encryption key: what the adapters' sealed files and the parts' rotation keys are derived from (no rotation of the data key changes it). */
  kek: MasterKey;
  /** Read once per change of the providers bucket: every rotation of a secret looks for the servers it is the admin password of. */
  catalog: ProviderCatalog;
  adapters: AdapterPool;
  records: RotationRecords;
  defaultTimeoutMs: number;
  /** Waits forever once a test hook froze the process. */
  holdIfPaused(): Promise<void>;
  /** TEST HOOK: freezes the process from here on (every step then waits in holdIfPaused). */
  freeze(why: string): void;
  /** Writes `next` over revision `revision` (or creates it); then the test hook may freeze the process. */
  persist(key: string, revision: number | undefined, next: Rotation): Promise<void>;
  /**
   * Moves rotation `r` (as read) to `state` (with `patch`) over the record as it is now, when it
   * is still `r` in `r`'s state and `allowed` says so; the new record, or undefined when the
   * record had moved on (look again). Several states are entered in turn, in one write.
   */
  transition(
    key: string,
    r: Rotation,
    state: RotationState | readonly RotationState[],
    now: Date,
    allowed?: (x: Rotation) => boolean,
    patch?: Partial<Rotation>,
  ): Promise<Rotation | undefined>;
  /** Runs `fn` with the adapter of `kind` at `provider`; one whose admin password is a mesh secret is reached with the generation its server accepts. */
  withAdapterOf<T>(kind: Grant["kind"], provider: string, fn: (adapter: ProviderAdapter) => Promise<T>): Promise<T>;
  setGrant(key: string, fn: (g: Grant) => Grant | undefined): Promise<unknown>;
}

/** Who repairs a provider's admin secret, in the secret grant's repair history, when the rotator needs that server first. */
export const ROTATOR_INSTANCE = `rotator@${hostname()}/${process.pid}`;

export function rotatorContext(opts: RotatorOptions, testHooks: RotatorTestHooks): RotatorContext {
  const { store, log } = opts;
  const keyRing = keysOf(opts.masterKey);
  const credentials = new CredentialStore(store.kv.credentials, keyRing);
  const catalog = new ProviderCatalog(store);
  // The local files the adapters open (NATS signing keys) are sealed under the key-encryption key.
  const adapters = new AdapterPool(opts.env ?? process.env, keyRing.kek);
  const records = new RotationRecords(store);
  let paused = false;
  const frozen = new Promise<never>(() => {});
  const holdIfPaused = async () => {
    if (paused) await frozen;
  };
  const freeze = (why: string) => {
    paused = true;
    log.warn(`TEST HOOK: the rotator froze ${why}`);
  };

  /** Writes `next` over revision `revision` (or creates it); then the test hook may freeze the process. */
  const persist = async (key: string, revision: number | undefined, next: Rotation): Promise<void> => {
    await holdIfPaused();
    await records.write(key, revision, next);
    persisted(next);
  };

  /**
   * Moves rotation `r` (as read) to `state` over the record as it is now (with the
   * confirmations recorded since), when it is still `r` in `r`'s state and `allowed` says so;
   * the new record, or undefined when the record had moved on (look again). Several states are
   * entered in turn, each by a move {@link enter} allows, and written once.
   */
  const transition = async (
    key: string,
    r: Rotation,
    state: RotationState | readonly RotationState[],
    now: Date,
    allowed: (x: Rotation) => boolean = () => true,
    patch: Partial<Rotation> = {},
  ): Promise<Rotation | undefined> => {
    await holdIfPaused();
    const states: readonly RotationState[] = typeof state === "string" ? [state] : state;
    // A state entered is past what blocked the last one.
    const out = await records.update(key, (x) =>
      x && x.id === r.id && x.state === r.state && allowed(x)
        ? states.reduce<Rotation>((y, s) => enter(y, s, now), { ...x, blocked: undefined, ...patch })
        : undefined,
    );
    if (!out.wrote) return undefined;
    persisted(out.record!.value);
    return out.record!.value;
  };

  /** Logs a state written; then the test hook may freeze the process. */
  const persisted = (next: Rotation) => {
    log.info({ rotation: next.id, state: next.state }, `rotation ${next.id} is ${next.state}`);
    if (testHooks.pauseAfter && next.state === testHooks.pauseAfter) {
      freeze(`after persisting rotation ${next.id} in state ${next.state}`);
      testHooks.onPause?.(next.state);
    }
  };

  /** Runs `fn` with the adapter of `kind` at `provider`; one whose admin password is a mesh secret is reached with the generation its server accepts. */
  const withAdapterOf = async <T>(kind: Grant["kind"], provider: string, fn: (adapter: ProviderAdapter) => Promise<T>): Promise<T> => {
    const doc = provider === BUILTIN_SECRET_PROVIDER ? undefined : (await readJson(store.kv.providers, provider, ProviderDoc))?.value;
    if (provider !== BUILTIN_SECRET_PROVIDER && !doc) {
      throw new MeshError(ErrorCodes.NotFound, `provider ${provider} is not registered any more; apply its document again`, { retryable: true });
    }
    return doc ? withAdminSecret({ store, credentials, adapters }, kind, doc, ROTATOR_INSTANCE, fn) : fn(adapters.get(kind, undefined));
  };

  const setGrant = async (key: string, fn: (g: Grant) => Grant | undefined) => mutateJson(store.kv.grants, key, Grant, (g) => (g ? fn(g) : undefined));

  return {
    opts,
    store,
    log,
    credentials,
    kek: keyRing.kek,
    catalog,
    adapters,
    records,
    defaultTimeoutMs: opts.defaultTimeoutMs ?? DEFAULT_ROTATION_TIMEOUT_MS,
    holdIfPaused,
    freeze,
    persist,
    transition,
    withAdapterOf,
    setGrant,
  };
}
