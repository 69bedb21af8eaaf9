/**
 * Every NATS subject, KV bucket and stream name the mesh uses, defined here and nowhere else.
 *
 * Subjects are laid out per node, module, part and requirement so that one permission
 * pattern can later give a holder exactly its own deliveries (`mesh.delivery.<node>.>`).
 */
import { isValidName } from "./names.js";
import { InboxRoots } from "./inboxes.js";

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
  /** The verifier's record of each grant (last check, agents' probes), key: `<module>.<requirement>`. */
  verifications: "mesh-verifications",
  /** Whether each provider answers from each node, as its agent sees it, key: `<node>.<provider>`. */
  reachability: "mesh-reachability",
  /** The rotation of each grant (the latest, running or committed), key: `<module>.<requirement>`. */
  rotations: "mesh-rotations",
  /** SDK holder instances, key: `<module>.<requirement>.<node>.<part>.<instance>`. */
  holders: "mesh-holders",
  /**
   * What each node's agent did with each grant for each part on its node (`DeliveryReceipt`),
   * key: `<node>.<module>.<requirement>.<part>`, the node first so that an agent may write its
   * own node's receipts and nothing else; the provisioner folds them into the grants.
   */
  receipts: "mesh-receipts",
  /**
   * The live instances of each service that splits its work by key (membership.ts), key:
   * `<service>.<instance>`, a heartbeat each second; stale ones age out.
   */
  instances: "mesh-instances",
} as const;
export type BucketName = (typeof Buckets)[keyof typeof Buckets];

export const Streams = {
  /** Delivery notifications to holders (no secret values in them). */
  deliveries: "MESH_DELIVERIES",
  /**
   * The audit trail (audit.ts): who asked what, and what came of it. Append-only: made with
   * `deny_delete` and `deny_purge`, aged out by its own limits, never written over.
   */
  audit: "MESH_AUDIT",
} as const;

/**
 * The source of record: every bucket and stream the services keep their state in. Grant
 * `mesh/records` (the control plane's `records` requirement) is this store: its binding names
 * them (`buckets`, `streams`, comma-separated), and a service started on that binding
 * (`MESH_RECORDS_BINDING`) checks that what it opens is what the grant names (service-main.ts).
 */
export const SOURCE_OF_RECORD: { readonly buckets: readonly BucketName[]; readonly streams: readonly string[] } = {
  buckets: Object.values(Buckets),
  streams: Object.values(Streams),
};

/**
 * The services' durable consumers, by the bucket whose stream they read: one place for their
 * names, which the services consume under and their identities are allowed (control-plane.ts).
 */
export const Durables = {
  provisioner: { bucket: Buckets.grants, name: "provisioner" },
  resolverManifests: { bucket: Buckets.manifests, name: "resolver-manifests" },
  resolverProviders: { bucket: Buckets.providers, name: "resolver-providers" },
  resolverReachability: { bucket: Buckets.reachability, name: "resolver-reachability" },
  resolverGrants: { bucket: Buckets.grants, name: "resolver-grants" },
  rotator: { bucket: Buckets.rotations, name: "rotator" },
  rotatorHandovers: { bucket: Buckets.grants, name: "rotator-handovers" },
  provisionerReceipts: { bucket: Buckets.receipts, name: "provisioner-receipts" },
} as const satisfies Record<string, { bucket: BucketName; name: string }>;

/** One of the mesh's own durables of a bucket's stream. */
export type KvDurable = (typeof Durables)[keyof typeof Durables];

