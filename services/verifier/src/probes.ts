/**
 * The holders' side of a verification: probes asked of the agents of a grant's nodes (each
 * logs in from where its holders run), and the check that a probe report came on the subject of
 * the node and part it speaks for.
 */
import { ProbeReply, keys, parseGrantId, subjects, type Grant, type ProbeReport } from "@mesh/shared";
import { requestJson, type NatsConnection } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";

/** Probes of `g` from its holders' agents, asked for now; an agent that does not answer within `timeoutMs` is left out. */
export async function requestProbes(nc: NatsConnection, g: Grant, timeoutMs: number, log: Logger): Promise<ProbeReport[]> {
  const nodes = [...new Set(g.targets.map((t) => t.node))];
  const replies = await Promise.all(
    nodes.map(async (node) => {
      try {
        const reply = ProbeReply.safeParse(
          await requestJson(nc, subjects.probeRequest(node), { grant: g.id }, { service: `agent of node ${node}`, timeoutMs }),
        );
        if (!reply.success || !reply.data.ok) return [];
        return reply.data.reports.filter((r) => r.grant === g.id && r.node === node);
      } catch (e) {
        log.debug({ grant: g.id, node, err: e }, "no probe from this node's agent");
        return [];
      }
    }),
  );
  return replies.flat();
}

/**
 * The grant key (`<module>.<requirement>`) of report `r`, when it came on `subject`, the
 * subject of its own node and part (the only one that node's agent may publish it on);
 * undefined for a report that speaks for another node, part or grant than its subject.
 */
export function reportedGrantKey(subject: string, r: ProbeReport): string | undefined {
  const id = parseGrantId(r.grant);
  if (!id) return undefined;
  try {
    return subject === subjects.probeReport(r.node, id.module, r.part, id.requirement) ? keys.grant(id.module, id.requirement) : undefined;
  } catch {
    // Names that cannot be in a subject.
    return undefined;
  }
}
