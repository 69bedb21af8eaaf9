/**
 * JSON Schemas of the mesh's documents, messages and records, generated from the zod schemas
 * of packages/shared, for modules written in other languages. `npm run schemas` writes them
 * to `schemas/`; test/schemas-in-sync.test.ts checks that the checked-in files are current.
 * Both call {@link generateSchemas}, so there is one way to produce them.
 */
import { fileURLToPath } from "node:url";
import type { z } from "zod";
import {
  ApplyReply,
  ApplyRequest,
  Buckets,
  HolderRegistration,
  CredentialFetchReply,
  CredentialListReply,
  CredentialFetchRequest,
  CredentialValues,
  DeleteReply,
  DeleteRequest,
  Delivery,
  DeliveryReceipt,
  ErrorReply,
  Grant,
  MANIFEST_API_VERSION,
  KIND_LIST,
  ManifestDoc,
  ModuleDoc,
  ModuleStatus,
  NAME_MAX_LENGTH,
  NAME_PATTERN,
  NAME_PATTERN_PORTABLE,
  NodeRecord,
  ProbeReport,
  ProviderDoc,
  ReachabilityRecord,
  REQUIREMENT_OPTIONS,
  RequirementDoc,
  RotateRequest,
  Rotation,
  RotationBroadcast,
  Verification,
  VerifyReply,
  VerifyRequest,
  Streams,
  subjects,
} from "../packages/shared/src/index.js";

/** The folder the schemas are checked in to: `schemas/` at the repository root. */
export const SCHEMAS_DIR = fileURLToPath(new URL("../schemas/", import.meta.url));

/**
 * One schema to generate.
 *
 * `io` says which side of the zod schema is described:
 * - `input` for what a module sends or writes (manifest documents, requests): fields with a
 *   default are optional, and unknown fields are allowed wherever the mesh ignores them;
 * - `output` for what the mesh sends or stores (replies, events, records): fields with a
 *   default are always present. Unknown fields are allowed there too, so a reader keeps
 *   working when the mesh adds a field.
 */
export interface SchemaEntry {
  name: string;
  schema: z.ZodType;
  io: "input" | "output";
  description: string;
}

