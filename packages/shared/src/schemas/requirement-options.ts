/**
 * A requirement's `options`, typed per kind: what each kind's adapter accepts, with what each
 * option means. The JSON Schemas give an editor these per kind, and the adapters take the
 * option names from here, so the two cannot disagree on what exists. The manifest itself stays
 * open (RequirementOptions in manifest.ts): the kind's adapter checks the values when the grant
 * is provisioned and names a bad one in the grant's condition (docs/reference/providers.md).
 */
import { z } from "zod";
import { DURATION_PATTERN } from "../duration.js";
import { Kinds, type Kind } from "../kinds.js";
import { MODULE_PLACEHOLDER } from "../nats-ceiling.js";

/** Most KV history: the clients' limit, enforced by the adapter because nats-server 2.9.10 takes more. */
export const MAX_HISTORY = 64;
/** The shortest ttl: nats-server refuses a stream `max_age` below 100 ms. */
export const MIN_TTL_MS = 100;
/** JetStream's largest replica count. */
export const MAX_REPLICAS = 5;
/** Longest subject pattern, and most patterns in one list, that a `nats.user` requirement may ask for. */
export const MAX_SUBJECT_LENGTH = 255;
export const MAX_SUBJECTS = 64;

const Subjects = z
  .union([z.string().min(1).max(MAX_SUBJECT_LENGTH), z.array(z.string().min(1).max(MAX_SUBJECT_LENGTH)).max(MAX_SUBJECTS)])
  .describe("A subject pattern or a list of them: dot-separated tokens of letters, digits, _, - and $, a token may be * and the last one >.");

const NatsUserOptions = z.strictObject({
  publish: Subjects.optional().describe("What the identity may publish to; app.<module>.> when left out. Within the provider's allowPublish ceiling."),
  subscribe: Subjects.optional().describe(
    "What the identity may subscribe to; app.<module>.> when left out. Within the provider's allowSubscribe ceiling; a pattern that reaches another identity's inbox (>, _INBOX.>, …) is refused.",
  ),
  denyPublish: Subjects.optional().describe("What the identity may not publish to even where publish allows it; only narrows, so no ceiling bounds it."),
  allowResponses: z
    .boolean()
    .optional()
    .describe("true: the identity may answer the requests it receives (once each, within 60 s), where the provider's allowResponses lists its module."),
});

const ttl = z
  .string()
  .regex(DURATION_PATTERN)
  .describe(`How long a value or object is kept, a duration of at least ${MIN_TTL_MS}ms (90s, 10m, 2h, 30d); kept until deleted when left out.`);
const maxBytes = z.int().min(1).describe("The most bytes the bucket holds; no limit when left out.");
const replicas = z.int().min(1).max(MAX_REPLICAS).describe(`Copies of the bucket, 1 to ${MAX_REPLICAS}; more than 1 only on a clustered server. 1 when left out.`);

const StoreOptions = z.strictObject({ ttl: ttl.optional(), maxBytes: maxBytes.optional(), replicas: replicas.optional() });
const KvBucketOptions = z.strictObject({
  history: z.int().min(1).max(MAX_HISTORY).optional().describe(`Values kept per key, 1 to ${MAX_HISTORY}; 1 when left out.`),
  ...StoreOptions.shape,
});
/** Images and packages are kept until deleted: no ttl. Only a registry served from the mesh's NATS (the control plane's bootstrap registry) takes these. */
const RegistryOptions = z.strictObject({ maxBytes: maxBytes.optional(), replicas: replicas.optional() });

/** The shortest and the default lifetime of a `tls.certificate`; its longest is the provider's `maxLifetime`. */
export const MIN_CERTIFICATE_LIFETIME_MS = 10_000;
export const DEFAULT_CERTIFICATE_LIFETIME = "24h";
/** Where a part's default name lies: `<part>.<module>.mesh`. */
export const MESH_DOMAIN = "mesh";
/** The names a `tls.certificate` provider issues to a module unless its `allowDnsNames` says: the module's own. */
export const DEFAULT_DNS_CEILING = [`*.${MODULE_PLACEHOLDER}.${MESH_DOMAIN}`] as const;
/** What a certificate may be used for: TLS servers, TLS clients, or both. */
export const CERTIFICATE_USAGES = ["server", "client", "both"] as const;
export type CertificateUsage = (typeof CERTIFICATE_USAGES)[number];

const Names = (what: string) => z.union([z.string().min(1).max(253), z.array(z.string().min(1).max(253)).max(MAX_SUBJECTS)]).describe(what);

const TlsCertificateOptions = z.strictObject({
  dnsNames: Names(
    "The DNS names the certificate is for; <part>.<module>.mesh for each part that holds it when left out. Within the provider's allowDnsNames ceiling; no wildcards.",
  ).optional(),
  ipAddresses: Names("The IP addresses the certificate is for; none when left out. Within the provider's allowIpAddresses ceiling (loopback by default).").optional(),
  lifetime: z
    .string()
    .regex(DURATION_PATTERN)
    .optional()
    .describe(
      `How long each certificate is valid, at least ${MIN_CERTIFICATE_LIFETIME_MS / 1000}s and at most the provider's maxLifetime; ${DEFAULT_CERTIFICATE_LIFETIME} when left out. Renewed after two thirds of it.`,
    ),
  usage: z.enum(CERTIFICATE_USAGES).optional().describe("server, client or both: the extended key usages; server when left out."),
});

/**
 * The options each kind takes; a kind not listed takes none (`mesh.identity`'s `part` and
 * `node` are the resolver's, never declared).
 */
export const REQUIREMENT_OPTIONS: Partial<Record<Kind, z.ZodObject>> = {
  [Kinds.NatsUser]: NatsUserOptions,
  [Kinds.KvBucket]: KvBucketOptions,
  [Kinds.ObjectStore]: StoreOptions,
  [Kinds.OciRegistry]: RegistryOptions,
  [Kinds.NpmRegistry]: RegistryOptions,
  [Kinds.TlsCertificate]: TlsCertificateOptions,
};

/** The names of the options `kind` takes, in the order they are listed in messages. */
export function requirementOptionNames(kind: Kind): readonly string[] {
  return Object.keys(REQUIREMENT_OPTIONS[kind]?.shape ?? {});
}
