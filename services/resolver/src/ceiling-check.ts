/**
 * Refusing at apply a `nats.user` requirement that no provider would issue: one that would
 * subscribe into another identity's inbox (whatever a ceiling says), or whose permissions reach
 * past the ceiling of every provider that serves `nats.user` (the stored ones, as the documents
 * of the same apply change them). Pure; the nats.user adapter checks
 * again when it issues, against the provider the grant got, which is what is enforced.
 * Nothing is said here when no provider serves the kind yet (resolution says `NoProvider`),
 * when one's ceiling is misconfigured (provisioning says so), or when the requirement's
 * options are invalid for another reason (provisioning names the option).
 */
import {
  Kinds,
  ceilingBreaches,
  ceilingRefusal,
  inboxRefusal,
  isMeshError,
  natsCeiling,
  natsPermissions,
  type ManifestDoc,
  type Problem,
  type ProviderDoc,
} from "@mesh/shared";
import { candidatesFor } from "./resolve.js";

/** The problems of `documents` (an apply's, indexed as sent) with the ceilings of `stored` and of the Providers among them. */
export function ceilingProblems(documents: readonly ManifestDoc[], stored: readonly ProviderDoc[]): Problem[] {
  const providers = new Map(stored.map((p) => [p.name, p]));
  for (const d of documents) if (d.kind === "Provider") providers.set(d.name, d);
  const candidates = candidatesFor(Kinds.NatsUser, [...providers.values()]);
  if (candidates.length === 0) return [];
  const problems: Problem[] = [];
  documents.forEach((doc, document) => {
    if (doc.kind !== "Module") return;
    doc.requires.forEach((req, i) => {
      if (req.kind !== Kinds.NatsUser) return;
      const grant = { module: doc.name, requirement: req.name };
      const subscribe = req.options?.subscribe;
      const inbox = (typeof subscribe === "string" ? [subscribe] : Array.isArray(subscribe) ? subscribe : []).flatMap((p) =>
        typeof p === "string" ? (inboxRefusal(p) ?? []) : [],
      );
      if (inbox.length) {
        // Whatever any provider's ceiling says: no identity may hear another's inbox.
        problems.push({ document, path: `requires[${i}].options.subscribe`, message: `nats.user ${grant.module}/${grant.requirement}: ${inbox.join("; ")}` });
        return;
      }
      const permissions = quietly(() => natsPermissions(doc.name, req.options));
      if (!permissions) return;
      const refusals: string[] = [];
      for (const p of candidates) {
        const ceiling = quietly(() => natsCeiling(p.name, p.options));
        if (!ceiling) return;
        const breaches = ceilingBreaches(permissions, ceiling, doc.name);
        if (breaches.length === 0) return;
        refusals.push(ceilingRefusal(grant, p.name, ceiling, breaches));
      }
      const message = refusals.length === 1 ? refusals[0]! : `no provider of ${Kinds.NatsUser} would issue it: ${refusals.join("; and ")}`;
      problems.push({ document, path: req.options ? `requires[${i}].options` : `requires[${i}]`, message });
    });
  });
  return problems;
}

/** What `fn` returns, or undefined when it throws a MeshError (another check reports those). */
function quietly<T>(fn: () => T): T | undefined {
  try {
    return fn();
  } catch (e) {
    if (isMeshError(e)) return undefined;
    throw e;
  }
}
