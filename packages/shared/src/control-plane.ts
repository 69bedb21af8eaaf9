/**
 * The mesh's own control plane as a module of the mesh: module `mesh`, with a part per
 * service and per node agent, and the requirements they are satisfied with before anything
 * else is installed (docs/design.md, "The control plane is a consumer too"). `meshctl bootstrap`
 * applies what these functions return; nothing here talks to NATS.
 */
import { Kinds, MESH_CA_PROVIDER, REGISTRY_KINDS, type Kind } from "./kinds.js";
import { CONTROL_PLANE_MODULE, NAME_RULE, isValidName } from "./names.js";
import type { NatsPermissions } from "./nats-permissions.js";
import type { ModuleDoc, ProviderDoc, RequirementDoc } from "./schemas/manifest.js";
import { Buckets, Durables, Streams, grantId, keys, subjects, type BucketName } from "./subjects.js";
import { CeilingOptions, DEFAULT_NATS_CEILING, RESPONSES_CEILING_OPTION, scopedToModule } from "./nats-ceiling.js";
import { agentHolderStream, holderStreamUse } from "./holder-streams.js";
import { microPermissions } from "./micro.js";
import { DEFAULT_DNS_CEILING } from "./schemas/requirement-options.js";
import { partHolderPermissions } from "./part-identity.js";
import { OPERATOR_TOKEN, consoleAuditSubject, operatorRequestSubjects } from "./audit.js";

/** The bootstrap provider: the mesh's own NATS, serving identities and JetStream stores. */
export const BOOTSTRAP_PROVIDER = "mesh-nats";
/** The services of the control plane, one part each (agents have a part per node). */
export const CONTROL_PLANE_SERVICES = ["resolver", "provisioner", "verifier", "rotator"] as const;
export type ControlPlaneService = (typeof CONTROL_PLANE_SERVICES)[number];

/** Requirement names of the control plane's module. */
export const ControlPlaneRequirements = {
  /**
   * The source of record: the mesh's own buckets and streams (subjects.ts `SOURCE_OF_RECORD`),
   * which the `kv.bucket` adapter binds for this grant instead of making a bucket of its own.
   */
  records: "records",
  /** The images the agents install from (kind `oci.registry`). */
  images: "images",
  /** The packages the agents install from (kind `npm.registry`). */
  packages: "packages",
  /** The key credentials are encrypted under, for the services that read or write them. */
  masterKey: "master-key",
  /**
   * The certificate of the NATS server `meshctl up` and `bootstrap` run (kind `tls.certificate`),
   * held by part {@link NATS_SERVER_PART}: meshctl, which installs each generation, reloads the
   * server and confirms once a handshake shows it.
   */
  natsTls: "nats-tls",
} as const;

/** The part of the control plane that holds the certificate of the NATS server meshctl runs. */
export const NATS_SERVER_PART = "nats-server";

/**
 * The grant of the master key: the data keys the credentials store is encrypted under, one per
 * generation, wrapped by each service's local key-encryption key (providers' master-key-ring.ts).
 */
export const MASTER_KEY_GRANT = grantId(CONTROL_PLANE_MODULE, ControlPlaneRequirements.masterKey);

/** The grant of the source of record: the mesh's own buckets and streams (subjects.ts `SOURCE_OF_RECORD`), not a bucket of its own. */
export const RECORDS_GRANT = grantId(CONTROL_PLANE_MODULE, ControlPlaneRequirements.records);

/** The part of the agent of `node`. */
export function agentPart(node: string): string {
  return `agent-${node}`;
}

/** The durable consumer of the delivery stream that the agent of `node` reads. */
export function agentDurable(node: string): string {
  return `agent-${node}`;
}

/**
 * The JetStream API a node's agent may use, instead of `$JS.API.>`: nothing that creates,
 * changes, deletes or purges a stream, deletes a message or a consumer, or reads another
 * consumer's messages. It may read stream info and, by key, the buckets it reads or writes
 * (direct gets); create, look up and pull from its own durable of the delivery stream (and ack
 * there); and list the providers catalog for its reachability probes (an ordered push consumer
 * of that bucket, delivered to its own inbox). Measured on 2.9.10 with the server's trace of a
 * real agent process: these are all the API subjects it uses.
 */
