/**
 * What `meshctl get modules|grants|providers` lists: one row per record, built from the same
 * records `status` and `explain` read, with the state of each requirement as `explain` puts it.
 * The row shapes are what `--json` prints (`{"modules":[…]}`, `{"grants":[…]}`,
 * `{"providers":[…]}`); fields may be added, never renamed. The builders are pure.
 */
import {
  BUILTIN_SECRET_PROVIDER,
  Grant,
  Kinds,
  getCondition,
  ModuleDoc,
  ModuleStatus,
  NodeRecord,
  ProviderDoc,
  ReachabilityRecord,
  holderKey,
} from "@mesh/shared";
import { listJson, type Store } from "@mesh/shared/runtime";
import { explainModuleAndIdentities, type Explanation, type RequirementState } from "./explain.js";
import { storedManifestNames } from "./status-report.js";

/** One module, as `get modules` lists it. */
export interface ModuleRow {
  name: string;
  state: ModuleStatus["state"];
  /** Requirements satisfied (as `explain` says), of all the module declares. */
  ready: { satisfied: number; total: number };
  /** Why the module is in this state. */
  message: string;
  /** When the state last changed. */
  since: string;
  /** Its parts and where they run, as its manifest says (`-o wide`); empty before it is read. */
  parts: Array<{ name: string; node: string; installed: boolean }>;
}

/** One requirement's grant, as `get grants` lists it. */
export interface GrantRow {
  /** `<module>/<requirement>`. */
  id: string;
  module: string;
  requirement: string;
  kind: string;
  provider: string | null;
  generation: number;
  /** Where the requirement stands, as `explain` says: Satisfied, InProgress, Unsatisfiable, Failing, Dormant. */
  state: RequirementState;
  /** The reason of the first condition that is not True; null when all are (or there is none yet). */
  reason: string | null;
  /** Why it stands there, in plain words (`explain`'s why). */
  message: string;
  /** Installed parts that hold the current generation, of those it is delivered to. */
  holders: { current: number; total: number };
  /** When a condition last moved or was re-checked; null before the first. */
  updatedAt: string | null;
  /** The parts it is delivered to, `<part>@<node>` (`-o wide`). */
  targets: string[];
  /** The verifier's `Verified` condition: its status and reason; null before the first check. */
  verified: { status: string; reason: string } | null;
}

/** One provider, as `get providers` lists it. */
export interface ProviderRow {
  name: string;
  serves: string[];
  /** The node it runs on; null for the built-in one. */
  node: string | null;
  endpoint: string | null;
  installed: boolean;
  builtin: boolean;
  preference: number;
  /** Grants it serves now. */
  grants: number;
  /** Nodes whose agents report it unreachable, with why; nodes that reach it are counted in `reachableFrom`. */
  unreachableFrom: Array<{ node: string; message: string; since: string }>;
  reachableFrom: number;
}

/** Everything `get` reads, once. */
export interface MeshRecords {
  modules: ModuleStatus[];
  grants: Grant[];
  manifests: Map<string, { doc: ModuleDoc; revision: number }>;
  /** Names of every stored manifest (processed or not). */
  storedManifests: string[];
  providers: ProviderDoc[];
  nodes: NodeRecord[];
  reachability: ReachabilityRecord[];
}

/** Reads the records `get` lists from. */
export async function loadMeshRecords(store: Store): Promise<MeshRecords> {
  const [modules, grants, manifestNames, providers, nodes, reachability] = await Promise.all([
    listJson(store.kv.modules, ModuleStatus),
    listJson(store.kv.grants, Grant),
    storedManifestNames(store),
    listJson(store.kv.providers, ProviderDoc),
    listJson(store.kv.nodes, NodeRecord),
    listJson(store.kv.reachability, ReachabilityRecord),
  ]);
  const processed = new Set(modules.map((m) => m.value.module));
  // Only processed modules are explained; their manifests say which requirements they declare. One
  // stored under an earlier version's rules is left out: its module's state says so.
  const manifests = await listJson(store.kv.manifests, ModuleDoc, ">", { skipInvalid: true }).then((all) => all.filter((m) => processed.has(m.key)));
  return {
    modules: modules.map((m) => m.value),
    grants: grants.map((g) => g.value),
    manifests: new Map(manifests.map((m) => [m.key, { doc: m.value, revision: m.revision }])),
    storedManifests: manifestNames,
    providers: providers.map((p) => p.value),
    nodes: nodes.map((n) => n.value),
    reachability: reachability.map((r) => r.value),
  };
}

