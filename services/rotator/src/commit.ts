/**
 * Ending a rotation: only once every holder confirmed (or at a revocation's grace), generation
 * k is retired at its provider (or, after a handover, released at the old one), the grant moves
 * to k+1, and generations past the history kept are purged from the store, off the commit's path.
 */
import {
  ErrorCodes,
  type Grant,
  MASTER_KEY_GRANT,
  RotationStates,
  CREDENTIAL_HISTORY,
  errorMessage,
  isMeshError,
  setCondition,
  withDeliveredCondition,
  type Rotation,
} from "@mesh/shared";
import { generationsToPurge, missingHolders, nameHolders, withRotatingCondition } from "./rotation-machine.js";
import type { RotatorContext } from "./rotator-context.js";

export function committer(ctx: RotatorContext): { commit(key: string, r: Rotation): Promise<void> } {
  const { log, opts, credentials, catalog, withAdapterOf, setGrant } = ctx;
  const commit = async (key: string, r: Rotation): Promise<void> => {
    // The master key's k+1 is known to every holder: the store moves under it before k is retired
    // (k still opens meanwhile; a crash here runs the pass again at the next commit step).
    if (r.grant === MASTER_KEY_GRANT) {
      const pass = await credentials.reencrypt();
      log.info(
        { rotation: r.id, keyId: pass.target, moved: pass.moved, passes: pass.passes },
        `rotation ${r.id}: the credentials store is under the master key's generation ${r.to} (${pass.moved} records re-encrypted)`,
      );
    }
    // Every holder confirmed k+1: only now does k stop working.
    const ended = r.fromProvider ? await release(r, r.fromProvider) : await retire(r);
    const now = new Date();
    // A revocation commits at its grace: who has not switched is locked out until it takes `to`.
    const lockedOut = r.revoke ? missingHolders(r) : [];
    if (r.revoke)
      log.warn(
        { rotation: r.id, lockedOut, reason: r.revoke.reason, by: r.revoke.by },
        `revocation ${r.id}: generation ${r.from} revoked${lockedOut.length ? `; locked out until they take generation ${r.to}: ${nameHolders(lockedOut)}` : ""}`,
      );
    await setGrant(key, (g) => {
      const revocation = r.revoke && {
        rotation: r.id,
        generation: r.from,
        at: now.toISOString(),
        ...(r.revoke.by ? { by: r.revoke.by } : {}),
        ...(r.revoke.reason ? { reason: r.revoke.reason } : {}),
        lockedOut,
      };
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
      if (purge.length)
        log.info(
          { rotation: r.id, purged: purge },
          `rotation ${r.id}: generations ${purge.join(", ")} purged from the store (it keeps the last ${opts.credentialHistory ?? CREDENTIAL_HISTORY})`,
        );
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
        log.warn(
          { rotation: r.id, provider },
          `provider ${provider} is not registered any more; what ${r.grant} had there, if anything, is left for its operator`,
        );
        return `handed over from ${provider}, which is not registered any more`;
      }
      // Every holder is on the new provider: the handover commits. The old generation could not
      // be ended on a provider that is down (often why the grant moved), so it is said, not hidden.
      log.warn({ rotation: r.id, provider, err: e }, `handover ${r.id}: generation ${r.from} could not be retired on ${provider}; it may still work there`);
      return `handed over from ${provider}, where generation ${r.from} could not be retired (${errorMessage(e)}): it may still work there: end it by hand on that server once it answers`;
    }
    log.info(
      { rotation: r.id, provider },
      `handover ${r.id}: generation ${r.from} retired on ${provider}; the resource there is kept, with its data, for its operator to move or drop`,
    );
    // A registry grant's images or packages were copied before the broadcast (carry-over.ts); anything else's data stays where it was.
    const data = r.carried
      ? r.carried.skipped
        ? `the resource kept with its data, which was not copied (${r.carried.skipped})`
        : `what it stored there copied here first (${r.carried.total} artifacts), the resource there kept as it was`
      : "the resource kept with its data (not moved)";
    return `handed over from ${provider}: generation ${r.from} retired there, ${data}; drop it when it is no longer needed`;
  };

  return { commit };
}
