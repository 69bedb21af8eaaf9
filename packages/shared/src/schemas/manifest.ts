/**
 * The manifest documents a user applies: `Provider` and `Module`.
 *
 * Validation lists every problem by path (`requires[0].kind: required`), and a file is
 * accepted only as a whole: {@link validateDocuments} (and `parseManifestText`, manifest-text.ts,
 * for a file's text) returns documents or problems, never both.
 */
import { z } from "zod";
import { RotatePolicy } from "./rotation.js";
import { BINDING_KEY_PATTERN, IDENTITY_BINDING, NAME_RULE, NAME_PATTERN, isReservedRequirementName } from "../names.js";
import { parseGrantId } from "../subjects.js";
import { KIND_LIST, Kinds, TLS_PROVIDER_KINDS, servedByNats } from "../kinds.js";
import { RepairPolicy, VerifyPolicy } from "./verification.js";
import { Limits } from "../limits.js";
import { BINDING_KEYS, ENV_NAME_PATTERN } from "../binding-env.js";

/** "at most N <what>", the message of every list and length limit. */
const atMost = (n: number, what: string) => ({ message: `at most ${n} ${what}` });

export const Name = z.string().regex(NAME_PATTERN, { message: NAME_RULE });

/**
 * `<module>/<requirement>`, both valid names: the shape as a pattern without look-ahead (it
 * goes into the JSON Schemas), the lengths by parsing.
 */
const GrantIdRef = z
  .string()
  .regex(/^[a-z](?:-?[a-z0-9])*\/[a-z](?:-?[a-z0-9])*$/, { message: "must name a grant as <module>/<requirement>" })
  .refine((id) => parseGrantId(id) !== undefined, { message: `must name a grant as <module>/<requirement>, each of which ${NAME_RULE}` });

const AdminCredential = z
  .strictObject({
    username: z.string().min(1).max(63).describe("The user the provisioner administers the server as."),
    passwordEnv: z
      .string()
      .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, { message: "must be an environment variable name" })
      .optional()
      .describe(
        "A variable of the provisioner's environment (and the verifier's and the rotator's) that holds the admin password: it ends in _PASSWORD and does not start with MESH_ (docs/reference/manifest.md, Admin password sources).",
      ),
    passwordFile: z
      .string()
      .min(1)
      .max(Limits.pathChars, atMost(Limits.pathChars, "characters"))
      .optional()
      .describe(
        "A file, readable by the provisioner, that holds the admin password; on a NATS server whose operator is the mesh, the admin's .creds. Give passwordEnv or passwordFile, not both, and neither when the server needs no password. Never a file of the mesh's own (docs/reference/manifest.md, Admin password sources).",
      ),
  })
  .refine((a) => !(a.passwordEnv && a.passwordFile), {
    message: "give passwordEnv or passwordFile, not both",
  });

const OptionName = z.string().regex(/^[a-zA-Z][a-zA-Z0-9]{0,63}$/, { message: "must be a camelCase option name of at most 64 characters" });
const OptionText = z.string().max(Limits.optionChars, atMost(Limits.optionChars, "characters"));

/** At most {@link Limits.optionItems} items in each list option: counted here, not on the array in the union, whose refusal would read only "Invalid input". */
const countItems = (o: Record<string, unknown>, ctx: z.RefinementCtx) => {
  for (const [k, v] of Object.entries(o)) {
    if (Array.isArray(v) && v.length > Limits.optionItems) ctx.addIssue({ code: "custom", path: [k], ...atMost(Limits.optionItems, "items") });
  }
};

/**
 * Kind-specific settings of a provider that its endpoint cannot say (RabbitMQ's management URL,
 * a NATS provider's signing keys and the subjects its users may be given…), each a string or a
 * list of strings; each adapter validates its own and names what is missing.
 */
export const ProviderOptions = z
  .record(OptionName, z.union([OptionText, z.array(OptionText)]))
  .refine((o) => Object.keys(o).length <= Limits.options, atMost(Limits.options, "options"))
  .superRefine(countItems);
export type ProviderOptions = z.infer<typeof ProviderOptions>;

/**
 * Kind-specific settings of a requirement (a `nats.user`'s subjects, a bucket's history…);
 * validated by the kind's adapter when the grant is provisioned.
 */