function agentJetStream(node: string): string[] {
  const reads = [Buckets.grants, Buckets.manifests, Buckets.providers, Buckets.rotations].map((b) => `$JS.API.DIRECT.GET.KV_${b}.>`);
  // Of the records it writes, only its own node's (direct gets name the key in their subject).
  const own = nodeOwned(node).map(({ bucket, filter }) => `$JS.API.DIRECT.GET.KV_${bucket}.$KV.${bucket}.${filter}`);
  return [
    "$JS.API.INFO",
    "$JS.API.STREAM.INFO.*",
    ...reads,
    ...own,
    ...durableOf(Streams.deliveries, agentDurable(node)),
    ...listing(Buckets.providers),
    // Its own receipts, listed to find what its bindings root should hold (a root emptied is written again): the filter is in the subject.
    `$JS.API.CONSUMER.CREATE.KV_${Buckets.receipts}.*.$KV.${Buckets.receipts}.${keys.receiptsOfNode(node)}`,
    `$JS.API.CONSUMER.INFO.KV_${Buckets.receipts}.*`,
    ...holderStreamUse(agentHolderStream(node)),
    ...BOOTSTRAP_REGISTRY_BUCKETS.flatMap(objectStoreReads),
  ];
}

/** The object stores of the bootstrap registries the agents hold (`<module>_<requirement>`, jetstream-store-layout.ts). */
const BOOTSTRAP_REGISTRY_BUCKETS = [ControlPlaneRequirements.images, ControlPlaneRequirements.packages].map((r) => `${CONTROL_PLANE_MODULE}_${r}`);

/**
 * Reading an object store as @nats-io/obj does: an object's info (the last message of its meta
 * subject, by a get or a direct get), and its chunks and the listing through an ordered
 * consumer of the store's stream, filtered within it, delivered to the reader's inbox.
 */
const objectStoreReads = (bucket: string) => [
  `$JS.API.STREAM.MSG.GET.OBJ_${bucket}`,
  `$JS.API.DIRECT.GET.OBJ_${bucket}.>`,
  `$JS.API.CONSUMER.CREATE.OBJ_${bucket}.*.$O.${bucket}.>`,
];

/**
 * The records a node's agent writes, each under its own node's keys and nowhere else: its
 * node record, its reachability probes, and its receipts of deliveries (which the provisioner
 * folds into the grants: an agent writes no grant, so it cannot touch another node's holders
 * or any grant's generation, provider or conditions).
 */
function nodeOwned(node: string): Array<{ bucket: BucketName; filter: string }> {
  return [
    { bucket: Buckets.nodes, filter: node },
    { bucket: Buckets.reachability, filter: `${node}.>` },
    { bucket: Buckets.receipts, filter: keys.receiptsOfNode(node) },
  ];
}

/** The requirement holding the NATS identity of control-plane part `part`. */
export function identityRequirement(part: string): string {
  return `nats-${part}`;
}

/**
 * What every identity of the control plane needs beside its JetStream API: flow control of the
 * push consumers it lists buckets with. Its replies and JetStream deliveries come to its own
 * inbox prefix, which the nats.user adapter adds to every identity (no `_INBOX.>`); answers to
 * requests go out through the response permission of the services that serve them.
 */
const COMMON: NatsPermissions = {
  publish: ["$JS.FC.>"],
  subscribe: [],
};

/** Create, look up, pull from and ack a durable consumer of `stream` named `durable`. */
const durableOf = (stream: string, durable: string) => [
  `$JS.API.CONSUMER.INFO.${stream}.${durable}`,
  `$JS.API.CONSUMER.CREATE.${stream}.${durable}.>`,
  `$JS.API.CONSUMER.MSG.NEXT.${stream}.${durable}`,
  `$JS.ACK.${stream}.${durable}.>`,
];

/**
 * Listing a bucket (keys, watch, history): an ordered push consumer of it, with a name of the
 * client's, filtered within the bucket and delivered to the caller's inbox. On 2.9 its name
 * cannot be narrowed, so whoever may list a bucket may also create a consumer under another's
 * durable name on its stream (and so change that durable's editable settings): given only
 * for the buckets an identity lists, with the durables of others on them denied ({@link othersDurables}).
 */