/** Queue groups, so that several instances of a service share the work. */
export const QueueGroups = {
  resolver: "mesh-resolver",
  provisioner: "mesh-provisioner",
  verifier: "mesh-verifier",
  rotator: "mesh-rotator",
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
  /** Request: delete modules and providers, or drop what a removed grant retained (all or nothing). Served by the resolver; the operator's alone. */
  delete: "mesh.api.delete",
  /**
   * Request: part `part` of `module` on `node` declares its own module again (a part's identity
   * may publish here, and nowhere else on the apply path; the subject, never the body, says who
   * sent it). The resolver lets it add, change or remove only the requirements that are its own.
   */
  applyPart: (module: string, node: string, part: string) => `mesh.api.apply.${checked(module, node, part)}`,
  /** Every part's apply subject (the resolver's subscription). */
  applyPartsAll: "mesh.api.apply.*.*.*",
  /**
   * Request: fetch the values of a delivered credential for part `part` on `node`, sealed to the
   * caller's xkey. Served by the provisioner, which refuses a body that names another grant,
   * node or part than the subject: only that part's identity (and that node's agent) may
   * publish here, so the subject is the authentication.
   */
  credentialFetch: (module: string, requirement: string, node: string, part: string) => `mesh.api.credential.fetch.${checked(module, requirement, node, part)}`,
  /** Every credential fetch (the provisioner's subscription). */
  credentialFetchesAll: "mesh.api.credential.fetch.>",
  /**
   * Request: the current delivery of every grant delivered to part `part` on `node`
   * ({@link CredentialListReply}); the body is empty, the subject says who asks. Served by the provisioner.
   */
  credentialList: (module: string, node: string, part: string) => `mesh.api.credential.list.${checked(module, node, part)}`,
  /** Every credential list request (the provisioner's subscription). */
  credentialListsAll: "mesh.api.credential.list.*.*.*",
  /** The fetches for every part on one node (what its agent may publish to). */
  credentialFetchesOfNode: (node: string) => `mesh.api.credential.fetch.*.*.${checked(node)}.*`,
  /** The fetches of one part on one node, for any requirement of its module (what its identity may publish to). */
  credentialFetchesOfPart: (module: string, node: string, part: string) => `mesh.api.credential.fetch.${checked(module)}.*.${checked(node, part)}`,
  /** Wildcard of all deliveries, the stream's subject space. */
  deliveriesAll: "mesh.delivery.>",
  /** Deliveries for every part on one node (an agent's filter). */
  deliveriesForNode: (node: string) => `mesh.delivery.${checked(node)}.>`,
  /** Deliveries for one part of a module, on whatever node it runs (an SDK holder's filter). */
  deliveriesForPart: (module: string, part: string) => `mesh.delivery.*.${checked(module, part)}.*`,
  /** Deliveries to one part of a module on one node (what its identity may subscribe to). */
  deliveriesForPartOnNode: (node: string, module: string, part: string) => `mesh.delivery.${checked(node, module, part)}.*`,
  /**
   * Event (core NATS, in no stream): the part no longer holds the grant, which was taken back
   * (the withdrawal its node's agent also gets as a Delivery). SDK holders listen here, on a
   * subject that carries nothing else, so a rotation's deliveries do not reach each of them.
   */
  withdrawal: (node: string, module: string, part: string, requirement: string) => `mesh.withdrawal.${checked(node, module, part, requirement)}`,
  /** Every withdrawal of one part on one node (what its identity may subscribe to). */
  withdrawalsForPartOnNode: (node: string, module: string, part: string) => `mesh.withdrawal.${checked(node, module, part)}.*`,
  /** Wildcard of every withdrawal (the provisioner publishes them). */
  withdrawalsAll: "mesh.withdrawal.>",
  /** Deliveries of one requirement to one part of a module, on whatever node it runs (an SDK holder narrowed to one grant). */
  deliveriesForPartRequirement: (module: string, part: string, requirement: string) => `mesh.delivery.*.${checked(module, part, requirement)}`,
  /** Request: check a grant now ({@link VerifyRequest}). Served by the verifier. */
  verify: "mesh.api.verify",
  /** Event: an agent's probe of one grant for one part on its node ({@link ProbeReport}). */
  probeReport: (node: string, module: string, part: string, requirement: string) => `mesh.probe.report.${checked(node, module, part, requirement)}`,
  /** Every probe report (the verifier's subscription). */
  probeReportsAll: "mesh.probe.report.>",
  /** Request: the agent of `node` probes now ({@link ProbeRequest}). */
  probeRequest: (node: string) => `mesh.probe.request.${checked(node)}`,
  /** Request: rotate a grant ({@link RotateRequest}). Served by the rotator. */
  rotate: "mesh.api.rotate",
  /** Request: commit a grant's running rotation without the holders named ({@link EvictRequest}). Served by the rotator; the operator's alone. */
  evict: "mesh.api.evict",
  /**
   * Event, stored in the holder stream of `node`'s agent (holder-streams.ts): a rotation of grant
   * `<module>/<requirement>` started ({@link RotationBroadcast}), for the agent holding it for `part`.
   */
  agentRotation: (node: string, module: string, requirement: string, part: string) => `mesh.rotation.node.${checked(node, module, requirement, part)}`,
  /** Every broadcast to `node`'s agent: its holder stream's subjects. */
  agentRotationsAll: (node: string) => `mesh.rotation.node.${checked(node)}.>`,
  /** Event, stored in the holder stream of part `part` of `module` on `node`: a rotation of its grant `requirement` started, for every SDK instance of the part. */
  partRotation: (module: string, node: string, part: string, requirement: string) => `mesh.rotation.part.${checked(module, node, part, requirement)}`,
  /** Every broadcast to the SDK instances of one part on one node: its holder stream's subjects. */
  partRotationsAll: (module: string, node: string, part: string) => `mesh.rotation.part.${checked(module, node, part)}.>`,
  /** The server's ack metric of every consumer (`$JS.EVENT.METRIC.CONSUMER.ACK.<stream>.<consumer>`): the rotator counts holders' confirmations from them. */
  holderAckMetricsAll: "$JS.EVENT.METRIC.CONSUMER.ACK.*.*",
  /** JetStream's request that consumer `consumer` of `stream` elect a new leader (the client has no call for it): the rotator's repair of a holder consumer's replica stuck behind. */
  consumerLeaderStepdown: (stream: string, consumer: string) => `$JS.API.CONSUMER.LEADER.STEPDOWN.${stream}.${consumer}`,
  /** JetStream's request for a snapshot of `stream` (`meshctl backup`; the client has no call for it). */
  streamSnapshot: (stream: string) => `$JS.API.STREAM.SNAPSHOT.${stream}`,
  /** JetStream's request to restore a snapshot as stream `stream` (`meshctl restore`). */
  streamRestore: (stream: string) => `$JS.API.STREAM.RESTORE.${stream}`,
  /** Every broadcast to any holder (what the rotator publishes). */
  rotationBroadcastsAll: "mesh.rotation.*.>",
  /**
   * The reply-subject prefix of part `part` of `module` on `node` (its connections' `inboxPrefix`):
   * only its identity may subscribe under it, so no part reads another's replies, nor the
   * JetStream deliveries its instances pull.
   */
  partInboxPrefix: (module: string, node: string, part: string) => `${InboxRoots.part}.${checked(module, node, part)}`,
  /**
   * The reply-subject prefix of `nats.user` grant `<module>/<requirement>` (its `inboxPrefix`
   * binding): every connection made with that identity, the control plane's services and agents
   * included, takes its replies and JetStream deliveries there, and only that identity may
   * subscribe under it.
   */
  grantInboxPrefix: (module: string, requirement: string) => `${InboxRoots.grant}.${checked(module, requirement)}`,
  /** Where service `service` records what it was asked (the audit stream's subjects; a service's identity may publish under its own name only). */
  audit: (service: string) => `mesh.audit.${checked(service)}`,
  /** The audit stream's subject space. */
  auditAll: "mesh.audit.>",
  /** The delivery subject of one grant to one part on one node. */
  delivery: (node: string, module: string, part: string, requirement: string) => `mesh.delivery.${checked(node, module, part, requirement)}`,
} as const;