export const RequirementOptions = z
  .record(OptionName, z.union([OptionText, z.number(), z.boolean(), z.array(OptionText)]))
  .refine((o) => Object.keys(o).length <= Limits.options, atMost(Limits.options, "options"))
  .superRefine(countItems);
export type RequirementOptions = z.infer<typeof RequirementOptions>;

/**
 * The version of the manifest's shape, reserved so that a later shape can be told apart: the one
 * this mesh reads. Optional: a document without it is of this version.
 */
export const MANIFEST_API_VERSION = "mesh/v1";

const ApiVersion = z
  .literal(MANIFEST_API_VERSION, { message: `this mesh reads manifests of apiVersion ${MANIFEST_API_VERSION}: write that, or leave apiVersion out` })
  .optional()
  .describe(`The version of the manifest's shape: ${MANIFEST_API_VERSION}, the one this mesh reads, when left out.`);

/** A DNS name or an IP address, as a certificate names a server. */
const SERVER_NAME_PATTERN = /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*|[0-9A-Fa-f:.]+)$/;

/**
 * How the provider's server is reached over TLS (provider-tls.ts in the providers resolves it):
 * every connection to it, the admin's, the verifier's logins and the agents' probes, verifies
 * its certificate against the bundle, and a holder's binding carries what its client needs.
 */
export const ProviderTls = z
  .strictObject({
    ca: z
      .string()
      .max(Limits.caBundleChars, atMost(Limits.caBundleChars, "characters"))
      .refine((v) => /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.test(v), {
        message: "must be a PEM bundle: one or more -----BEGIN CERTIFICATE----- blocks, the authorities that sign the server's certificate",
      })
      .optional()
      .describe("The authorities the server's certificate is verified against, a PEM bundle (a YAML block: ca: |)."),
    mesh: z
      .literal(true)
      .optional()
      .describe("true: verify the server against the mesh's own certificate authority (mesh-ca/ca.crt in the state directory of the node the services run on)."),
    serverName: z
      .string()
      .max(253)
      .regex(SERVER_NAME_PATTERN, { message: "must be a DNS name or an IP address, such as db.shop.mesh" })
      .optional()
      .describe("The name the server's certificate must hold, when it is not the endpoint's host (a server named by its IP address)."),
  })
  .refine((t) => (t.ca !== undefined) !== (t.mesh === true), {
    message: "give the authority to verify the server against: either ca (a PEM bundle) or mesh: true (the mesh's own), one of the two",
  });
export type ProviderTls = z.infer<typeof ProviderTls>;

