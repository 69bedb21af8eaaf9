/**
 * The rotator service: starts rotations on request (or on a requirement's schedule), carries
 * each through its persisted states, records holders' confirmations, and commits only when
 * every holder confirmed. All state is the rotation record in KV (compare-and-set), so several
 * instances share the work and a fresh instance finishes what a crashed one left.
 */
import { hostname } from "node:os";
import { ROOT_CONTEXT, trace, type Span } from "@opentelemetry/api";
import {
  Durables,
  BUILTIN_SECRET_PROVIDER,
  Buckets,
  Confirmation,
  ErrorCodes,
  Grant,
  HolderRegistration,
  Kinds,
  HOLDER_NOTICE_RESEND_MS,
  KeyedQueue,
  MeshError,
  isMeshError,
  retryJetStreamGap,
  ProviderDoc,
  QueueGroups,
  RotateRequest,
  EvictRequest,
  Rotation,
  RotationStates,
  Streams,
  consumeKeys,
  MASTER_KEY_GRANT,
  meshSealingKey,
  errorMessage,
  holderKey,
  isCasConflict,
  isRotationRunning,
  isTrue,
  keys,
  kvFilter,
  kvKeyOf,
  kvStream,
  mutateJson,
  parseGrantId,
  ProviderCatalog,
  CREDENTIAL_HISTORY,
  parseHolderId,
  propagating,
  readJson,
  sdkHolderId,
  sealTo,
  serveJson,
  setCondition,
  startProducerSpan,
  subjects,
  SubjectTemplates,
  holderSpanAttributes,
  traceHeaders,
  tracer,
  withDeliveredCondition,
  withProducerSpan,
  type Delivery,
  type RotateReply,
  type RotationBroadcast,
  type RotationState,
  type CredentialValues,
  type HolderNotice,
  type SealedHolderPayload,
  type Store,
} from "@mesh/shared";
import { AdapterPool, CredentialStore, keysOf, probeAdminSecret, recordedResource, setAdminSecret, withAdminSecret, type ProviderAdapter } from "@mesh/providers";
import { DEFAULT_ROTATION_TIMEOUT_MS, type RotatorOptions } from "./rotator-options.js";
import {
  allConfirmed,
  applyConfirmations,
  countMissing,
  enter,
  holdersOf,
  missingHolders,
  evictHolders,
  generationsToPurge,
  nameHolders,
  newRotation,
  nextNoticeInterval,
  nextStep,
  refusal,
  withRotatingCondition,
  type ConfirmationOutcome,
} from "./rotation-machine.js";
import { contextOfTraceparent, traceparentOf } from "./trace-context.js";
import { startSchedule } from "./schedule.js";
import { handoverFrom, startHandovers } from "./handover.js";
import { watchHolderRegistry } from "./holder-registry.js";
import { RotationRecords } from "./rotation-records.js";
import { ConfirmationBatches } from "./confirmation-batches.js";