/** The explanation of every processed module (its parts' identities too), by name. Pure. */
export function explainAll(r: MeshRecords, now = new Date()): Map<string, Explanation> {
  const byModule = new Map<string, Grant[]>();
  for (const g of r.grants) byModule.set(g.module, [...(byModule.get(g.module) ?? []), g]);
  return new Map(
    r.modules.map((status) => {
      const manifest = r.manifests.get(status.module);
      return [
        status.module,
        explainModuleAndIdentities({
          status,
          ...(manifest ? { manifest } : {}),
          grants: byModule.get(status.module) ?? [],
          providers: r.providers,
          nodes: r.nodes,
          now,
        }),
      ];
    }),
  );
}

/** The rows of `get modules`, sorted by name. Pure. */
export function moduleRows(r: MeshRecords, explanations = explainAll(r)): ModuleRow[] {
  return [...r.modules]
    .sort((a, b) => a.module.localeCompare(b.module))
    .map((m) => {
      const reqs = explanations.get(m.module)?.requirements ?? [];
      return {
        name: m.module,
        state: m.state,
        ready: { satisfied: reqs.filter((q) => q.satisfied).length, total: reqs.length },
        message: m.message,
        since: m.since,
        parts: (r.manifests.get(m.module)?.doc.parts ?? []).map((p) => ({ name: p.name, node: p.node, installed: p.installed })),
      };
    });
}

/** The reason of the first condition of `g` that is not True, or null. */
export function firstUnmetReason(g: Grant | undefined): string | null {
  return g?.conditions.find((c) => c.status !== "True")?.reason ?? null;
}

/** The verifier's `Verified` condition of `g`, as a row carries it. */
function verifiedOf(g: Grant | undefined): GrantRow["verified"] {
  const c = g ? getCondition(g.conditions, "Verified") : undefined;
  return c ? { status: c.status, reason: c.reason } : null;
}

/** The rows of `get grants`: every requirement of every processed module, sorted by id. Pure. */
export function grantRows(r: MeshRecords, explanations = explainAll(r)): GrantRow[] {
  const grants = new Map(r.grants.map((g) => [g.id, g]));
  const rows: GrantRow[] = [];
  for (const e of explanations.values()) {
    for (const q of e.requirements) {
      const g = grants.get(q.grant);
      const targets = g?.targets ?? [];
      const current = targets.filter((t) => g!.holders[holderKey(t.node, t.part)]?.generation === g!.generation && g!.generation > 0).length;
      const updated =
        g?.conditions
          .map((c) => c.observedAt)
          .sort()
          .at(-1) ?? null;
      rows.push({
        id: q.grant,
        module: e.module,
        requirement: q.requirement,
        kind: q.kind,
        provider: g?.provider ?? null,
        generation: g?.generation ?? 0,
        state: q.state,
        reason: firstUnmetReason(g),
        message: q.why,
        holders: { current, total: targets.length },
        updatedAt: updated,
        targets: targets.map((t) => `${t.part}@${t.node}`),
        verified: verifiedOf(g),
      });
    }
  }
  return rows.sort((a, b) => a.id.localeCompare(b.id));
}

/** The rows of `get providers`: the registered ones and the built-in `secret` provider, sorted by name. Pure. */
export function providerRows(r: MeshRecords): ProviderRow[] {
  const serving = (name: string) => r.grants.filter((g) => g.provider === name).length;
  const rows: ProviderRow[] = r.providers.map((p) => {
    const seen = r.reachability.filter((x) => x.provider === p.name);
    return {
      name: p.name,
      serves: [...p.serves],
      node: p.node,
      endpoint: p.endpoint,
      installed: p.installed,
      builtin: false,
      preference: p.preference ?? 0,
      grants: serving(p.name),
      unreachableFrom: seen
        .filter((x) => !x.reachable)
        .map((x) => ({ node: x.node, message: x.message, since: x.since }))
        .sort((a, b) => a.node.localeCompare(b.node)),
      reachableFrom: seen.filter((x) => x.reachable).length,
    };
  });
  if (!r.providers.some((p) => p.name === BUILTIN_SECRET_PROVIDER)) {
    rows.push({
      name: BUILTIN_SECRET_PROVIDER,
      serves: [Kinds.Secret],
      node: null,
      endpoint: null,
      installed: true,
      builtin: true,
      preference: 0,
      grants: serving(BUILTIN_SECRET_PROVIDER),
      unreachableFrom: [],
      reachableFrom: 0,
    });
  }
  return rows.sort((a, b) => a.name.localeCompare(b.name));
}
