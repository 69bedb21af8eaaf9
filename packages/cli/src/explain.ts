/**
 * `meshctl explain`'s reasoning: for each requirement of a module, in plain words, why it is
 * or is not satisfied and what would satisfy it, from the grant's conditions, the providers
 * catalog and the registered agents. Pure.
 */
import {
  BUILTIN_SECRET_PROVIDER,
  Kinds,
  formatAge,
  getCondition,
  holderKey,
  undelivered,
  type Grant,
  type ModuleDoc,
  type ModuleStatus,
  type NodeRecord,
  type ProviderDoc,
} from "@mesh/shared";
import { meshctlCommand, serviceCommand } from "./paths.js";

/** Where a requirement stands, as explain puts it. */
export const RequirementStates = {
  /** Provisioned and delivered to every installed part that needs it. */
  Satisfied: "Satisfied",
  /** On its way: waiting for a service or an agent. */
  InProgress: "InProgress",
  /** Cannot be satisfied as the world is now (no provider, provider not installed…). */
  Unsatisfiable: "Unsatisfiable",
  /** Something failed (provisioning, delivery, verification); the services retry. */
  Failing: "Failing",
  /** None of its parts is installed: not provisioned until one is. */
  Dormant: "Dormant",
} as const;
export type RequirementState = (typeof RequirementStates)[keyof typeof RequirementStates];

/** The explanation of one requirement. */
export interface RequirementExplanation {
  requirement: string;
  kind: string;
  /** Grant id `<module>/<requirement>`. */
  grant: string;
  parts: string[];
  state: RequirementState;
  satisfied: boolean;
  /** Why it stands where it does. */
  why: string;
  /** What would move it on, when something would. */
  next?: string;
  /** Facts worth knowing: where values were delivered, parts left out… */
  details: string[];
}

/** The explanation of a processed module. */
export interface Explanation {
  module: string;
  state: string;
  message: string;
  requirements: RequirementExplanation[];
  /** Remarks about the module as a whole. */
  notes: string[];
}

/** Everything explain reads. */
export interface ExplainInput {
  status: ModuleStatus;
  /** The stored manifest and its KV revision, when there is one. */
  manifest?: { doc: ModuleDoc; revision: number };
  grants: readonly Grant[];
  providers: readonly ProviderDoc[];
  nodes: readonly NodeRecord[];
  now?: Date;
}

/** Where the all-in-one writes service logs; named in hints. */
const LOGS = ".mesh/logs";

/** The example provider file of each kind that has one, for hints. */
const EXAMPLE_PROVIDERS: Partial<Record<string, string>> = {
  [Kinds.PostgresDatabase]: "postgres.yaml",
  [Kinds.MariadbDatabase]: "mariadb.yaml",
  [Kinds.RedisUser]: "redis.yaml",
  [Kinds.RabbitmqVhost]: "rabbitmq.yaml",
  [Kinds.OciRegistry]: "oci-registry.yaml",
  [Kinds.NpmRegistry]: "npm.yaml",
  [Kinds.NatsUser]: "nats.yaml",
};
const serveExample = (kind: string) => (EXAMPLE_PROVIDERS[kind] ? ` (see examples/providers/${EXAMPLE_PROVIDERS[kind]})` : "");

function agentHint(node: string): string {
  return (
    `start an agent for it: MESH_NODE=${node} MESH_BINDINGS_ROOT=DIR ${serviceCommand("agent")} ` +
    `(meshctl up starts one per node named by the applied parts; add it with --nodes)`
  );
}

function bindingsPath(root: string, module: string, part: string, requirement: string): string {
  return `${root.replace(/\/+$/, "")}/${module}/${part}/${requirement}/`;
}