export const ProviderDoc = z.strictObject({
  apiVersion: ApiVersion,
  kind: z.literal("Provider").describe("The document kind."),
  name: Name.describe("The provider's name, shown in grants (provider: pg-main)."),
  serves: z
    .array(z.enum(KIND_LIST))
    .min(1)
    .max(Limits.serves, atMost(Limits.serves, "kinds"))
    .describe("The kinds it can satisfy."),
  node: Name.describe(
    "The node it runs on. Among installed providers of a kind with the same preference, the one on the node of the requirement's first installed part is preferred.",
  ),
  endpoint: z
    .string()
    .max(Limits.endpointChars, atMost(Limits.endpointChars, "characters"))
    .refine((v) => v.split(",").every((u) => z.url().safeParse(u.trim()).success), {
      message: "must be a URL such as postgres://127.0.0.1:5432 (a NATS cluster's servers: URLs separated by commas, nats://10.0.0.1:4222,nats://10.0.0.2:4222)",
    })
    .describe(
      "Where the provisioner reaches it, a URL whose scheme depends on the kind (postgres://127.0.0.1:5432); for a NATS cluster, its servers' URLs separated by commas (the adapter fails over between them).",
    ),
  admin: AdminCredential.optional().describe("Who the provisioner administers the server as, and where that user's password is; none when the server needs no login."),
  tls: ProviderTls.optional().describe(
    `The server speaks TLS: every connection verifies its certificate (never falling back to plain text), and holders' bindings say how to do the same. Kinds: ${TLS_PROVIDER_KINDS.join(", ")}.`,
  ),
  options: ProviderOptions.optional().describe(
    "Settings of the kind that the endpoint cannot say: managementUrl (rabbitmq.vhost), usersDir (npm.registry), signingKeysFile, userExpiry, allowPublish and allowSubscribe (nats.user); docs/reference/providers.md has each kind's. A provider that needs one and lacks it fails to provision, naming it.",
  ),
  needs: z
    .array(GrantIdRef)
    .max(Limits.needs, atMost(Limits.needs, "grants"))
    .optional()
    .describe(
      "Grants (<module>/<requirement>) that must be provisioned before this provider can serve anything: a provider that runs as a module of the mesh needs that module's own requirements first. Until they are, a requirement no other provider can serve is Resolved False AwaitingDependency.",
    ),
  preference: z
    .number()
    .int()
    .min(-1000)
    .max(1000)
    .optional()
    .describe(
      "Higher wins among installed providers of a kind (default 0). A grant moves from its provider to an installed one with a higher preference (a handover, through the same fan-out as a rotation; the resource on the old one is kept with its data); between equals it stays where it is.",
    ),
  installed: z
    .boolean()
    .default(true)
    .describe("Whether it can be used now. false: the requirements it would serve show ProviderNotInstalled until the document is applied again with true."),
}).superRefine((p, ctx) => {
  if (p.tls && p.serves.some((k) => servedByNats(k, p.endpoint))) {
    ctx.addIssue({
      code: "custom",
      path: ["tls"],
      message: `a NATS server is verified through its endpoint: name its servers tls://host:port and give options.caFile, the bundle that signs their certificates; leave tls out`,
    });
    return;
  }
  const plain = p.tls ? p.serves.filter((k) => !TLS_PROVIDER_KINDS.includes(k)) : [];
  if (plain.length > 0) {
    ctx.addIssue({
      code: "custom",
      path: ["tls"],
      message: `the mesh reaches no server of ${plain.join(", ")} that it could verify: serve ${plain.length > 1 ? "those kinds" : "that kind"} from a provider without tls (kinds that verify it: ${TLS_PROVIDER_KINDS.join(", ")})`,
    });
  }
});
export type ProviderDoc = z.infer<typeof ProviderDoc>;

/** The longest stretch of a refused `onRotate` quoted back in its message. */
const QUOTED_CHARS = 60;

/**
 * A part's `onRotate`: a hook name, under the name rule. Text that is not one (shell text, as
 * `onRotate` once was) is refused saying what to do instead.
 */
const HookName = z.string().regex(NAME_PATTERN, {
  error: (iss) => {
    const text = typeof iss.input === "string" ? iss.input : "";
    const quoted = JSON.stringify(text.length > QUOTED_CHARS ? `${text.slice(0, QUOTED_CHARS)}…` : text);
    return `${quoted} is not a hook name: name a hook the part's node allows (mesh-agent --allow-hook NAME=COMMAND, or meshctl up --allow-hook NAME=COMMAND); a hook name ${NAME_RULE}`;
  },
});

export const PartDoc = z.strictObject({
  name: Name.describe("The part's name, unique in the module."),
  node: Name.describe("The node the part runs on; its agent receives the part's values."),
  installed: z.boolean().default(true).describe("false: nothing is provisioned for or delivered to this part."),
  onRotate: HookName.optional().describe(
    "The name of a hook that the part's node's agent allows (mesh-agent --allow-hook NAME=COMMAND): the agent runs that COMMAND after writing a rotated credential and before confirming, e.g. a reload. Never a command itself: what runs on a node is its operator's to say, not a manifest's (docs/reference/manifest.md, Hooks).",
  ),
});
export type PartDoc = z.infer<typeof PartDoc>;

/** A requirement's `env` (binding-env.ts): variable name → binding key. */
const EnvMap = z
  .record(
    z.string().max(128).regex(ENV_NAME_PATTERN, { message: "must be an environment variable name: letters, digits and _, not starting with a digit" }),
    z.string().regex(BINDING_KEY_PATTERN, { message: "must be a key of the requirement's binding, such as uri or password" }),
  )
  .refine((e) => Object.keys(e).length <= Limits.env, atMost(Limits.env, "variables"));