const listing = (bucket: BucketName) => [`$JS.API.CONSUMER.CREATE.KV_${bucket}.*.$KV.${bucket}.>`, `$JS.API.CONSUMER.INFO.KV_${bucket}.*`];

/**
 * What listing `buckets` would let an identity do to the durables of others on their streams
 * (create one under its name, and so change its editable settings): denied, for every durable
 * but `own`. A deny wins over an allow on the server, so this carves them out of the listings.
 */
function othersDurables(buckets: readonly BucketName[], own: ReadonlyArray<{ stream: string; name: string }>): string[] {
  return Object.values(Durables)
    .filter((d) => buckets.includes(d.bucket) && !own.some((o) => o.stream === `KV_${d.bucket}` && o.name === d.name))
    .map((d) => `$JS.API.CONSUMER.CREATE.KV_${d.bucket}.${d.name}.>`);
}

/**
 * The JetStream API an identity of the control plane may use, never `$JS.API.>`: account and
 * stream info, reading the mesh's buckets by key (direct gets), its own durables, and listing the buckets in `lists`. Nothing that creates, changes, deletes or
 * purges a stream, deletes a message or a consumer, or pulls another consumer's messages: the
 * stores are made by the operator's admin (`meshctl up`, `bootstrap`) before the services move
 * onto these identities. What each service uses was measured with nats-server 2.9.10's trace of
 * the real processes through provisioning, rotations (of a database, a secret and the control
 * plane's own identities), verification and status, and checked against every bucket the
 * services' code lists (`listJson`, `keys`, `watch`).
 */
function jetStreamOf(durables: ReadonlyArray<{ stream: string; name: string }>, lists: readonly BucketName[]): string[] {
  return ["$JS.API.INFO", "$JS.API.STREAM.INFO.*", "$JS.API.DIRECT.GET.>", ...durables.flatMap((d) => durableOf(d.stream, d.name)), ...lists.flatMap(listing)];
}

/** A service's durables, as the streams and names its identity is allowed. */
const kvDurables = (...ds: Array<(typeof Durables)[keyof typeof Durables]>) => ds.map((d) => ({ stream: `KV_${d.bucket}`, name: d.name }));

/** Each service's durables and the buckets it lists. */
function serviceUse(service: ControlPlaneService): { durables: Array<{ stream: string; name: string }>; lists: BucketName[] } {
  switch (service) {
    case "resolver":
      return {
        durables: kvDurables(Durables.resolverManifests, Durables.resolverProviders, Durables.resolverReachability, Durables.resolverGrants),
        lists: [Buckets.grants, Buckets.manifests, Buckets.providers, Buckets.reachability, Buckets.modules, Buckets.nodes],
      };
    case "provisioner":
      return { durables: kvDurables(Durables.provisioner, Durables.provisionerReceipts), lists: [Buckets.grants, Buckets.credentials] };
    case "verifier":
      // The providers: a secret that is a provider's admin password is checked at that provider's server.
      // The instances: its membership (which verifier checks which grant) is watched there.
      // The modules: their states are one of the store's gauges, which one verifier reports (store-gauges.ts).
      return {
        durables: [],
        lists: [Buckets.grants, Buckets.verifications, Buckets.reachability, Buckets.nodes, Buckets.providers, Buckets.instances, Buckets.modules],
      };
    case "rotator":
      // The manifests: its schedule check reads every module's rotate policies (once a minute,
      // which the trace missed; seen refused in a rehearsal of the README's first command).
      // The providers: rotating a secret that is a provider's admin password sets it at that provider's server.
      // The receipts: an agent's says which part holds which grant, so its consumer is made.
      // The credentials: a rotation of the master key re-encrypts every record before it commits, and each commit lists a grant's generations to purge the old ones.
      return {
        durables: kvDurables(Durables.rotator, Durables.rotatorHandovers),
        lists: [Buckets.grants, Buckets.rotations, Buckets.holders, Buckets.manifests, Buckets.providers, Buckets.receipts, Buckets.credentials],
      };
  }
}