/** A running rotator. */
export interface Rotator {
  /** Starts a rotation of `grant` (`<module>/<requirement>`), as a request on `mesh.api.rotate` would. */
  rotate(req: RotateRequest): Promise<Rotation>;
  /** Works on the rotation of a grant key (`<module>.<requirement>`) now. */
  advance(key: string): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Starts the rotator: serves `mesh.api.rotate`, follows rotation records, and consumes
 * confirmations. Picks up every running rotation at once (a crashed instance's too).
 */
export async function startRotator(opts: RotatorOptions): Promise<Rotator> {
  const { store, log } = opts;
  const keyRing = keysOf(opts.masterKey);
  const credentials = new CredentialStore(store.kv.credentials, keyRing);
  // Read once per change of the providers bucket: every rotation of a secret looks for the servers it is the admin password of.
  const catalog = new ProviderCatalog(store);
  // The local files the adapters open (NATS signing keys) are sealed under the key-encryption key.
  const adapters = new AdapterPool(opts.env ?? process.env, keyRing.kek);
  const defaultTimeoutMs = opts.defaultTimeoutMs ?? DEFAULT_ROTATION_TIMEOUT_MS;
  const records = new RotationRecords(store);
  // Records whose last confirmations this instance has just written, for the commit that follows.
  const completed = new Map<string, Rotation>();
  // Rotations whose grant already says Rotating/AwaitingHolders, set by this instance beside the broadcast.
  const marked = new Set<string>();
  const spans = new Map<string, Span>();
  const timers = new Map<string, NodeJS.Timeout>();
  // When this instance last sent each running rotation's notices to SDK holders.
  const noticed = new Map<string, { at: number; every: number }>();
  const noticeResendMs = opts.noticeResendMs ?? HOLDER_NOTICE_RESEND_MS;
  // The mesh's sealing key (from the key-encryption key, the provisioner's too, which no rotation
  // of the data key changes): holders open only what it sealed.
  const sealer = meshSealingKey(keyRing.kek);
  // The box key with each registered holder, computed in idle time as registrations arrive
  // (sealing to nothing computes and keeps it), so a rotation's sealing is symmetric only.
  const warmed = new Set<string>();
  const warming: string[] = [];
  const warmSome = () => {
    for (const xkey of warming.splice(0, 64)) {
      try {
        sealer.seal(NOTHING, xkey);
      } catch {
        // not a curve key: that holder fetches its values
      }
    }
    if (warming.length) setImmediate(warmSome);
  };
  const warm = (xkey: string) => {
    // Beyond the sealing key's own bound, warming would only push out keys warmed before.
    if (warmed.has(xkey) || warmed.size >= WARM_LIMIT) return;
    warmed.add(xkey);
    if (warming.push(xkey) === 1) setImmediate(warmSome);
  };
  const registry = await watchHolderRegistry({ store, log, onXkey: warm });
  let stopped = false;
  let paused = false;
  const frozen = new Promise<never>(() => {});
  const holdIfPaused = async () => {
    if (paused) await frozen;
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
   * the new record, or undefined when the record had moved on (look again).
   */
  const transition = async (key: string, r: Rotation, state: RotationState, now: Date, allowed: (x: Rotation) => boolean = () => true): Promise<Rotation | undefined> => {
    await holdIfPaused();
    const out = await records.update(key, (x) => (x && x.id === r.id && x.state === r.state && allowed(x) ? enter(x, state, now) : undefined));
    if (!out.wrote) return undefined;
    persisted(out.record!.value);
    return out.record!.value;
  };

  /** Logs a state written; then the test hook may freeze the process. */
  const persisted = (next: Rotation) => {
    log.info({ rotation: next.id, state: next.state }, `rotation ${next.id} is ${next.state}`);
    if (opts.testPauseAfter && next.state === opts.testPauseAfter) {
      paused = true;
      log.warn({ rotation: next.id, state: next.state }, "TEST HOOK: the rotator froze after persisting this state");
      opts.onTestPause?.(next.state);
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

  const setGrant = async (key: string, fn: (g: Grant) => Grant | undefined) =>
    mutateJson(store.kv.grants, key, Grant, (g) => (g ? fn(g) : undefined));

  const refuseRunning = (r: Rotation): MeshError => {
    const total = Object.keys(r.holders).length;
    return new MeshError(
      ErrorCodes.Conflict,
      `grant ${r.grant} is already rotating: rotation ${r.id} (generation ${r.from} → ${r.to}) is ${r.state}, ${total - missingHolders(r).length}/${total} holders confirmed; wait for it (meshctl rotate ${r.grant} --wait) or see meshctl status`,
    );
  };

  /** Whether `r` is the rotation that request `req` (sent again) started. */
  const startedBy = (req: RotateRequest, r: Rotation | undefined): r is Rotation => req.requestId !== undefined && r?.requestId === req.requestId;

  // Staging reads and writes JetStream in several steps, all idempotent until the record is
  // written (which retries by itself): a request that met the reload gap is simply run again.
  const rotate = (req: RotateRequest): Promise<Rotation> => retryJetStreamGap(() => rotateOnce(req));

  const rotateOnce = async (req: RotateRequest): Promise<Rotation> => {
    await holdIfPaused();
    const id = parseGrantId(req.grant);
    if (!id) throw new MeshError(ErrorCodes.InvalidRequest, `not a grant id: ${JSON.stringify(req.grant)} (expected <module>/<requirement>, as meshctl status shows)`);
    const key = keys.grant(id.module, id.requirement);
    const [existing, grant, registrations] = await Promise.all([records.read(key), readJson(store.kv.grants, key, Grant), registry.list(id.module, id.requirement)]);
    // A retry of a request that started a rotation already: that rotation is the answer.
    if (startedBy(req, existing?.value)) return existing.value;
    // A revocation supersedes a running rotation (not a handover, nor another revocation): k and the staged k+1 both go, k+2 goes out.
    const running = existing?.value as Rotation | undefined;
    const superseded = req.revoke && isRotationRunning(running) && !running.revoke && !running.fromProvider ? running : undefined;
    if (isRotationRunning(existing?.value) && !superseded) throw refuseRunning(existing.value);
    const g = grant?.value;
    if (!g) throw new MeshError(ErrorCodes.NotFound, `grant ${req.grant} does not exist; meshctl status lists the grants`);
    if (!g.provider || g.generation === 0 || !isTrue(g.conditions, "Provisioned")) {
      throw new MeshError(ErrorCodes.Conflict, `grant ${req.grant} is not provisioned yet (generation ${g.generation}); nothing to rotate until it is`, { retryable: true });
    }
    const now = new Date();
    const holders = holdersOf(g, registrations, now);
    const to = superseded ? superseded.to + 1 : g.generation + 1;
    // A grant that moved provider: k+1 is made on the new one, k's resource released at commit.
    const fromProvider = handoverFrom(g);
    const staged = await withAdapterOf(g.kind, g.provider, async (adapter) => {
      // Write-ahead: k+1's secret is stored (encrypted) before the provider is touched, so a crash rolls forward with it.
      const secret = await credentials.ensure(g, to, g.provider!, () => adapter.generate());
      // Stage k+1 beside k: both log in from here until the commit.
      return adapter.create({ grant: { module: g.module, requirement: g.requirement, generation: to }, secret, options: g.options });
    });
    await credentials.setBindings(g.module, g.requirement, to, staged.bindings);
    // A secret that is a provider's admin password: k+1 is set at its server before any holder is told.
    if (g.kind === Kinds.Secret) await setAtAdminServers(g, to, staged.bindings);
    // One rotation per grant: read the record again now that k+1 is staged (another instance
    // may have started one meanwhile, perhaps for this very request).
    const cur = await records.read(key);
    if (startedBy(req, cur?.value)) return cur.value;
    const latest = cur?.value as Rotation | undefined;
    if (isRotationRunning(latest) && latest.id !== superseded?.id) throw refuseRunning(latest);
    const span = tracer("rotator").startSpan(
      "rotate",
      { attributes: { "mesh.rotation": `${g.id}#${to}`, "mesh.grant": g.id, "mesh.from": g.generation, "mesh.to": to, "mesh.holders": holders.length } },
      ROOT_CONTEXT,
    );
    const tp = traceparentOf(span);
    const rotation = newRotation({
      grant: g,
      holders,
      resource: recordedResource(staged, g.provider),
      timeoutMs: req.timeoutMs ?? defaultTimeoutMs,
      now,
      ...(req.trigger || fromProvider ? { trigger: fromProvider ? "handover" : req.trigger } : {}),
      ...(tp ? { traceparent: tp } : {}),
      ...(fromProvider ? { fromProvider } : {}),
      ...(req.requestId ? { requestId: req.requestId } : {}),
      ...(req.revoke ? { revoke: { ...req.revoke, ...(superseded ? { supersedes: superseded.to } : {}) } } : {}),
      to,
    });
    if (superseded) log.warn({ rotation: rotation.id, superseded: superseded.id }, `revocation ${rotation.id} supersedes rotation ${superseded.id}: generations ${superseded.from} and ${superseded.to} both go at its commit`);
    try {
      // Create, or replace a committed one, at the revision read.
      await persist(key, cur?.revision, rotation);
    } catch (e) {
      span.end();
      if (isCasConflict(e)) {
        // Another instance won the write: with this request's id, it ran this very request.
        const cur = await records.read(key);
        if (startedBy(req, cur?.value)) return cur.value;
        if (isRotationRunning(cur?.value)) throw refuseRunning(cur.value);
      }
      throw e;
    }
    spans.set(rotation.id, span);
    log.info({ rotation: rotation.id, holders: holders.length }, `rotation ${rotation.id} staged for ${holders.length} holders`);
    void queue.enqueue(key).catch(() => undefined);
    return rotation;
  };

  /**
   * Rotating a secret that is the admin password of providers (README "Provider dependencies")
   * is a rotation of their servers: generation `to` is set at each one, logging in with the
   * generation it accepts, before the holders are told (PostgreSQL keeps one password per role,
   * so from then on the server accepts `to` only; the services reach it with `to` from the
   * credential history until the binding file has it). A server that does not answer is left
   * for the repair when it is back (the verifier's, or the provisioner's when it needs the
   * server); one that accepts no generation the mesh holds refuses the rotation: nothing is told.
   */
  const setAtAdminServers = async (g: Grant, to: number, bindings: Record<string, string>): Promise<void> => {
    for (const doc of await catalog.current()) {
      const ref = doc.installed ? adapters.adminSecret(doc) : undefined;
      if (ref?.grant !== g.id) continue;
      const next = bindings[ref.key];
      const probe = await probeAdminSecret({ store, credentials, adapters }, doc, ref);
      if (!probe || next === undefined) continue;
      const f = probe.finding;
      if (f.state === "unreachable") {
        log.warn({ grant: g.id, provider: doc.name }, `rotating ${g.id}: ${f.message}; generation ${to} is set there when it answers again (repair: ${probe.policy})`);
        continue;
      }
      if (f.state === "rejected") {
        throw new MeshError(ErrorCodes.ProviderRejected, `cannot rotate ${g.id}, the admin password of provider ${doc.name}: ${f.message}; nothing was told to its holders. Rotate again once it is fixed`, { retryable: true });
      }
      await setAdminSecret(doc, probe, to, next);
      log.info({ grant: g.id, provider: doc.name }, `rotating ${g.id}: generation ${to} set at the server of provider ${doc.name} (${doc.endpoint}) before its holders are told`);
    }
  };

  /**
   * Tells SDK holders `targets` of `r` that it started: one plain NATS
   * message each on its own subject (in no stream), with k+1's binding values sealed to the
   * xkey the holder registered. A holder without one, or whose xkey does not take a seal, gets
   * the notice without values and fetches them. Returns how many notices were sent.
   */
  const sendNotices = async (r: Rotation, targets: readonly SdkHolder[]): Promise<number> => {
    if (targets.length === 0) return 0;
    const xkeys = xkeysOf(await registry.list(r.module, r.requirement));
    // Read (and decrypted) once for every holder; without them every holder fetches.
    let values: CredentialValues | undefined;
    try {
      values = (await credentials.read(r.module, r.requirement, r.to))?.bindings;
    } catch (e) {
      log.warn({ rotation: r.id, err: e }, "could not read the new values to seal them to SDK holders; they fetch them");
    }
    const sender = sealer.getPublicKey();
    // With a propagator, each notice gets a PRODUCER span of its own (the rotation's child),
    // carried in its headers; without, no headers (an empty set still costs every notice a header block).
    const traced = propagating();
    let sealed = 0;
    for (const t of targets) {
      const notice: HolderNotice = { rotation: r.id, grant: r.grant, holder: t.holder, generation: r.to };
      const xkey = xkeys.get(t.holder);
      if (values && xkey) {
        const payload: SealedHolderPayload = { rotation: r.id, holder: t.holder, generation: r.to, values };
        try {
          notice.sealed = sealTo(sealer, xkey, payload);
          notice.sender = sender;
          sealed++;
        } catch {
          // not a curve key: that holder fetches
        }
      }
      const subject = subjects.holderValues(r.module, r.requirement, t.node, t.part, t.instance);
      if (!traced) {
        store.nc.publish(subject, JSON.stringify(notice));
        continue;
      }
      const { span, headers } = startProducerSpan("rotator", subject, SubjectTemplates.holderValues, holderSpanAttributes({ rotation: r.id, grant: r.grant, node: t.node, part: t.part, holder: t.holder, generation: r.to }), contextOfTraceparent(r.traceparent));
      try {
        store.nc.publish(subject, JSON.stringify(notice), { headers });
      } finally {
        span.end();
      }
    }
    log.debug({ rotation: r.id, notices: targets.length, sealed }, "rotation notices sent to SDK holders");
    return targets.length;
  };

  const firstNoticeInterval = nextNoticeInterval(undefined, noticeResendMs, NOTICE_RESEND_MAX_MS);

  /** The first send of `r`'s notices, by whichever instance broadcast it: when the record entered Broadcast. */
  const noticedAtBroadcast = (r: Rotation) => {
    const at = r.history.find((h) => h.state === RotationStates.Broadcast)?.at;
    return at ? { at: Date.parse(at), every: firstNoticeInterval } : undefined;
  };

  /** Marks the notices of `r` sent now; the next, if holders are still missing, after `every`. */
  const noticedNow = (id: string, every: number) => {
    noticed.delete(id);
    noticed.set(id, { at: Date.now(), every });
    if (noticed.size > 1_000) noticed.delete(noticed.keys().next().value!);
  };

  /**
   * Sends the notices of a running `r` again to its SDK holders that have not confirmed:
   * `noticeResendMs` after the first, then at doubling intervals up to a minute (a holder
   * that stays away catches up from the record when it is back; this is for lost messages).
   */
  const renotify = async (r: Rotation): Promise<void> => {
    // Another instance (or this one before a restart) sent them when the rotation entered Broadcast.
    const last = noticed.get(r.id) ?? noticedAtBroadcast(r);
    if (last && Date.now() - last.at < last.every) return;
    const missing = splitHolders(missingHolders(r)).sdk;
    if (missing.length === 0) return;
    noticedNow(r.id, nextNoticeInterval(last?.every, noticeResendMs, NOTICE_RESEND_MAX_MS));
    const sent = await sendNotices(r, missing);
    log.info({ rotation: r.id, notices: sent }, `rotation ${r.id}: told ${sent} SDK holders again, as they have not confirmed (${nameHolders(missing.map((t) => t.holder))})`);
  };

  const broadcast = async (r: Rotation): Promise<void> => {
    const headers = () => traceHeaders(contextOfTraceparent(r.traceparent));
    const publishedAt = new Date().toISOString();
    const holders = splitHolders(Object.keys(r.holders));
    try {
      noticedNow(r.id, firstNoticeInterval);
      await sendNotices(r, holders.sdk);
    } catch (e) {
      // Sent again while they have not confirmed.
      log.warn({ rotation: r.id, err: e }, "could not tell the SDK holders of the rotation; it is tried again");
    }
    await Promise.all(
      holders.agents.map(async (h) => {
        const d: Delivery = {
          grant: r.grant,
          module: r.module,
          requirement: r.requirement,
          part: h.part,
          node: h.node,
          kind: r.kind,
          provider: r.provider,
          generation: r.to,
          publishedAt,
          rotation: r.id,
        };
        const subject = subjects.delivery(h.node, r.module, h.part, r.requirement);
        // One PRODUCER span per holder, the rotation's child; the agent's span is its child.
        await withProducerSpan("rotator", subject, SubjectTemplates.delivery, holderSpanAttributes({ rotation: r.id, grant: r.grant, node: h.node, part: h.part, holder: `${h.node}/${h.part}`, generation: r.to }), contextOfTraceparent(r.traceparent), (headers) =>
          store.js.publish(subject, JSON.stringify(d), { msgID: `${r.id}@${r.requestedAt}:${h.node}:${h.part}`, headers }),
        );
      }),
    );
    const b: RotationBroadcast = { rotation: r.id, grant: r.grant, module: r.module, requirement: r.requirement, from: r.from, to: r.to, publishedAt };
    await store.js.publish(subjects.rotationBroadcast(r.module, r.requirement), JSON.stringify(b), { msgID: `${r.id}@${r.requestedAt}`, headers: headers() });
  };

  const commit = async (key: string, r: Rotation): Promise<void> => {
    // The master key's k+1 is known to every holder: the store moves under it before k is retired
    // (k still opens meanwhile; a crash here runs the pass again at the next commit step).
    if (r.grant === MASTER_KEY_GRANT) {
      const pass = await credentials.reencrypt();
      log.info({ rotation: r.id, keyId: pass.target, moved: pass.moved, passes: pass.passes }, `rotation ${r.id}: the credentials store is under the master key's generation ${r.to} (${pass.moved} records re-encrypted)`);
    }
    // Every holder confirmed k+1: only now does k stop working.
    const ended = r.fromProvider ? await release(r, r.fromProvider) : await retire(r);
    const now = new Date();
    // A revocation commits at its grace: who has not switched is locked out until it takes `to`.
    const lockedOut = r.revoke ? missingHolders(r) : [];
    if (r.revoke) log.warn({ rotation: r.id, lockedOut, reason: r.revoke.reason, by: r.revoke.by }, `revocation ${r.id}: generation ${r.from} revoked${lockedOut.length ? `; locked out until they take generation ${r.to}: ${nameHolders(lockedOut)}` : ""}`);
    await setGrant(key, (g) => {
      const revocation = r.revoke && { rotation: r.id, generation: r.from, at: now.toISOString(), ...(r.revoke.by ? { by: r.revoke.by } : {}), ...(r.revoke.reason ? { reason: r.revoke.reason } : {}), lockedOut };
      const next: Grant = {
        ...g,
        ...(revocation && !g.revocations?.some((x) => x.rotation === r.id) ? { revocations: [...(g.revocations ?? []), revocation].slice(-20) } : {}),
        generation: Math.max(g.generation, r.to),
        // After a handover nothing of the old provider's resource describes the grant.
        resource: r.fromProvider ? { ...r.resource } : { ...g.resource, ...r.resource },
        conditions: setCondition(
          withRotatingCondition(g.conditions, { ...r, state: RotationStates.Committed }, now),
          {
            type: "Provisioned",
            status: "True",
            reason: "Provisioned",
            message: `generation ${r.to} on ${r.provider} (${r.revoke ? `revocation ${r.id}${r.revoke.reason ? `: ${r.revoke.reason}` : ""}` : `rotation ${r.id}`}; ${ended}${lockedOut.length ? `; locked out until they take generation ${r.to}: ${nameHolders(lockedOut)}` : ""})`,
          },
          now,
        ),
      };
      next.conditions = withDeliveredCondition(next, now);
      return next;
    });
    // Best effort, off the commit's path: the next commit tries again.
    void pruneHistory(r);
  };

  /** Purges the generations of `r`'s credential older than the history kept (see {@link generationsToPurge}); a failure is logged, and the next commit tries again. */
  const pruneHistory = async (r: Rotation): Promise<void> => {
    try {
      const needed = (await catalog.current()).some((p) => p.needs?.includes(r.grant));
      const stored = await credentials.generations(r.module, r.requirement);
      const purge = generationsToPurge(stored, r.to, opts.credentialHistory ?? CREDENTIAL_HISTORY, needed);
      for (const g of purge) await credentials.purgeGeneration(r.module, r.requirement, g);
      if (purge.length) log.info({ rotation: r.id, purged: purge }, `rotation ${r.id}: generations ${purge.join(", ")} purged from the store (it keeps the last ${opts.credentialHistory ?? CREDENTIAL_HISTORY})`);
    } catch (e) {
      log.warn({ rotation: r.id, err: e }, "could not purge old generations from the store; the next commit tries again");
    }
  };

  /** Retires generation `from` of `r` on its provider; says what it did. */
  const retire = async (r: Rotation): Promise<string> => {
    // A revocation that superseded a rotation retires the generation that one staged too.
    const generations = r.revoke?.supersedes ? [r.from, r.revoke.supersedes] : [r.from];
    await withAdapterOf(r.kind, r.provider, async (adapter) => {
      for (const generation of generations) await adapter.retire({ grant: { module: r.module, requirement: r.requirement, generation } });
    });
    return `generation${generations.length > 1 ? "s" : ""} ${generations.join(" and ")} retired`;
  };

  /**
   * Releases the grant on `provider`, the one a handover moved it from: generation `from`
   * stops working there, like a retire; the resource and its data are kept, for the operator to
   * move or drop (the mesh never drops data by itself, as for a requirement that is removed).
   * Says what it did. A provider that is no longer registered has nothing the mesh can reach.
   */
  const release = async (r: Rotation, provider: string): Promise<string> => {
    try {
      await withAdapterOf(r.kind, provider, (adapter) => adapter.retire({ grant: { module: r.module, requirement: r.requirement, generation: r.from } }));
    } catch (e) {
      if (isMeshError(e, ErrorCodes.NotFound)) {
        log.warn({ rotation: r.id, provider }, `provider ${provider} is not registered any more; what ${r.grant} had there, if anything, is left for its operator`);
        return `handed over from ${provider}, which is not registered any more`;
      }
      // Every holder is on the new provider: the handover commits. The old generation could not
      // be ended on a provider that is down (often why the grant moved), so it is said, not hidden.
      log.warn({ rotation: r.id, provider, err: e }, `handover ${r.id}: generation ${r.from} could not be retired on ${provider}; it may still work there`);
      return `handed over from ${provider}, where generation ${r.from} could not be retired (${errorMessage(e)}): it may still work there: end it by hand on that server once it answers`;
    }
    log.info({ rotation: r.id, provider }, `handover ${r.id}: generation ${r.from} retired on ${provider}; the resource there is kept, with its data, for its operator to move or drop`);
    return `handed over from ${provider}: generation ${r.from} retired there, the resource kept with its data (not moved); drop it when it is no longer needed`;
  };

  /** Sets the grant's Rotating condition for `r` awaiting its holders (before the record says so). */
  const markRotating = async (key: string, r: Rotation, now: Date) => {
    const next = enter(r, RotationStates.AwaitingHolders, now);
    await setGrant(key, (g) => {
      const conditions = withRotatingCondition(g.conditions, next, now);
      return conditions === g.conditions ? undefined : { ...g, conditions };
    });
    if (marked.size >= 1_000) marked.clear();
    marked.add(r.id);
  };

  const endSpan = (r: Rotation, outcome: string) => {
    let span = spans.get(r.id);
    spans.delete(r.id);
    // Another instance started it: this instance's part joins the same trace.
    span ??= tracer("rotator").startSpan("rotate.resume", { attributes: { "mesh.rotation": r.id } }, contextOfTraceparent(r.traceparent));
    span.setAttribute("mesh.outcome", outcome);
    span.end();
  };

  const schedule = (key: string, atMs: number) => {
    clearTimeout(timers.get(key));
    const t = setTimeout(() => {
      timers.delete(key);
      if (!stopped) void queue.enqueue(key).catch(() => undefined);
    }, Math.max(0, atMs - Date.now()) + 10);
    t.unref();
    timers.set(key, t);
  };

  const advance = async (key: string): Promise<void> => {
    // The record this instance has just written (compare-and-set: it was current then), so the
    // next step needs no read: the one the last confirmations completed, then each state written.
    let written = completed.get(key);
    completed.delete(key);
    if (written !== records.last(key)?.value) written = undefined;
    for (let guard = 0; guard < 10 && !stopped; guard++) {
      await holdIfPaused();
      const r = written ?? (await records.read(key))?.value;
      written = undefined;
      if (!r || !isRotationRunning(r)) return;
      const now = new Date();
      const step = nextStep(r, now);
      const rlog = log.child({ rotation: r.id, state: r.state });
      try {
        switch (step.action) {
          // Holders confirm as soon as the broadcast reaches them (their values came with it), so
          // confirmations may be recorded before a state is written: each state is written over
          // the record with them (never over a stale copy), and the broadcast is not sent twice.
          case "broadcast": {
            // The grant's Rotating condition is written beside the broadcast, off the path to the
            // commit; should that fail, the next step writes it.
            await Promise.all([broadcast(r), markRotating(key, r, now).catch(() => undefined)]);
            written = await transition(key, r, RotationStates.Broadcast, now);
            continue;
          }
          case "await": {
            if (!marked.has(r.id)) await markRotating(key, r, now);
            written = await transition(key, r, RotationStates.AwaitingHolders, now);
            continue;
          }
          case "stall": {
            const next = enter(r, RotationStates.Stalled, now);
            await setGrant(key, (g) => ({ ...g, conditions: withRotatingCondition(g.conditions, next, now) }));
            // Not when the last holders confirmed meanwhile: then it commits.
            if (!(await transition(key, r, RotationStates.Stalled, now, (x) => !allConfirmed(x)))) continue;
            rlog.warn({ missing: step.missing }, `rotation ${r.id} stalled: ${step.missing.length} holders have not confirmed (${nameHolders(step.missing)}); generation ${r.from} is kept`);
            return;
          }
          case "commit": {
            // Side effects only on the record as it is in KV now, not on a copy this instance
            // wrote: another instance may have committed it already and a newer rotation staged
            // k+2, which on PostgreSQL, MariaDB and RabbitMQ uses k's login role again.
            const current = (await records.read(key))?.value;
            if (!current || current.id !== r.id || !isRotationRunning(current)) continue;
            await commit(key, r);
            const next = await transition(key, r, RotationStates.Committed, now);
            if (!next) continue;
            marked.delete(r.id);
            noticed.delete(r.id);
            endSpan(next, "committed");
            clearTimeout(timers.get(key));
            timers.delete(key);
            return;
          }
          case "wait":
            schedule(key, step.untilMs);
            await renotify(r);
            return;
          default:
            // Stalled: the missing holders are told again (each sweep looks) until they confirm.
            if (isRotationRunning(r)) await renotify(r);
            return;
        }
      } catch (e) {
        if (isCasConflict(e)) continue; // someone else moved it: look again
        rlog.warn({ err: e }, "rotation step failed; it is retried");
        throw e;
      }
    }
  };

  const queue = new KeyedQueue(advance, 16);

  const sweep = async () => {
    try {
      // Through the decoded records: a running rotation's record is large and mostly unchanged between sweeps.
      for await (const key of await store.kv.rotations.keys()) {
        if (isRotationRunning((await records.read(key))?.value)) void queue.enqueue(key).catch(() => undefined);
      }
    } catch (e) {
      log.warn({ err: e }, "could not list rotations");
    }
  };

  /**
   * Records a batch of confirmations of one grant in its rotation record (one compare-and-set
   * write, see {@link RotationRecords.update}). The grant's targets, which only tell a forged
   * confirmation from a late one in the reason of a refusal, are read only when one is refused.
   */
  const recordConfirmations = async (key: string, batch: Confirmation[]) => {
    let targets: ReadonlySet<string> | undefined;
    for (;;) {
      let needTargets = false;
      let result = { refused: [] as ConfirmationOutcome["refused"], done: false };
      const now = new Date();
      await records.update(key, (r) => {
        needTargets = targets === undefined && batch.some((c) => refusal(r, c, NO_TARGETS) !== undefined);
        if (needTargets) return undefined;
        // A record that no longer runs comes back unchanged: refusals then are logged and answered, not stored.
        const out = applyConfirmations(r, batch, targets ?? NO_TARGETS, now);
        result = { refused: out.refused, done: isRotationRunning(out.rotation) && allConfirmed(out.rotation) };
        return out.rotation;
      });
      if (!needTargets) return result;
      const g = (await readJson(store.kv.grants, key, Grant))?.value;
      targets = new Set((g?.targets ?? []).map((t) => holderKey(t.node, t.part)));
    }
  };

  // Confirmations: shared by the instances (a queue group), recorded in batches; a request is
  // answered once it is in the record.
  const batches = new ConfirmationBatches({
    log,
    record: recordConfirmations,
    missing: (key) => {
      const r = records.last(key)?.value;
      return isRotationRunning(r) ? countMissing(r) : undefined;
    },
    onDone: (key) => {
      const r = records.last(key)?.value;
      if (r) completed.set(key, r);
      void queue.enqueue(key).catch(() => undefined);
    },
    holdIfPaused,
  });
  const confirmations = store.nc.subscribe(subjects.rotationConfirmsAll, {
    queue: QueueGroups.rotator,
    callback: (err, m) => {
      if (!err && !stopped) batches.add(m);
    },
  });

  const api = serveJson(store.nc, subjects.rotate, QueueGroups.rotator, log, async (body): Promise<RotateReply> => {
    const parsed = RotateRequest.safeParse(body);
    if (!parsed.success) {
      throw new MeshError(ErrorCodes.InvalidRequest, `not a rotate request: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
    }
    return { ok: true, rotation: await rotate(parsed.data) };
  });

  // Holders that never came back: the operator commits without them (meshctl rotate --evict).
  const evictApi = serveJson(store.nc, subjects.evict, QueueGroups.rotator, log, async (body): Promise<RotateReply> => {
    const parsed = EvictRequest.safeParse(body);
    if (!parsed.success) throw new MeshError(ErrorCodes.InvalidRequest, `not an evict request: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
    const req = parsed.data;
    const id = parseGrantId(req.grant);
    if (!id) throw new MeshError(ErrorCodes.InvalidRequest, `${JSON.stringify(req.grant)} is not a grant id (<module>/<requirement>)`);
    const key = keys.grant(id.module, id.requirement);
    let outcome: ReturnType<typeof evictHolders> | undefined;
    const { record } = await records.update(key, (r) => {
      outcome = undefined;
      if (!isRotationRunning(r)) return undefined;
      outcome = evictHolders(r, req.holders, new Date());
      return outcome.evicted.length ? outcome.rotation : undefined;
    });
    const r = record?.value;
    if (!isRotationRunning(r) || !outcome) throw new MeshError(ErrorCodes.NotFound, `no rotation of ${req.grant} is running: --evict commits a running or Stalled one without the holders named`);
    if (outcome.unknown.length) {
      throw new MeshError(ErrorCodes.InvalidRequest, `rotation ${r.id} has no holder ${outcome.unknown.join(", ")}; its holders are ${Object.keys(r.holders).sort().join(", ")}`);
    }
    for (const h of outcome.evicted) {
      log.warn({ rotation: r.id, holder: h }, `rotation ${r.id}: holder ${h} evicted by the operator; the rotation goes on without it`);
      // An SDK instance leaves the holders: later rotations do not wait for it until it registers again.
      const holder = parseHolderId(h);
      if (holder?.instance) await store.kv.holders.delete(keys.holder(r.module, r.requirement, holder.node, holder.part, holder.instance)).catch(() => undefined);
    }
    void queue.enqueue(key).catch(() => undefined);
    return { ok: true, rotation: r };
  });

  const changes = await consumeKeys({
    store,
    stream: kvStream(Buckets.rotations),
    durable: Durables.rotator.name,
    filter: kvFilter(Buckets.rotations),
    keyOf: kvKeyOf(Buckets.rotations),
    queue,
    log,
    // A state this instance wrote, it moves on from itself (and confirmation batches need no
    // step): without the read of the whole record each of its writes would cost.
    acted: (key, revision) => records.wroteRevision(key, revision),
  });
  const sweeper = setInterval(() => void sweep(), opts.sweepMs ?? 5_000);
  sweeper.unref();
  await sweep();
  const scheduler = startSchedule({ store, log, checkMs: opts.scheduleCheckMs ?? 60_000, rotate });
  const handovers = await startHandovers({ store, log, rotate });
  log.info("rotator started");

  return {
    rotate,
    advance: (key) => queue.enqueue(key),
    async stop() {
      stopped = true;
      clearInterval(sweeper);
      scheduler.stop();
      await handovers.stop();
      for (const t of timers.values()) clearTimeout(t);
      await Promise.all([api.stop(), evictApi.stop()]);
      await changes.stop();
      await confirmations.drain().catch(() => undefined);
      await batches.drain();
      await registry.stop();
      await adapters.close();
    },
  };
}

/** Who repairs a provider's admin secret, in the secret grant's repair history, when the rotator needs that server first. */
const ROTATOR_INSTANCE = `rotator@${hostname()}/${process.pid}`;
const NOTHING = new Uint8Array(0);
/** The longest interval between two sends of a rotation's notices to holders that have not confirmed. */
const NOTICE_RESEND_MAX_MS = 60_000;
const NO_TARGETS: ReadonlySet<string> = new Set();
/** How many holders' box keys are computed ahead: the sealing key keeps 20,000 (SHARED_KEY_CACHE in @mesh/shared). */
const WARM_LIMIT = 20_000;

/** An SDK instance among a rotation's holders (id `<node>/<part>/<instance>`). */
interface SdkHolder {
  holder: string;
  node: string;
  part: string;
  instance: string;
}

/** Holder ids split, each parsed once: SDK instances, and node agents (`<node>/<part>`). */
function splitHolders(holders: readonly string[]): { sdk: SdkHolder[]; agents: Array<{ node: string; part: string }> } {
  const sdk: SdkHolder[] = [];
  const agents: Array<{ node: string; part: string }> = [];
  for (const holder of holders) {
    const id = parseHolderId(holder);
    if (id?.instance !== undefined) sdk.push({ holder, node: id.node, part: id.part, instance: id.instance });
    else if (id) agents.push({ node: id.node, part: id.part });
  }
  return { sdk, agents };
}

/** The xkey of each SDK holder (by holder id) among `registrations` that registered one (and whose id matches its node, part and instance). */
function xkeysOf(registrations: readonly HolderRegistration[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const r of registrations) if (r.xkey && r.holder === sdkHolderId(r.node, r.part, r.instance)) out.set(r.holder, r.xkey);
  return out;
}

export type { RotationState };