export const RequirementDoc = z.strictObject({
  name: Name.describe("The requirement's name, unique in the module; the grant's id is <module>/<name>."),
  kind: z.enum(KIND_LIST).describe("What is needed."),
  parts: z
    .array(Name)
    .min(1)
    .max(Limits.requirementParts, atMost(Limits.requirementParts, "parts"))
    .optional()
    .describe(
      "The parts that need it; all parts of the module when left out. It is provisioned only if one of them is installed, and delivered only to the installed ones.",
    ),
  verify: VerifyPolicy.optional().describe(
    "How often the verifier checks the grant again ({ every: 30s }); default the verifier's MESH_VERIFY_INTERVAL (10s). Drift is seen within one interval while the verifier keeps up.",
  ),
  repair: RepairPolicy.optional().describe(
    "What the verifier does about drift: auto (default) re-creates a missing resource and sets a rejected or diverged credential again; report only records it, and the condition says what to do.",
  ),
  rotate: RotatePolicy.optional().describe("How often the rotator rotates the grant ({ every: 30d }); never when left out."),
  options: RequirementOptions.optional().describe(
    "Settings of the kind: publish, subscribe and denyPublish (nats.user); history, ttl, maxBytes, replicas (kv.bucket, object.store); docs/reference/providers.md has each kind's. The kind's adapter checks them when the grant is provisioned: an unknown or invalid option is Provisioned False ProvisionFailed, naming it.",
  ),
  env: EnvMap.optional().describe(
    "Variables that carry a key of the binding under the name the application reads ({ DATABASE_URL: uri }), as ServiceBinding's .spec.env: written into the part's env file beside the <REQUIREMENT>_<KEY> names, and handed by the SDK with each generation. The binding's directory is unchanged. A key must be one the kind binds (docs/reference/bindings.md).",
  ),
  deletionPolicy: z
    .enum(["Retain", "Delete"])
    .optional()
    .describe(
      "What happens to the resource once no installed part needs the grant: Retain (the default of kinds that hold data: postgres.database, mariadb.database, rabbitmq.vhost, kv.bucket, object.store) revokes its logins and keeps the data, listed as retained; Delete drops it. Kinds that are a credential alone are always deleted.",
    ),
});
export type RequirementDoc = z.infer<typeof RequirementDoc>;

export const ModuleDoc = z
  .strictObject({
    apiVersion: ApiVersion,
    kind: z.literal("Module").describe("The document kind."),
    name: Name.describe("The module's name."),
    parts: z
      .array(PartDoc)
      .max(Limits.parts, atMost(Limits.parts, "parts"))
      .default([])
      .describe("The pieces of the module, each placed on a node; at least one as soon as there is a requirement."),
    requires: z
      .array(RequirementDoc)
      .max(Limits.requirements, atMost(Limits.requirements, "requirements"))
      .default([])
      .describe("What the module needs; none: the module is NothingRequired."),
    allowKinds: z
      .array(z.enum(KIND_LIST))
      .max(Limits.serves, atMost(Limits.serves, "kinds"))
      .optional()
      .describe(
        "The kinds the module's own parts may declare requirements of, when they declare the module again with their identity (declare in @mesh/client, on mesh.api.apply.<module>.<node>.<part>); none when left out. Only the operator sets it: a part may change neither it nor parts.",
      ),
  })
  .superRefine((m, ctx) => {
    const partNames = new Set<string>();
    m.parts.forEach((p, i) => {
      if (partNames.has(p.name)) ctx.addIssue({ code: "custom", path: ["parts", i, "name"], message: `duplicate part ${p.name}` });
      partNames.add(p.name);
    });
    const reqNames = new Set<string>();
    /** Each variable a requirement's env sets, and which requirement set it first. */
    const envNames = new Map<string, string>();
    m.requires.forEach((r, i) => {
      if (reqNames.has(r.name)) ctx.addIssue({ code: "custom", path: ["requires", i, "name"], message: `duplicate requirement ${r.name}` });
      reqNames.add(r.name);
      if (isReservedRequirementName(r.name)) {
        ctx.addIssue({ code: "custom", path: ["requires", i, "name"], message: `${r.name} is reserved: the mesh gives every part its identity itself (binding ${IDENTITY_BINDING}); name the requirement otherwise` });
      }
      if (r.kind === Kinds.MeshIdentity) {
        ctx.addIssue({ code: "custom", path: ["requires", i, "kind"], message: `${Kinds.MeshIdentity} is not declared: every installed part gets its identity from the mesh (binding ${IDENTITY_BINDING}); for application traffic declare a ${Kinds.NatsUser}` });
      }
      for (const [name, key] of Object.entries(r.env ?? {})) {
        const keys = BINDING_KEYS[r.kind];
        if (!keys.includes(key)) {
          ctx.addIssue({ code: "custom", path: ["requires", i, "env", name], message: `${r.kind} binds no key ${key}; it binds ${keys.join(", ")}` });
        }
        const first = envNames.get(name);
        if (first !== undefined) {
          ctx.addIssue({ code: "custom", path: ["requires", i, "env", name], message: `${name} is also set by requirement ${first}: give each variable one source` });
        } else envNames.set(name, r.name);
      }
      (r.parts ?? []).forEach((p, j) => {
        if (!partNames.has(p)) {
          ctx.addIssue({ code: "custom", path: ["requires", i, "parts", j], message: `names no part of module ${m.name}: ${p}` });
        }
      });
    });
    if (m.requires.length > 0 && m.parts.length === 0) {
      ctx.addIssue({ code: "custom", path: ["parts"], message: "a module with requirements needs at least one part to deliver them to" });
    }
  });