function explainGrant(
  module: string,
  req: { name: string; kind: string; parts: string[] },
  g: Grant | undefined,
  partNodes: ReadonlyMap<string, { node: string; installed: boolean }>,
  input: ExplainInput,
  now: Date,
): RequirementExplanation {
  const base = { requirement: req.name, kind: req.kind, grant: `${module}/${req.name}`, parts: req.parts, details: [] as string[] };
  const result = (state: RequirementState, why: string, next?: string): RequirementExplanation => ({
    ...base,
    state,
    satisfied: state === RequirementStates.Satisfied,
    why,
    ...(next ? { next } : {}),
  });
  if (!g) {
    return result(
      RequirementStates.InProgress,
      "the resolver has not written a grant for it yet",
      `if this lasts, the resolver is not running or failing: check ${LOGS}/resolver.log (under meshctl up)`,
    );
  }
  const partsOf = (names: readonly string[]) => names.map((p) => `${p} (node ${partNodes.get(p)?.node ?? "?"})`).join(", ");
  const resolved = getCondition(g.conditions, "Resolved");
  if (!resolved) {
    return result(RequirementStates.InProgress, "it has not been resolved to a provider yet", `if this lasts, check ${LOGS}/resolver.log`);
  }
  if (resolved.status !== "True") {
    const candidates = input.providers.filter((p) => p.serves.includes(g.kind as ProviderDoc["serves"][number]));
    switch (resolved.reason) {
      case "NoProvider":
        return result(
          RequirementStates.Unsatisfiable,
          `no provider serves ${g.kind}`,
          `apply a Provider document with \`serves: [${g.kind}]\`${serveExample(g.kind)}; the requirement moves on by itself once it is applied`,
        );
      case "ProviderNotInstalled": {
        const names = candidates.map((p) => `${p.name} (node ${p.node})`).join(", ");
        const which = names || "the registered provider";
        return result(
          RequirementStates.Unsatisfiable,
          `${g.kind} is served by ${which}, but ${candidates.length > 1 ? "none of them is" : "it is not"} installed`,
          `once the server runs, set \`installed: true\` in the Provider document of ${candidates.map((p) => p.name).join(" or ") || "the provider"} and re-apply it (${meshctlCommand()} apply -f FILE); the requirement then moves on by itself`,
        );
      }
      case "ProviderUnreachable": {
        const endpoints = candidates.map((p) => `${p.name} at ${p.endpoint}`).join(", ");
        return result(
          RequirementStates.Unsatisfiable,
          resolved.message || "its provider cannot be reached",
          `check that ${endpoints || "the provider's endpoint"} answers from the nodes of its parts`,
        );
      }
      case "AwaitingDependency":
        return result(
          RequirementStates.InProgress,
          resolved.message,
          "nothing to do if those grants are on their way; otherwise look at them with meshctl status and meshctl explain of their module",
        );
      case "DependencyCycle":
        return result(
          RequirementStates.Unsatisfiable,
          resolved.message,
          "break the cycle: give one of its members a provider that needs none of the others, or remove the needs entry that closes it, and re-apply the Provider document",
        );
      default:
        return result(RequirementStates.InProgress, resolved.message || `not resolved (${resolved.reason})`);
    }
  }
  const provider = g.provider ?? "?";
  const providerWords = provider === BUILTIN_SECRET_PROVIDER ? `the built-in provider ${provider}` : `provider ${provider}`;

  // Parts that name it but are not installed never receive it.
  const targetParts = new Set(g.targets.map((t) => t.part));
  const skipped = g.parts.filter((p) => !targetParts.has(p));
  const skippedNote = skipped.length
    ? `not delivered to ${partsOf(skipped)}: ${skipped.length > 1 ? "those parts are" : "that part is"} not installed`
    : undefined;

  if (g.targets.length === 0) {
    return result(
      RequirementStates.Dormant,
      `${providerWords} would serve it, but none of its parts (${partsOf(g.parts)}) is installed, so nothing is provisioned`,
      `to use it, set \`installed: true\` on ${g.parts.length > 1 ? "one of those parts" : "that part"} in the manifest of ${module} and re-apply it`,
    );
  }

  const provisioned = getCondition(g.conditions, "Provisioned");
  if (provisioned?.status === "False" && provisioned.reason === "ProvisionFailed") {
    const r = result(
      RequirementStates.Failing,
      `${providerWords} was chosen, but provisioning failed: ${provisioned.message}`,
      `fix the cause above (the provider's endpoint and admin credential); the provisioner retries by itself. Details in ${LOGS}/provisioner.log`,
    );
    if (skippedNote) r.details.push(skippedNote);
    return r;
  }
  if (provisioned?.status === "False" && provisioned.reason === "AwaitingDependency") {
    // Its provider's admin password is a mesh secret that its server holds another generation of.
    const r = result(
      RequirementStates.InProgress,
      `${providerWords} was chosen, but it is ${provisioned.message}`,
      "nothing to do when the mesh repairs that secret by itself (repair: auto): this requirement moves on once it has; otherwise run the command named above",
    );
    if (skippedNote) r.details.push(skippedNote);
    return r;
  }
  if (provisioned?.status !== "True" || g.generation === 0) {
    const r = result(
      RequirementStates.InProgress,
      `${providerWords} was chosen; waiting for the provisioner to create the resource and generate the credential`,
      `if this lasts, the provisioner is not running or failing: check ${LOGS}/provisioner.log (under meshctl up)`,
    );
    if (skippedNote) r.details.push(skippedNote);
    return r;
  }

  const nodes = new Map(input.nodes.map((n) => [n.node, n]));
  const delivered = getCondition(g.conditions, "Delivered");
  const missing = undelivered(g);
  const details: string[] = [];
  for (const t of g.targets) {
    const h = g.holders[holderKey(t.node, t.part)];
    if (h && h.generation >= g.generation) {
      const root = nodes.get(t.node)?.bindingsRoot;
      const where = root ? `, files in ${bindingsPath(root, module, t.part, g.requirement)}` : "";
      details.push(`generation ${h.generation} delivered to ${t.part} on node ${t.node} ${formatAge(now.getTime() - Date.parse(h.deliveredAt))} ago${where}`);
    }
  }
  // The provider is named above already.
  const resource = Object.entries(g.resource).filter(([k]) => k !== "provider");
  if (resource.length) details.push(`resource: ${resource.map(([k, v]) => `${k} ${v}`).join(", ")}`);
  if (skippedNote) details.push(skippedNote);

  if (delivered?.status === "False" && delivered.reason === "DeliveryFailed") {
    return {
      ...result(
        RequirementStates.Failing,
        `delivery failed: ${delivered.message}`,
        `the agent retries by itself; look at the agent's log (${LOGS}/agent-<node>.log under meshctl up)`,
      ),
      details,
    };
  }
  if (missing.length) {
    const waits = missing.map((t) => {
      const rec = nodes.get(t.node);
      return rec
        ? `the agent of node ${t.node} is registered (last seen ${formatAge(now.getTime() - Date.parse(rec.seenAt))} ago) but has not written generation ${g.generation} for part ${t.part} yet`
        : `no agent is registered for node ${t.node} (part ${t.part})`;
    });
    const unregistered = [...new Set(missing.filter((t) => !nodes.has(t.node)).map((t) => t.node))];
    const next = unregistered.length
      ? unregistered.map(agentHint).join("; ")
      : `if this lasts, look at the agent's log (${LOGS}/agent-<node>.log under meshctl up)`;
    return {
      ...result(RequirementStates.InProgress, `generation ${g.generation} is provisioned by ${providerWords}; waiting for delivery: ${waits.join("; ")}`, next),
      details,
    };
  }

  const verified = getCondition(g.conditions, "Verified");
  if (verified?.status === "False") {
    // A secret that is a provider's admin password, on a server that holds an older generation of it.
    const adminSecret = g.kind === Kinds.Secret && verified.reason === "CredentialDiverged";
    const next = !adminSecret
      ? "the verifier repairs what it can; if it lasts, check the provider"
      : g.repair === "report"
        ? `nothing is changed at the server while repair is report: run \`meshctl verify ${g.id} --repair\` to set the current generation there (or set repair: auto on the requirement)`
        : "nothing to do: the mesh logs in with the generation the server accepts and sets the current one there, then what that provider serves carries on";
    return {
      ...result(RequirementStates.Failing, `it was delivered, but verification failed (${verified.reason}): ${verified.message}`, next),
      details,
    };
  }
  return {
    ...result(RequirementStates.Satisfied, `${providerWords} provisioned generation ${g.generation} and every installed part that needs it holds it`),
    details,
  };
}

