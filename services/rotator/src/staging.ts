/**
 * Staging a rotation: generation k+1 made beside k (written, encrypted, before the provider is
 * touched, so a crash rolls forward with it), set first at the servers whose admin password the
 * grant is, and the rotation recorded in state `Staged` with every holder it must wait for.
 * One rotation per grant; a rotate request sent again is answered with the rotation it started.
 */
import { randomUUID } from "node:crypto";
import { ROOT_CONTEXT, type Span } from "@opentelemetry/api";
import { ErrorCodes, Grant, Kinds, MeshError, isRotationRunning, isTrue, keys, parseGrantId, type RotateRequest, type Rotation } from "@mesh/shared";
import { isCasConflict, readJson, retryJetStreamIdempotent, tracer } from "@mesh/shared/runtime";
import { probeAdminSecret, recordedResource, setAdminSecret } from "@mesh/providers";
import { confirmedCount, holdersOf, newRotation } from "./rotation-machine.js";
import { handoverFrom } from "./handover.js";
import { traceparentOf } from "./trace-context.js";
import type { HolderRegistry } from "./holder-registry.js";
import type { RotatorContext } from "./rotator-context.js";

/**
 * How long a rotate request rides out a JetStream that does not answer. Longer than one request's
 * timeout (10 s, store.ts), so a step whose reply was lost is tried again: on a cluster an
 * election, and on any server this rotator reconnecting with a new identity of its own, which
 * loses the replies of the requests it had in flight. A client's attempts are shorter (meshctl
 * sends again after 10 s) and meet this one through its request id.
 */
export const STAGING_RIDE_OUT_MS = 25_000;

export function staging(
  ctx: RotatorContext,
  deps: { registry: HolderRegistry; spans: Map<string, Span>; enqueue: (key: string) => void },
): { rotate(req: RotateRequest): Promise<Rotation> } {
  const { store, log, credentials, catalog, adapters, records, defaultTimeoutMs, holdIfPaused, persist, withAdapterOf } = ctx;
  const { registry, spans } = deps;
  const refuseRunning = (r: Rotation): MeshError => {
    const total = Object.keys(r.holders).length;
    return new MeshError(
      ErrorCodes.Conflict,
      `grant ${r.grant} is already rotating: rotation ${r.id} (generation ${r.from} → ${r.to}) is ${r.state}, ${r.confirmed ?? confirmedCount(r)}/${total} holders confirmed; wait for it (meshctl rotate ${r.grant} --wait) or see meshctl status`,
    );
  };

  /** Whether `r` is the rotation that request `req` (sent again) started. */
  const startedBy = (req: RotateRequest, r: Rotation | undefined): r is Rotation => req.requestId !== undefined && r?.requestId === req.requestId;

  // Staging reads and writes JetStream in several steps, each idempotent (the record is
  // written at a revision, under the request's id): a try that met the reload gap, or whose
  // request got no answer in time, is simply run again. A request without an id gets one here,
  // so a try whose record was written before its reply was lost is answered with that rotation,
  // never a second. A resend that arrives while its first send is still staging here waits for
  // that one (another instance's try meets it at the record).
  const inFlight = new Map<string, Promise<Rotation>>();
  const rotate = (req: RotateRequest): Promise<Rotation> => {
    const once = req.requestId ? req : { ...req, requestId: randomUUID() };
    const key = `${once.grant}\n${once.requestId}`;
    const running = inFlight.get(key);
    if (running) {
      log.info(
        { grant: once.grant },
        `a rotate request for ${once.grant} was sent again while its first send is still staging here; both are answered with that one`,
      );
      return running;
    }
    const p = retryJetStreamIdempotent(() => rotateOnce(once), STAGING_RIDE_OUT_MS).finally(() => inFlight.delete(key));
    inFlight.set(key, p);
    return p;
  };

  const rotateOnce = async (req: RotateRequest): Promise<Rotation> => {
    await holdIfPaused();
    const id = parseGrantId(req.grant);
    if (!id)
      throw new MeshError(ErrorCodes.InvalidRequest, `not a grant id: ${JSON.stringify(req.grant)} (expected <module>/<requirement>, as meshctl status shows)`);
    const key = keys.grant(id.module, id.requirement);
    const [existing, grant, registrations] = await Promise.all([
      records.read(key),
      readJson(store.kv.grants, key, Grant),
      registry.list(id.module, id.requirement),
    ]);
    // A retry of a request that started a rotation already: that rotation is the answer.
    if (startedBy(req, existing?.value)) return existing.value;
    // A revocation supersedes a running rotation (not a handover, nor another revocation): k and the staged k+1 both go, k+2 goes out.
    const running = existing?.value as Rotation | undefined;
    const superseded = req.revoke && isRotationRunning(running) && !running.revoke && !running.fromProvider ? running : undefined;
    if (isRotationRunning(existing?.value) && !superseded) throw refuseRunning(existing.value);
    const g = grant?.value;
    if (!g) throw new MeshError(ErrorCodes.NotFound, `grant ${req.grant} does not exist; meshctl status lists the grants`);
    if (!g.provider || g.generation === 0 || !isTrue(g.conditions, "Provisioned")) {
      throw new MeshError(ErrorCodes.Conflict, `grant ${req.grant} is not provisioned yet (generation ${g.generation}); nothing to rotate until it is`, {
        retryable: true,
      });
    }
    const now = new Date();
    const holders = holdersOf(g, registrations, now);
    const to = superseded ? superseded.to + 1 : g.generation + 1;
    // A grant that moved provider: k+1 is made on the new one, k's resource released at commit.
    const fromProvider = handoverFrom(g);
    const { staged, stored } = await withAdapterOf(g.kind, g.provider, async (adapter) => {
      // Write-ahead: k+1's secret is stored (encrypted) before the provider is touched, so a crash rolls forward with it.
      const stored = await credentials.ensureStored(g, to, g.provider!, () => adapter.generate());
      // Stage k+1 beside k: both log in from here until the commit.
      const grant = { module: g.module, requirement: g.requirement, generation: to };
      return { staged: await adapter.create({ grant, secret: stored.secret, options: g.options, parts: g.parts }), stored };
    });
    await credentials.setBindings(g.module, g.requirement, to, staged.bindings, stored);
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
    if (superseded)
      log.warn(
        { rotation: rotation.id, superseded: superseded.id },
        `revocation ${rotation.id} supersedes rotation ${superseded.id}: generations ${superseded.from} and ${superseded.to} both go at its commit`,
      );
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
    deps.enqueue(key);
    return rotation;
  };

  /**
   * Rotating a secret that is the admin password of providers (docs/bootstrap.md, "Provider dependencies")
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
        log.warn(
          { grant: g.id, provider: doc.name },
          `rotating ${g.id}: ${f.message}; generation ${to} is set there when it answers again (repair: ${probe.policy})`,
        );
        continue;
      }
      if (f.state === "rejected") {
        throw new MeshError(
          ErrorCodes.ProviderRejected,
          `cannot rotate ${g.id}, the admin password of provider ${doc.name}: ${f.message}; nothing was told to its holders. Rotate again once it is fixed`,
          { retryable: true },
        );
      }
      await setAdminSecret(doc, probe, to, next);
      log.info(
        { grant: g.id, provider: doc.name },
        `rotating ${g.id}: generation ${to} set at the server of provider ${doc.name} (${doc.endpoint}) before its holders are told`,
      );
    }
  };

  return { rotate };
}