/**
 * Subjects of {@link subjects} that messages of a rotation travel on, with their names as
 * placeholders: a span's low-cardinality `messaging.destination.template` and name (the
 * subject itself is `messaging.destination.name`). Never a subject to publish to.
 */
export const SubjectTemplates = {
  agentRotation: "mesh.rotation.node.{node}.{module}.{requirement}.{part}",
  partRotation: "mesh.rotation.part.{module}.{node}.{part}.{requirement}",
  delivery: "mesh.delivery.{node}.{module}.{part}.{requirement}",
} as const;

/**
 * The subject space of one module's own traffic, `app.<module>.>`: what a `nats.user` of the
 * module may publish and subscribe to unless its requirement says otherwise.
 */
export function moduleSubjectPattern(module: string): string {
  return `app.${checked(module)}.>`;
}

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
  credential: (module: string, requirement: string, generation: number) => `${checked(module, requirement)}.g${generation}`,
  /** Prefix filter of all generations of one grant's credential. */
  credentialsOf: (module: string, requirement: string) => `${checked(module, requirement)}.>`,
  /** Reachability of `provider` from `node`. */
  reachability: (node: string, provider: string) => checked(node, provider),
  /** An SDK holder instance of a grant. */
  holder: (module: string, requirement: string, node: string, part: string, instance: string) => checked(module, requirement, node, part, instance),
  /** Filter of every SDK holder instance of one grant. */
  holdersOf: (module: string, requirement: string) => `${checked(module, requirement)}.>`,
  /** Filter of the SDK instances of one part on one node, for any requirement of its module. */
  holdersOfPartAll: (module: string, node: string, part: string) => `${checked(module)}.*.${checked(node, part)}.*`,
  /** Filter of every grant of one module. */
  grantsOf: (module: string) => `${checked(module)}.*`,
  /** The receipt of node `node`'s agent for `part`'s holding of grant `<module>/<requirement>`. */
  receipt: (node: string, module: string, requirement: string, part: string) => checked(node, module, requirement, part),
  /** Filter of every receipt of node `node`'s agent: all it may write. */
  receiptsOfNode: (node: string) => `${checked(node)}.>`,
  /** Filter of the membership heartbeats of `service` (membership.ts): all its instances may write. */
  instancesOf: (service: string) => `${checked(service)}.>`,
} as const;

/** The holder and grant a receipt's key names ({@link keys.receipt}), or undefined for a key that is not one. */
export function parseReceiptKey(key: string): { node: string; module: string; requirement: string; part: string } | undefined {
  const names = key.split(".");
  if (names.length !== 4 || !names.every(isValidName)) return undefined;
  const [node, module, requirement, part] = names as [string, string, string, string];
  return { node, module, requirement, part };
}