export type ModuleDoc = z.infer<typeof ModuleDoc>;

export const ManifestDoc = z.discriminatedUnion("kind", [ProviderDoc, ModuleDoc]);
export type ManifestDoc = z.infer<typeof ManifestDoc>;

/** One problem of a rejected file: which document, where in it, and what is wrong. */
export interface Problem {
  /** 0-based index of the document in its file (or request). */
  document: number;
  /** Path inside the document, like `requires[0].kind`; empty for the document itself. */
  path: string;
  message: string;
}

export type ParseResult = { ok: true; documents: ManifestDoc[] } | { ok: false; problems: Problem[] };

/** Formats a zod path as users write it: `requires[0].kind`. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const p of path) {
    if (typeof p === "number") out += `[${p}]`;
    else out += out ? `.${String(p)}` : String(p);
  }
  return out;
}

function issueMessage(iss: z.core.$ZodIssue): string {
  if ((iss.code === "invalid_type" || iss.code === "invalid_value") && "input" in iss && iss.input === undefined) return "required";
  if (iss.code === "invalid_union" && (iss as { discriminator?: string }).discriminator === "kind") {
    return "kind must be Provider or Module";
  }
  if (iss.code === "unrecognized_keys") return `unknown field${iss.keys.length > 1 ? "s" : ""}: ${iss.keys.join(", ")}`;
  return iss.message;
}

/**
 * Validates documents already decoded from YAML or JSON. Every problem of every document is
 * listed; the result holds documents only when there is none. Two documents of the same kind
 * and name in one file are a problem too.
 */
export function validateDocuments(raw: readonly unknown[]): ParseResult {
  if (raw.length > Limits.documents) {
    return { ok: false, problems: [{ document: Limits.documents, path: "", message: `${raw.length} documents; at most ${Limits.documents} go in one file or one apply: split them` }] };
  }
  const problems: Problem[] = [];
  const documents: ManifestDoc[] = [];
  const seen = new Map<string, number>();
  raw.forEach((doc, index) => {
    // Duplicates are found on the raw identity, so they are reported even beside other problems.
    const { kind, name } = (typeof doc === "object" && doc !== null ? doc : {}) as { kind?: unknown; name?: unknown };
    if (typeof kind === "string" && typeof name === "string") {
      const id = `${kind}/${name}`;
      const first = seen.get(id);
      if (first !== undefined) problems.push({ document: index, path: "name", message: `${id} is also defined by document ${first}` });
      else seen.set(id, index);
    }
    const r = ManifestDoc.safeParse(doc, { reportInput: true });
    if (!r.success) {
      for (const iss of r.error.issues) problems.push({ document: index, path: formatPath(iss.path), message: issueMessage(iss) });
      return;
    }
    documents.push(r.data);
  });
  if (raw.length === 0) problems.push({ document: 0, path: "", message: "no documents" });
  return problems.length ? { ok: false, problems } : { ok: true, documents };
}

/** One line per problem, the way the CLI prints them. */
export function formatProblems(problems: readonly Problem[], source?: string): string {
  return problems
    .map((p) => `${source ? `${source}: ` : ""}document ${p.document}${p.path ? `: ${p.path}` : ""}: ${p.message}`)
    .join("\n");
}