/** Every schema written to `schemas/<name>.schema.json`. */
export const SCHEMA_ENTRIES: readonly SchemaEntry[] = [
  {
    name: "ProviderDoc",
    schema: ProviderDoc,
    io: "input",
    description: "A Provider manifest document: something that can satisfy requirements of the kinds it serves.",
  },
  {
    name: "ModuleDoc",
    schema: ModuleDoc,
    io: "input",
    description:
      "A Module manifest document: its parts and their nodes, and its requirements. Also checked by the resolver, " +
      "beyond this schema: part and requirement names are unique, a requirement names only parts of the module, " +
      "and a module with requirements has at least one part.",
  },
  {
    name: "Manifest",
    schema: ManifestDoc,
    io: "input",
    description:
      "One document of a manifest file, a Provider or a Module by its kind: the schema for a file of both (a YAML file's documents are " +
      "checked one by one). The same as ProviderDoc or ModuleDoc.",
  },
  {
    name: "ApplyRequest",
    schema: ApplyRequest,
    io: "input",
    description: `Request on ${subjects.apply}: manifest documents (each a ProviderDoc or a ModuleDoc) to store, all or none.`,
  },
  {
    name: "ApplyReply",
    schema: ApplyReply,
    io: "output",
    description: `Reply to a request on ${subjects.apply}: ok true with what was accepted, or ok false with every problem and nothing stored.`,
  },
  {
    name: "DeleteRequest",
    schema: DeleteRequest,
    io: "input",
    description: `Request on ${subjects.delete} (the operator's alone): delete modules and providers, and drop what removed grants retained. All or nothing; module mesh, and a provider that still serves grants, need force.`,
  },
  {
    name: "DeleteReply",
    schema: DeleteReply,
    io: "output",
    description: `Reply to a request on ${subjects.delete}: ok true with what was deleted (a deleted module's grants are then taken back), or ok false with every problem and nothing deleted.`,
  },
  {
    name: "Delivery",
    schema: Delivery,
    io: "output",
    description:
      `Event on ${subjects.deliveriesAll.replace(">", "<node>.<module>.<part>.<requirement>")} ` +
      `(stream ${Streams.deliveries}): a generation of a grant is ready for a part. It carries no secret value; ` +
      "fetch the values with a CredentialFetchRequest.",
  },
  {
    name: "CredentialFetchRequest",
    schema: CredentialFetchRequest,
    io: "input",
    description:
      `Request on mesh.api.credential.fetch.<module>.<requirement>.<node>.<part> (a body naming another is refused): the values of one generation of a grant for one part on one node. ` +
      "recipient is the caller's public curve25519 key (an nkeys xkey, starting with X).",
  },
  {
    name: "CredentialFetchReply",
    schema: CredentialFetchReply,
    io: "output",
    description:
      `Reply to a request on ${subjects.credentialFetchesAll}: ok true with the values sealed to the recipient key ` +
      "(sealed is base64; open it with the recipient's key and the sender's public xkey, and parse the JSON as " +
      "CredentialValues), or ok false with an error.",
  },
  {
    name: "CredentialListReply",
    schema: CredentialListReply,
    io: "output",
    description:
      "Reply to an empty request on mesh.api.credential.list.<module>.<node>.<part>: the current Delivery of every grant of the module " +
      "delivered to that part on that node (what a part's identity watches from; new ones follow on mesh.delivery.<node>.<module>.<part>.*), or ok false with an error.",
  },
  {
    name: "CredentialValues",
    schema: CredentialValues,
    io: "output",
    description:
      "The plaintext inside CredentialFetchReply.sealed: one string per binding key (type, provider, host, port, " +
      "database, username, password, uri, value, ...). Secret: never log it.",
  },
  {
    name: "ErrorReply",
    schema: ErrorReply,
    io: "output",
    description:
      "The error in a reply {ok: false, error: ...}. Any request to the mesh can be answered this way (a malformed " +
      "request, an internal failure), besides the failures its own reply schema lists. code is stable; retryable " +
      "says whether the same request may succeed later.",
  },
  {
    name: "Grant",
    schema: Grant,
    io: "output",
    description: `A grant as stored in KV bucket ${Buckets.grants} under the key <module>.<requirement>: the mesh's claim that a requirement is satisfied.`,
  },
  {
    name: "DeliveryReceipt",
    schema: DeliveryReceipt,
    io: "output",
    description:
      `What a node's agent did with a grant for a part on its node, as stored in KV bucket ${Buckets.receipts} under the key ` +
      "<node>.<module>.<requirement>.<part>, written by that node's agent alone; the provisioner folds it into the grant.",
  },
  {
    name: "ModuleStatus",
    schema: ModuleStatus,
    io: "output",
    description: `The state of a processed module, as stored in KV bucket ${Buckets.modules} under the module's name. No record means never processed.`,
  },
  {
    name: "NodeRecord",
    schema: NodeRecord,
    io: "output",
    description: `The record of a node's agent, as stored in KV bucket ${Buckets.nodes} under the node's name.`,
  },
  {
    name: "VerifyRequest",
    schema: VerifyRequest,
    io: "input",
    description: `Request on ${subjects.verify}: check a grant now (meshctl verify). With repair: true, drift found is repaired once even under repair: report.`,
  },
  {
    name: "VerifyReply",
    schema: VerifyReply,
    io: "output",
    description:
      "The verifier's reply to a VerifyRequest: the grant's Verified condition after the check, its verification record, and the repair made, if any.",
  },
  {
    name: "Verification",
    schema: Verification,
    io: "output",
    description: `The verifier's record of a grant, as stored in KV bucket ${Buckets.verifications} under <module>.<requirement>: its last check and the probes of its holders' agents.`,
  },
  {
    name: "ProbeReport",
    schema: ProbeReport,
    io: "input",
    description: `Event on ${subjects.probeReportsAll.replace(">", "<node>.<module>.<part>.<requirement>")} (core NATS): an agent logged in from its node with the values delivered to a part, and says how that went.`,
  },
  {
    name: "ReachabilityRecord",
    schema: ReachabilityRecord,
    io: "output",
    description: `Whether a provider's endpoint accepts connections from a node, as its agent sees it, stored in KV bucket ${Buckets.reachability} under <node>.<provider>.`,
  },
  {
    name: "RotateRequest",
    schema: RotateRequest,
    io: "input",
    description: `Request on ${subjects.rotate}: rotate a grant (meshctl rotate). The reply is {ok: true, rotation: Rotation} or an error (Conflict names the rotation already running).`,
  },
  {
    name: "Rotation",
    schema: Rotation,
    io: "output",
    description: `A rotation as stored in KV bucket ${Buckets.rotations} under <module>.<requirement> (the grant's latest): its state, its holders with their progress, refused confirmations.`,
  },
  {
    name: "RotationBroadcast",
    schema: RotationBroadcast,
    io: "output",
    description: `Event on ${subjects.rotationBroadcastsAll} (a holder stream MESH_HOLD_…, one message per stream with holders of the grant): a rotation started. Each holder acknowledges it on its own consumer once it has applied the new generation: that ack is its confirmation.`,
  },
  {
    name: "HolderRegistration",
    schema: HolderRegistration,
    io: "input",
    description:
      `An SDK holder instance, written by itself to KV bucket ${Buckets.holders} under <module>.<requirement>.<node>.<part>.<instance> ` +
      "and refreshed every 30 s, so that a rotation waits for its confirmation. xkey is its public curve25519 key (starting with X).",
  },
];

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Keys that open a schema file, in this order, so a reader sees first what it describes. */
const LEADING_KEYS = ["$schema", "$id", "title", "description"];