/**
 * Explains every requirement of a processed module: those of the stored manifest (so a
 * requirement the resolver has not reached yet is listed too), else those its grants name.
 */
export function explainModule(input: ExplainInput): Explanation {
  const now = input.now ?? new Date();
  const { status } = input;
  const module = status.module;
  const notes: string[] = [];
  const grants = new Map(input.grants.map((g) => [g.requirement, g]));
  const doc = input.manifest?.doc;
  const partNodes = new Map((doc?.parts ?? []).map((p) => [p.name, { node: p.node, installed: p.installed }]));
  for (const g of input.grants) for (const t of g.targets) if (!partNodes.has(t.part)) partNodes.set(t.part, { node: t.node, installed: true });

  if (input.manifest && input.manifest.revision !== status.manifestRevision) {
    notes.push(
      `the stored manifest (revision ${input.manifest.revision}) is newer than the one last processed (revision ${status.manifestRevision}); the resolver has not caught up yet, or is not running`,
    );
  }
  const requirements = doc
    ? doc.requires.map((r) => ({ name: r.name, kind: r.kind as string, parts: r.parts ?? doc.parts.map((p) => p.name) }))
    : input.grants.map((g) => ({ name: g.requirement, kind: g.kind as string, parts: g.parts }));

  if (status.state === "NothingRequired" && requirements.length === 0) {
    notes.push(
      `${module} declares no requirement, so there is nothing to provision or deliver: it is ready as it is. ` +
        `This is a recorded state: the resolver processed its manifest ${formatAge(now.getTime() - Date.parse(status.processedAt))} ago.`,
    );
  }
  return {
    module,
    state: status.state,
    message: status.message,
    requirements: requirements.map((r) => explainGrant(module, r, grants.get(r.name), partNodes, input, now)),
    notes,
  };
}

/**
 * {@link explainModule}, and the grants its manifest does not declare (each part's identity),
 * explained from the grants alone, after the declared ones.
 */
export function explainModuleAndIdentities(input: ExplainInput): Explanation {
  const explanation = explainModule(input);
  if (!input.manifest) return explanation;
  const declared = new Set(explanation.requirements.map((r) => r.requirement));
  const implicit = input.grants.filter((g) => !declared.has(g.requirement));
  if (implicit.length) {
    const { manifest: _declared, ...fromGrants } = input;
    explanation.requirements.push(...explainModule({ ...fromGrants, grants: implicit }).requirements);
  }
  return explanation;
}
