/**
 * Every NATS subject, KV bucket and stream name the mesh uses, defined here and nowhere else.
 *
 * Subjects are laid out per node, module, part and requirement so that one permission
 * pattern can later give a holder exactly its own deliveries (`mesh.delivery.<node>.>`).
 */
import { isValidName } from "./names.js";

export const Buckets = {
  /** Module manifests as applied, key: module name. */
  manifests: "mesh-manifests",
  /** Provider documents, key: provider name. */
  providers: "mesh-providers",
  /** Grants (desired and observed), key: `<module>.<requirement>`. */
  grants: "mesh-grants",
  /** Encrypted credentials, key: `<module>.<requirement>.g<generation>`. */
  credentials: "mesh-credentials",
  /** Module states derived by the resolver, key: module name. */
  modules: "mesh-modules",
  /** Agents that have registered, key: node name. */
  nodes: "mesh-nodes",
} as const;
export type BucketName = (typeof Buckets)[keyof typeof Buckets];

export const Streams = {
  /** Delivery notifications to holders (no secret values in them). */
  deliveries: "MESH_DELIVERIES",
} as const;

/** Queue groups, so that several instances of a service share the work. */
export const QueueGroups = {
  resolver: "mesh-resolver",
  provisioner: "mesh-provisioner",
} as const;

function checked(...parts: string[]): string {
  for (const p of parts) {
    if (!isValidName(p)) throw new Error(`invalid name in subject: ${JSON.stringify(p)}`);
  }
  return parts.join(".");
}

export const subjects = {
  /** Request: apply a set of manifest documents (all or nothing). Served by the resolver. */
  apply: "mesh.api.apply",
  /** Request: fetch the values of a delivered credential, sealed to the caller's xkey. Served by the provisioner. */
  credentialFetch: "mesh.api.credential.fetch",
  /** Wildcard of all deliveries, the stream's subject space. */
  deliveriesAll: "mesh.delivery.>",
  /** Deliveries for every part on one node (an agent's filter). */
  deliveriesForNode: (node: string) => `mesh.delivery.${checked(node)}.>`,
  /** Deliveries for one part of a module, on whatever node it runs (an SDK holder's filter). */
  deliveriesForPart: (module: string, part: string) => `mesh.delivery.*.${checked(module, part)}.*`,
  /** Deliveries of one requirement to one part of a module, on whatever node it runs (an SDK holder narrowed to one grant). */
  deliveriesForPartRequirement: (module: string, part: string, requirement: string) =>
    `mesh.delivery.*.${checked(module, part, requirement)}`,
  /** The delivery subject of one grant to one part on one node. */
  delivery: (node: string, module: string, part: string, requirement: string) =>
    `mesh.delivery.${checked(node, module, part, requirement)}`,
} as const;

/** Grant id as users see it: `<module>/<requirement>`. */
export function grantId(module: string, requirement: string): string {
  return `${module}/${requirement}`;
}

/** Parses `<module>/<requirement>`; undefined when it is not a valid grant id. */
export function parseGrantId(id: string): { module: string; requirement: string } | undefined {
  const [module, requirement, ...rest] = id.split("/");
  if (rest.length || !module || !requirement || !isValidName(module) || !isValidName(requirement)) return undefined;
  return { module, requirement };
}

export const keys = {
  grant: (module: string, requirement: string) => checked(module, requirement),
  credential: (module: string, requirement: string, generation: number) =>
    `${checked(module, requirement)}.g${generation}`,
  /** Prefix filter of all generations of one grant's credential. */
  credentialsOf: (module: string, requirement: string) => `${checked(module, requirement)}.>`,
  /** Filter of every grant of one module. */
  grantsOf: (module: string) => `${checked(module)}.*`,
} as const;