/**
 * The `$id` of a schema: a name, not a place (the files are read from a checkout or a release,
 * wherever it is), carrying the manifest's version so that a later shape gets other ids.
 */
export function schemaId(name: string): string {
  return `urn:mesh:schema:${MANIFEST_API_VERSION.split("/")[1]}:${name}`;
}

/**
 * A requirement's `options` by its kind, as JSON Schema conditionals (`if kind is … then
 * options is …`): what an editor offers and checks for each kind. A kind that takes no option
 * gets an empty object. REQUIREMENT_OPTIONS (requirement-options.ts) has them.
 */
function optionsByKind(): Json[] {
  return KIND_LIST.map((kind) => {
    const typed = REQUIREMENT_OPTIONS[kind];
    const options = typed
      ? (typed.toJSONSchema({ io: "input", target: "draft-2020-12", unrepresentable: "throw" }) as { [key: string]: Json })
      : { type: "object", maxProperties: 0 };
    delete options.$schema;
    options.description = typed ? `The options of ${kind}.` : `${kind} takes no options.`;
    return { if: { properties: { kind: { const: kind } }, required: ["kind"] }, then: { properties: { options } } };
  });
}

/**
 * A copy of `value` with the keys of every object in code-point order (at the root, the
 * {@link LEADING_KEYS} first), so the files do not depend on how zod orders its output.
 */
function sortKeys(value: Json, root = false): Json {
  if (Array.isArray(value)) return value.map((v) => sortKeys(v));
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value).sort();
    const ordered = root ? [...LEADING_KEYS.filter((k) => k in value), ...keys.filter((k) => !LEADING_KEYS.includes(k))] : keys;
    const out: { [key: string]: Json } = {};
    for (const k of ordered) out[k] = sortKeys(value[k]!);
    return out;
  }
  return value;
}

/** The JSON Schema of one entry, as an object. */
export function toJsonSchema(entry: SchemaEntry): Record<string, unknown> {
  const generated = entry.schema.toJSONSchema({
    io: entry.io,
    target: "draft-2020-12",
    // Refinements (e.g. "passwordEnv or passwordFile, not both") have no JSON Schema form and
    // are left out; everything else the shared schemas use is representable, so anything new
    // that is not must fail here rather than silently become "any".
    unrepresentable: "throw",
    override: ({ zodSchema, jsonSchema }) => {
      const def = zodSchema._zod.def as { type: string; catchall?: unknown };
      // zod strips unknown keys from plain objects; in output mode it therefore emits
      // additionalProperties: false. Readers in other languages must accept fields added later.
      if (def.type === "object" && def.catchall === undefined && entry.io === "output") {
        delete jsonSchema.additionalProperties;
      }
      if (zodSchema === RequirementDoc) jsonSchema.allOf = optionsByKind() as typeof jsonSchema.allOf;
      // The name rule uses look-ahead, which Go's and Rust's regex engines lack.
      if (def.type === "string" && jsonSchema.pattern === NAME_PATTERN.source) {
        jsonSchema.pattern = NAME_PATTERN_PORTABLE;
        jsonSchema.maxLength = NAME_MAX_LENGTH;
      }
    },
  }) as Record<string, unknown>;
  return { ...generated, $id: schemaId(entry.name), title: entry.name, description: entry.description };
}

/**
 * Every schema file's name (`<name>.schema.json`) and exact content: keys sorted, two-space
 * indentation, a trailing newline. Pure and deterministic: the same zod schemas give the
 * same bytes.
 */
export function generateSchemas(): Map<string, string> {
  const files = new Map<string, string>();
  for (const entry of SCHEMA_ENTRIES) {
    files.set(`${entry.name}.schema.json`, JSON.stringify(sortKeys(toJsonSchema(entry) as Json, true), null, 2) + "\n");
  }
  return files;
}
