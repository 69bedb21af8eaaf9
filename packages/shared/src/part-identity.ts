/**
 * A workload identity for every installed part: the mesh adds to each module (but its own
 * control plane, whose parts have identities of their own) one requirement per part, of kind
 * `mesh.identity`, that no document may declare. Its grant is provisioned, delivered, verified
 * and rotated like any other; the node's agent writes it into the part's directory as the
 * binding named `identity` (`type` nats, `url`, `creds`, `inboxPrefix`), and
 * `connectWithIdentity` in @mesh/client connects with it. Pure functions; nothing here talks to NATS.
 */
import { createHash } from "node:crypto";
import { Kinds } from "./kinds.js";
import { CONTROL_PLANE_MODULE, IDENTITY_BINDING, NAME_MAX_LENGTH } from "./names.js";
import { Buckets, keys, subjects, type BucketName } from "./subjects.js";
import type { NatsPermissions } from "./nats-permissions.js";
import { holderStreamUse, partHolderStream } from "./holder-streams.js";
import { confineToInbox } from "./inboxes.js";
import type { ModuleDoc, RequirementDoc } from "./schemas/manifest.js";

const PREFIX = `${IDENTITY_BINDING}-`;

/**
 * The requirement of part `part`'s identity: `identity-<part>`, or, for a part name too long for
 * that to be a name, its first characters and a hash of it (`identity-<22 chars>-<8 hex>`).
 */
export function partIdentityRequirement(part: string): string {
  const plain = PREFIX + part;
  if (plain.length <= NAME_MAX_LENGTH) return plain;
  const hash = createHash("sha256").update(part).digest("hex").slice(0, 8);
  return `${PREFIX}${part.slice(0, NAME_MAX_LENGTH - PREFIX.length - 9).replace(/-+$/, "")}-${hash}`;
}

/** What the identity requirement's options carry: the part and the node its permissions name. */
export interface PartIdentityOptions {
  part: string;
  node: string;
}

/**
 * The identity requirements of `module`'s parts, one each (none for the control plane's own
 * module, whose parts have their `nats-<part>` identities): the resolver resolves them with the
 * declared ones when some provider serves `mesh.identity`.
 */
export function partIdentityRequirements(module: ModuleDoc): RequirementDoc[] {
  if (module.name === CONTROL_PLANE_MODULE) return [];
  return module.parts.map((p) => ({
    name: partIdentityRequirement(p.name),
    kind: Kinds.MeshIdentity,
    parts: [p.name],
    options: { part: p.name, node: p.node } satisfies PartIdentityOptions,
  }));
}

/** Reads of one module's records in `bucket` by key: direct gets, which name the key in their subject. */
const readsOf = (bucket: BucketName, module: string) => `$JS.API.DIRECT.GET.KV_${bucket}.$KV.${bucket}.${keys.grantsOf(module)}`;

/**
 * The workload identity of part `part` of `module` on `node`: exactly what an SDK instance of
 * it needs to hold its module's credentials through their rotations (`holdCredential` in
 * @mesh/client) or watch them (`watchCredentials`), and to declare its own module (`declare`), and nothing else — no JetStream API
 * but reading its own module's grants and
 * rotation records by key, its instances' registrations in `mesh-holders`, fetching for itself
 * (the subjects name its module, node and part), pulling from and acknowledging on the consumers
 * of its own holder stream (holder-streams.ts: the server refuses an ack on any other's), and
 * replies and deliveries under its own inbox prefix (`subjects.partInboxPrefix`, inboxes.ts: no
 * other inbox, and no answering requests: it serves none). Application
 * traffic is not in it: that comes through a declared `nats.user` requirement. Throws an Error
 * naming a bad name.
 */
export function partIdentityPermissions(module: string, node: string, part: string): NatsPermissions {
  return confineToInbox(partHolderPermissions(module, node, part), subjects.partInboxPrefix(module, node, part));
}

/**
 * What an SDK instance of part `part` needs of the mesh (see {@link partIdentityPermissions}),
 * without an inbox: for an identity whose inbox its issuer confines it to (a `nats.user` grant's).
 */
export function partHolderPermissions(module: string, node: string, part: string): NatsPermissions {
  return {
    publish: [
      readsOf(Buckets.grants, module),
      `$KV.${Buckets.holders}.${keys.holdersOfPartAll(module, node, part)}`,
      subjects.credentialFetchesOfPart(module, node, part),
      ...holderStreamUse(partHolderStream(module, node, part)),
      subjects.applyPart(module, node, part),
      subjects.credentialList(module, node, part),
    ],
    subscribe: [subjects.deliveriesForPartOnNode(node, module, part), subjects.withdrawalsForPartOnNode(node, module, part)],
  };
}

/** The directory of requirement `requirement`'s binding in part `part`'s directory: {@link IDENTITY_BINDING} for the part's identity. */
export function bindingNameOf(part: string, requirement: string): string {
  return requirement === partIdentityRequirement(part) ? IDENTITY_BINDING : requirement;
}

/** The requirement whose binding is directory `name` of part `part`'s directory (the inverse of {@link bindingNameOf}). */
export function requirementOfBinding(part: string, name: string): string {
  return name === IDENTITY_BINDING ? partIdentityRequirement(part) : name;
}