/** The JetStream API of a service (or a node's agent): what it may use, and what of that is denied. */
function jetStreamPermissions(service: ControlPlaneService | { agent: string }): { allow: string[]; deny: string[] } {
  if (typeof service === "object") return { allow: agentJetStream(service.agent), deny: othersDurables([Buckets.providers, Buckets.receipts], []) };
  const { durables, lists } = serviceUse(service);
  const allow = jetStreamOf(durables, lists);
  const deny = othersDurables(lists, durables);
  if (service === "rotator") {
    allow.push(...HOLDER_STREAMS_ADMIN);
    // Deleting a holder's consumer, or stepping its leader down, names only stream and consumer: every durable of the mesh's own is carved out.
    for (const verb of ["DELETE", "LEADER.STEPDOWN"])
      deny.push(...Object.values(Durables).map((d) => `$JS.API.CONSUMER.${verb}.KV_${d.bucket}.${d.name}`), `$JS.API.CONSUMER.${verb}.${Streams.deliveries}.*`);
  }
  return { allow, deny };
}

/**
 * What the rotator does to the holders' streams and consumers (holder-streams.ts): make a
 * stream (its name is one token, so this is any name; one that exists with other settings is
 * refused by the server), make a consumer filtered on broadcasts (the filter is in the subject,
 * so no consumer of any other stream), look at any consumer (its ack floor), and delete one.
 */
const HOLDER_STREAMS_ADMIN = [
  "$JS.API.STREAM.CREATE.*",
  `$JS.API.CONSUMER.CREATE.*.*.${subjects.rotationBroadcastsAll}`,
  "$JS.API.CONSUMER.INFO.*.*",
  "$JS.API.CONSUMER.DELETE.*.*",
  // Looking at a holder stream's consumers at once, and asking one whose replica is stuck behind for a new leader (holder-consumers.ts).
  "$JS.API.CONSUMER.LIST.*",
  "$JS.API.CONSUMER.LEADER.STEPDOWN.*.*",
];

/** The operator's requests on `subjects`: each bare (the bootstrap admin's) and as every named operator sends it (audit.ts). */
const operatorRequests = (...subjects: string[]) => subjects.flatMap(operatorRequestSubjects);

/** KV writes are publishes to `$KV.<bucket>.<key>`: each service may write the buckets it owns, and no other. */
const writes = (...buckets: BucketName[]) => buckets.map((b) => `$KV.${b}.>`);

/**
 * What each service may publish and subscribe to beyond JetStream's API: the buckets it
 * writes, the requests it serves, the events it sends. A node agent's are narrowed to its
 * own node, so one agent cannot answer for another node's probes, and it cannot write
 * providers, manifests, credentials or rotations.
 */
export function servicePermissions(service: ControlPlaneService | { agent: string }): NatsPermissions {
  const own = ((): NatsPermissions => {
    if (typeof service === "object") {
      const node = service.agent;
      return {
        publish: [
          // Not the bootstrap registries' object stores it reads (objectStoreReads): an agent
          // that could put there could replace an image or a package every node installs.
          ...nodeOwned(node).map(({ bucket, filter }) => `$KV.${bucket}.${filter}`),
          subjects.credentialFetchesOfNode(node),
          `mesh.probe.report.${node}.>`,
        ],
        subscribe: [subjects.probeRequest(node), ...microPermissions(microServiceName(service))],
      };
    }
    switch (service) {
      case "resolver":
        return {
          publish: [...writes(Buckets.grants, Buckets.modules, Buckets.manifests, Buckets.providers), subjects.audit(service)],
          subscribe: [...operatorRequests(subjects.apply, subjects.delete), subjects.applyPartsAll],
        };
      case "provisioner":
        return {
          publish: [...writes(Buckets.grants, Buckets.credentials), subjects.deliveriesAll, subjects.withdrawalsAll, subjects.audit(service)],
          subscribe: [subjects.credentialFetchesAll, subjects.credentialListsAll],
        };
      case "verifier":
        return {
          // Its own heartbeats only: no other service's membership.
          publish: [
            ...writes(Buckets.grants, Buckets.verifications),
            `$KV.${Buckets.instances}.${keys.instancesOf("verifier")}`,
            "mesh.probe.request.*",
            subjects.audit(service),
          ],
          subscribe: [...operatorRequests(subjects.verify), subjects.probeReportsAll],
        };
      case "rotator":
        return {
          // mesh-holders: an evicted SDK instance's registration is removed.
          publish: [
            ...writes(Buckets.grants, Buckets.rotations, Buckets.credentials, Buckets.holders),
            subjects.rotationBroadcastsAll,
            subjects.audit(service),
          ],
          // Every holder's ack, as the server's ack metric.
          subscribe: [...operatorRequests(subjects.rotate, subjects.evict), subjects.holderAckMetricsAll],
        };
    }
  })();
  const api = jetStreamPermissions(service);
  // Each service answers the NATS micro protocol (PING, INFO, STATS) under its own name; an agent's is added above.
  const micro = typeof service === "object" ? [] : microPermissions(microServiceName(service));
  return {
    publish: [...api.allow, ...COMMON.publish, ...own.publish],
    subscribe: [...COMMON.subscribe, ...own.subscribe, ...micro],
    ...(api.deny.length ? { denyPublish: api.deny } : {}),
    // The services answer requests, and an agent answers its node's probe requests; nothing else does.
    allowResponses: true,
  };
}

