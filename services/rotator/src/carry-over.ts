/**
 * A handover's copy of what a registry grant stores (its images, its packages) from the old
 * provider to the new one, run before the broadcast: no holder is told of k+1 on the new
 * provider until what it stored under k is there too. The old resource is read through the old
 * provider's adapter, the new one written through generation k+1's own bindings, as a holder
 * pushes (artifacts.ts).
 *
 * Resumable by being idempotent: a rotator that dies in the middle leaves the rotation
 * `Staged`; the next one runs the copy again, which skips every artifact the new provider has
 * with the same digest. While it runs, the record says how far it has come (`carrying`, at most
 * once a second: copy-progress.ts); the outcome is written with the move to `Broadcast`
 * (`carried`).
 */
import { ErrorCodes, MeshError, ProviderDoc, REGISTRY_KINDS, errorMessage, getCondition, keys, setCondition, type Rotation } from "@mesh/shared";
import { readJson } from "@mesh/shared/runtime";
import { copyArtifacts, type Artifact, type ArtifactSource, type CopyOutcome, type CopyProgress } from "@mesh/providers";
import type { RotatorContext } from "./rotator-context.js";
import { PROGRESS_WRITE_MS, everyAtMost, withCarrying } from "./copy-progress.js";

export type Carried = NonNullable<Rotation["carried"]>;

/** Whether rotation `r` carries data over: a handover of a registry grant. Pure. */
export const carriesOver = (r: Rotation) => r.fromProvider !== undefined && REGISTRY_KINDS.includes(r.kind);

export function carrier(ctx: RotatorContext, hooks: { onCopied?: (a: Artifact, done: CopyOutcome) => Promise<void> | void } = {}) {
  const { credentials, log, withAdapterOf, setGrant, records } = ctx;

  /**
   * Copies `r`'s artifacts from `r.fromProvider` to `r.provider`; undefined when `r` carries
   * nothing over. A copy that fails is said on the grant (`Rotating` `HandoverBlocked`, cleared
   * by the broadcast's own condition) and thrown, so the step is tried again.
   */
  const carry = async (r: Rotation): Promise<Carried | undefined> => {
    if (!carriesOver(r)) return undefined;
    try {
      return await copy(r);
    } catch (e) {
      const message = `handover ${r.id} from ${r.fromProvider} to ${r.provider} waits: copying what ${r.grant} stores at ${r.fromProvider} failed (${errorMessage(e)}); holders keep generation ${r.from} there meanwhile, and the copy is tried again by itself, resuming where it stopped`;
      await setGrant(keys.grant(r.module, r.requirement), (g) => {
        const cur = getCondition(g.conditions, "Rotating");
        if (cur && cur.reason !== "HandoverBlocked") return undefined;
        const conditions = setCondition(g.conditions, { type: "Rotating", status: "False", reason: "HandoverBlocked", message });
        return conditions === g.conditions ? undefined : { ...g, conditions };
      }).catch(() => undefined);
      throw e;
    }
  };

  const copy = async (r: Rotation): Promise<Carried> => {
    const at = () => new Date().toISOString();
    // The old provider was deleted: nothing of it can be read any more.
    if (!(await readJson(ctx.store.kv.providers, r.fromProvider!, ProviderDoc))) {
      const skipped = `provider ${r.fromProvider} is not registered any more, so nothing it stored for ${r.grant} could be copied`;
      log.warn({ rotation: r.id }, `handover ${r.id}: ${skipped}`);
      return { total: 0, copied: 0, present: 0, bytes: 0, at: at(), skipped };
    }
    const [from, to] = await Promise.all([credentials.read(r.module, r.requirement, r.from), credentials.read(r.module, r.requirement, r.to)]);
    if (!from?.bindings || !to?.bindings) {
      throw new MeshError(
        ErrorCodes.Internal,
        `handover ${r.id}: generation ${!from?.bindings ? r.from : r.to} of ${r.grant} has no bindings in the store, so what it stored cannot be carried over; the step is retried`,
        { retryable: true },
      );
    }
    const grant = (generation: number) => ({ module: r.module, requirement: r.requirement, generation });
    const rlog = log.child({ rotation: r.id, from: r.fromProvider, to: r.provider });
    return withAdapterOf(r.kind, r.fromProvider!, async (old) => {
      if (!old.artifactSource) {
        const skipped = `provider ${r.fromProvider}'s ${r.kind} adapter cannot list what the grant stores there, so nothing was copied; copy it to ${r.provider} by hand`;
        rlog.warn(`handover ${r.id}: ${skipped}`);
        return { total: 0, copied: 0, present: 0, bytes: 0, at: at(), skipped };
      }
      const source: ArtifactSource = await old.artifactSource({ grant: grant(r.from), bindings: from.bindings! });
      return withAdapterOf(r.kind, r.provider, async (next) => {
        if (!next.artifactSink) {
          throw new MeshError(
            ErrorCodes.ProviderMisconfigured,
            `handover ${r.id}: provider ${r.provider}'s ${r.kind} adapter cannot be written to, so what ${r.grant} stores at ${r.fromProvider} cannot be carried over; holders stay on generation ${r.from} there`,
          );
        }
        const sink = await next.artifactSink({ grant: grant(r.to), bindings: to.bindings! });
        rlog.info(`handover ${r.id}: carrying over what ${r.grant} stores at ${r.fromProvider} to ${r.provider}`);
        const due = everyAtMost(PROGRESS_WRITE_MS);
        /** Writes how far the copy has come into the record; a failed write is not the copy's: the next one says more. */
        const report = async (p: CopyProgress) => {
          if (!due(Date.now())) return;
          await records
            .update(keys.grant(r.module, r.requirement), (x) => withCarrying(x, r, p, at()))
            .catch((e: unknown) => rlog.debug({ err: e }, `handover ${r.id}: could not write the copy's progress`));
        };
        const out = await copyArtifacts(source, sink, {
          onProgress: report,
          onCopied: async (a, done) => {
            rlog.info({ artifact: a }, `handover ${r.id}: copied ${done.copied + done.present}/${done.total}`);
            await hooks.onCopied?.(a, done);
          },
        });
        rlog.info(out, `handover ${r.id}: carried over ${out.total} artifacts (${out.copied} copied now, ${out.present} there already)`);
        return { ...out, at: at() };
      });
    });
  };

  return { carry };
}
