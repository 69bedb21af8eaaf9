/**
 * The broadcast of a rotation: one message into each holder stream with holders of the grant
 * (holder-streams.ts in @mesh/shared), after every holder's consumer is made sure of; for the
 * SDK instances of a part, k+1's values in it under the part's rotation key.
 */
import {
  broadcastKey,
  Grant,
  encryptForPart,
  holderEndpoint,
  keys,
  parseHolderId,
  partRotationKey,
  SubjectTemplates,
  type HolderEndpoint,
  type MeshError,
  type Rotation,
  type RotationBroadcast,
} from "@mesh/shared";
import { holderSpanAttributes, isJetStreamGap, lostStream, readJson, withProducerSpan } from "@mesh/shared/runtime";
import { contextOfTraceparent } from "./trace-context.js";
import { ensureAll, type HolderConsumers } from "./holder-consumers.js";
import type { RotatorContext } from "./rotator-context.js";

export function broadcaster(
  ctx: RotatorContext,
  consumers: HolderConsumers,
): (r: Rotation, again?: { only: ReadonlySet<string>; round: number }) => Promise<Rotation["broadcasts"]> {
  const { store, log, credentials } = ctx;
  /**
   * Publishes the broadcast of `r`: one message into each holder stream that has holders of the
   * grant (all the SDK instances of a part share one; an agent gets one per part it holds for),
   * after making sure every holder's consumer is there. Returns where each went, with its
   * stream sequence: a holder has confirmed once its consumer acknowledged that sequence.
   * Idempotent: a broadcast sent again after a crash is de-duplicated by its message id.
   * `again`: published again into `only` (`<stream> <subject>`), the holder streams that do not
   * hold it, as round `round`: a message id of its own, which the server's memory of the first
   * (a message deleted from the stream) does not swallow, and two instances' same round does.
   */
  const broadcast = async (r: Rotation, again?: { only: ReadonlySet<string>; round: number }): Promise<Rotation["broadcasts"]> => {
    const endpoints = Object.keys(r.holders).flatMap((holder) => {
      const endpoint = holderEndpoint(r.grant, holder);
      return endpoint && (!again || again.only.has(broadcastKey(endpoint.stream, endpoint.subject))) ? [{ holder, endpoint }] : [];
    });
    const failed = await ensureAll(consumers, endpoints);
    // Those holders' consumers are made again on every sweep until they take; until then they have not confirmed.
    for (const f of failed)
      log.warn(
        { rotation: r.id, holder: f.holder, err: f.error },
        `rotation ${r.id}: could not make the consumer of holder ${f.holder}; tried again on the next sweep`,
      );
    const b: RotationBroadcast = {
      rotation: r.id,
      grant: r.grant,
      module: r.module,
      requirement: r.requirement,
      kind: r.kind,
      provider: r.provider,
      from: r.from,
      to: r.to,
      publishedAt: new Date().toISOString(),
    };
    const plain = JSON.stringify(b);
    // Asked once per broadcast: a server that lost one of the account's streams lost them all, and
    // thousands of holder streams must not each ask it.
    let lost: Promise<MeshError | undefined> | undefined;
    const targets = new Map<string, { e: HolderEndpoint; holder: string }>();
    for (const { endpoint, holder } of endpoints) targets.set(broadcastKey(endpoint.stream, endpoint.subject), { e: endpoint, holder });
    // For the SDK instances of a part: k+1 in the message, under the part's key, so none of them need fetch it.
    const forParts = [...targets.values()].some((t) => t.e.sdk) ? await valuesForParts(r) : undefined;
    return Promise.all(
      [...targets.values()].map(async ({ e, holder }) => {
        // One PRODUCER span per holder stream's message (an agent-held part, or every SDK instance of a part), the rotation's child; each holder's span is its child.
        const h = parseHolderId(holder)!;
        const data =
          e.sdk && forParts
            ? JSON.stringify({
                ...b,
                values: encryptForPart(partRotationKey(ctx.kek, r.grant, h.node, h.part, forParts.createdAt), b, h.node, h.part, forParts.values),
              })
            : plain;
        const attributes = {
          ...holderSpanAttributes({ rotation: r.id, grant: r.grant, node: h.node, part: h.part, holder: `${h.node}/${h.part}`, generation: r.to }),
          "messaging.destination.stream": e.stream,
        };
        const ack = await withProducerSpan(
          "rotator",
          e.subject,
          e.sdk ? SubjectTemplates.partRotation : SubjectTemplates.agentRotation,
          attributes,
          contextOfTraceparent(r.traceparent),
          (headers) =>
            store.js
              .publish(e.subject, data, { msgID: `${r.id}@${r.requestedAt}:${e.subject}${again ? `#${again.round}` : ""}`, headers })
              .catch(async (err: unknown) => {
                // No stream took it: one the server lost (a restart brings it back) is said as such.
                throw (isJetStreamGap(err) ? await (lost ??= lostStream(store.nc, store.jsm, e.stream)) : undefined) ?? err;
              }),
        );
        return { stream: e.stream, subject: e.subject, seq: ack.seq };
      }),
    );
  };

  /** k+1's values and the grant's incarnation, for the parts' messages; undefined (their instances fetch) when they cannot be read. */
  const valuesForParts = async (r: Rotation): Promise<{ values: Record<string, string>; createdAt: string | undefined } | undefined> => {
    try {
      const [cred, grant] = await Promise.all([
        credentials.read(r.module, r.requirement, r.to),
        readJson(store.kv.grants, keys.grant(r.module, r.requirement), Grant),
      ]);
      return cred?.bindings ? { values: cred.bindings, createdAt: grant?.value.createdAt } : undefined;
    } catch (e) {
      log.warn({ rotation: r.id, err: e }, "could not read the new values for the parts' broadcast; their instances fetch them");
      return undefined;
    }
  };

  return broadcast;
}