/**
 * What a named operator's identity may do (`meshctl admin add`): send the operator's requests
 * under its own name only (`mesh.api.<verb>.op.<name>`: the services read who asked from that),
 * read the store (stream info, reads by key and by sequence, ordered consumers of its streams:
 * `meshctl status`, `get`, `rotate --wait`, `audit`), and ask the services the NATS micro
 * protocol's questions. Nothing that writes the store, acks a delivery, creates or changes a
 * stream, or creates or deletes a consumer under one of the mesh's durable names: everything
 * it changes goes through a service, and so into the audit trail. Its own inbox prefix is added
 * where every identity's is (nats-permissions.ts `identityPermissions`).
 */
export function operatorPermissions(name: string): NatsPermissions {
  const durables = Object.values(Durables).flatMap((d) => [
    `$JS.API.CONSUMER.CREATE.KV_${d.bucket}.${d.name}`,
    `$JS.API.CONSUMER.CREATE.KV_${d.bucket}.${d.name}.>`,
    `$JS.API.CONSUMER.DELETE.KV_${d.bucket}.${d.name}`,
  ]);
  return {
    publish: [
      `mesh.api.*.${OPERATOR_TOKEN}.${name}`,
      // Its console sessions, recorded under its own name.
      consoleAuditSubject(name),
      "$JS.API.INFO",
      "$JS.API.STREAM.INFO.*",
      "$JS.API.STREAM.NAMES",
      "$JS.API.STREAM.LIST",
      "$JS.API.STREAM.MSG.GET.*",
      "$JS.API.DIRECT.GET.>",
      // Ordered consumers (named by the client, filtered in the subject on 2.9), and deleting them when done.
      "$JS.API.CONSUMER.CREATE.*",
      "$JS.API.CONSUMER.CREATE.*.*",
      "$JS.API.CONSUMER.CREATE.*.*.>",
      "$JS.API.CONSUMER.INFO.*.*",
      "$JS.API.CONSUMER.DELETE.*.*",
      // Reading the audit trail pulls from an ordered consumer of it; no other stream's consumers are pulled from.
      `$JS.API.CONSUMER.MSG.NEXT.${Streams.audit}.*`,
      "$JS.FC.>",
      "$SRV.>",
    ],
    subscribe: [],
    denyPublish: [
      ...durables,
      `$JS.API.CONSUMER.CREATE.${Streams.deliveries}.*`,
      `$JS.API.CONSUMER.CREATE.${Streams.deliveries}.*.>`,
      `$JS.API.CONSUMER.DELETE.${Streams.deliveries}.*`,
    ],
  };
}

/**
 * The name a service answers the NATS micro protocol as (micro.ts): `mesh-<service>`, and an
 * agent's `mesh-agent-<node>`, so that one node's agent may not listen for what is asked of
 * another's.
 */
export function microServiceName(service: string | { agent: string }): string {
  return typeof service === "object" ? `mesh-agent-${service.agent}` : `mesh-${service}`;
}

/** Where the control plane runs: its services on one node, an agent on each node. */
export interface ControlPlaneLayout {
  servicesNode: string;
  nodes: readonly string[];
  /** Copies of the control plane's own bucket and object store: 3 on a cluster (see storeReplicas); default 1. */
  replicas?: number;
  /**
   * The certificate of the NATS server meshctl runs, as requirement `nats-tls` of part
   * {@link NATS_SERVER_PART} on the services' node: the addresses it names and how long each
   * generation is valid (renewed at two thirds). Absent for a server meshctl does not run.
   */
  serverTls?: { ipAddresses: readonly string[]; lifetime: string };
}

/** Throws an Error naming the bad node or part when a name of the layout cannot be used. */
function checkLayout(layout: ControlPlaneLayout): void {
  for (const node of [layout.servicesNode, ...layout.nodes]) {
    const requirement = identityRequirement(agentPart(node));
    if (!isValidName(node) || !isValidName(requirement)) {
      throw new Error(
        `node name ${JSON.stringify(node)} cannot host the control plane: it ${NAME_RULE}, and ${JSON.stringify(requirement)} must too (at most 29 characters)`,
      );
    }
  }
}

/**
 * The control plane's own module: a part per service (on `servicesNode`) and per agent, the
 * source of record, the image and package registries (for the agents), the master key (for the services
 * that handle credentials) and one broker identity per part, limited to what it needs.
 */
export function controlPlaneManifest(layout: ControlPlaneLayout): ModuleDoc {
  checkLayout(layout);
  const nodes = [...new Set(layout.nodes)];
  const services = CONTROL_PLANE_SERVICES.map((name) => ({ name, node: layout.servicesNode, installed: true }));
  const agents = nodes.map((node) => ({ name: agentPart(node), node, installed: true }));
  const stores = layout.replicas && layout.replicas > 1 ? { options: { replicas: layout.replicas } } : {};
  const tls = layout.serverTls;
  // The part that holds the server's certificate is an SDK holder (meshctl): a part's identity.
  const serverPart = tls ? [{ name: NATS_SERVER_PART, node: layout.servicesNode, installed: true }] : [];
  const identities: RequirementDoc[] = [
    ...CONTROL_PLANE_SERVICES.map((s) => ({ part: s, permissions: servicePermissions(s) })),
    ...nodes.map((node) => ({ part: agentPart(node), permissions: servicePermissions({ agent: node }) })),
    ...serverPart.map((p) => ({ part: p.name, permissions: partHolderPermissions(CONTROL_PLANE_MODULE, p.node, p.name) })),
  ].map(({ part, permissions }) => ({
    name: identityRequirement(part),
    kind: Kinds.NatsUser,
    parts: [part],
    options: {
      publish: permissions.publish,
      subscribe: permissions.subscribe,
      ...(permissions.denyPublish ? { denyPublish: permissions.denyPublish } : {}),
      ...(permissions.allowResponses ? { allowResponses: true } : {}),
    },
  }));
  return {
    kind: "Module",
    name: CONTROL_PLANE_MODULE,
    parts: [...services, ...agents, ...serverPart],
    requires: [
      { name: ControlPlaneRequirements.records, kind: Kinds.KvBucket, parts: [...CONTROL_PLANE_SERVICES], ...stores },
      { name: ControlPlaneRequirements.images, kind: Kinds.OciRegistry, parts: agents.map((a) => a.name), ...stores },
      { name: ControlPlaneRequirements.packages, kind: Kinds.NpmRegistry, parts: agents.map((a) => a.name), ...stores },
      { name: ControlPlaneRequirements.masterKey, kind: Kinds.Secret, parts: ["provisioner", "verifier", "rotator"] },
      ...identities,
      ...(tls
        ? [
            {
              name: ControlPlaneRequirements.natsTls,
              kind: Kinds.TlsCertificate,
              parts: [NATS_SERVER_PART],
              // localhost: the name the NATS client checks the certificate of a server named by its IP address for.
              options: { dnsNames: ["localhost"], ipAddresses: [...tls.ipAddresses], usage: "server", lifetime: tls.lifetime },
            },
          ]
        : []),
    ],
  };
}

/**
 * Whether `provider` may serve `kind` to `module`. The bootstrap provider's registries (an
 * object store of the mesh's own NATS per grant, there before anything is installed) are the
 * control plane's alone: another module's `oci.registry` or `npm.registry` requirement finds
 * no provider in it, and is `NoProvider` until a registry server is registered as one.
 */
export function servesModule(provider: Pick<ProviderDoc, "name">, kind: Kind, module: string): boolean {
  return !(provider.name === BOOTSTRAP_PROVIDER && REGISTRY_KINDS.includes(kind) && module !== CONTROL_PLANE_MODULE);
}

/**
 * The mesh's certificate authority as provider `mesh-ca` of `tls.certificate`: its files are
 * on `node`, where the services that issue read them (the key sealed under the master key).
 * Its ceiling is the default (each module's own names, `<part>.<module>.mesh`, and loopback),
 * and `localhost` for the control plane's own server.
 */
export function meshCaProvider(opts: { node: string; certFile: string; keyFile: string }): ProviderDoc {
  return {
    kind: "Provider",
    name: MESH_CA_PROVIDER,
    serves: [Kinds.TlsCertificate],
    node: opts.node,
    endpoint: "builtin://mesh-ca",
    installed: true,
    // The default ceiling, and `localhost` for the control plane alone: the name the NATS client
    // checks a server's certificate for when the server is named by its IP address.
    options: { caCertFile: opts.certFile, caKeyFile: opts.keyFile, allowDnsNames: [...DEFAULT_DNS_CEILING, `${CONTROL_PLANE_MODULE}:localhost`] },
  };
}

/**
 * The mesh's NATS as the provider of identities and stores; it exists as soon as NATS runs. On
 * a server without authentication (`auth` left out) it serves only the parts' identities, as
 * bindings that carry the server's url alone.
 * It serves the registry kinds to module `mesh` only ({@link servesModule}), from JetStream object stores.
 * Its ceiling on `nats.user` permissions lets module `mesh` (the control plane, whose identities
 * need JetStream's API and the mesh's own subjects) ask for anything, and every other module
 * only the default: its own namespace.
 */
export function bootstrapProvider(opts: {
  /** `tls://host:port` for a server that requires TLS (with `caFile`, the bundle it is verified against). */
  url: string;
  node: string;
  /** The bundle that signs the server's certificate, on `node`; every identity's binding carries it as `ca.crt`. */
  caFile?: string;
  auth?: {
    /** The signing keys (sealed under the master key) with which nats.user issues and revokes identities. */
    signingKeysFile: string;
    /** The operator's admin: its `passwordFile` is its `.creds`. */
    admin: { username: string; passwordFile: string };
  };
}): ProviderDoc {
  const base = { kind: "Provider" as const, name: BOOTSTRAP_PROVIDER, node: opts.node, endpoint: opts.url, installed: true };
  const tls: Record<string, string> = opts.caFile ? { caFile: opts.caFile } : {};
  if (!opts.auth) return { ...base, serves: [Kinds.MeshIdentity], ...(opts.caFile ? { options: tls } : {}) };
  return {
    ...base,
    serves: [Kinds.NatsUser, Kinds.KvBucket, Kinds.ObjectStore, Kinds.MeshIdentity, ...REGISTRY_KINDS],
    admin: { username: opts.auth.admin.username, passwordFile: opts.auth.admin.passwordFile },
    options: {
      ...tls,
      signingKeysFile: opts.auth.signingKeysFile,
      [CeilingOptions.publish]: [...DEFAULT_NATS_CEILING.publish, scopedToModule(CONTROL_PLANE_MODULE, ">")],
      [CeilingOptions.subscribe]: [...DEFAULT_NATS_CEILING.subscribe, scopedToModule(CONTROL_PLANE_MODULE, ">")],
      // The control plane's services answer requests; no other module's identity may unless the operator says so.
      [RESPONSES_CEILING_OPTION]: [CONTROL_PLANE_MODULE],
    },
  };
}
