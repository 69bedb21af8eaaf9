/**
 * Serving credential values to holders: only to a part the grant is delivered to, only a
 * generation that exists, and sealed to the caller's xkey so nothing in between reads it.
 */
import {
  CredentialFetchRequest,
  ErrorCodes,
  Grant,
  MeshError,
  RotationStates,
  keys,
  parseGrantId,
  sealTo,
  subjects,
  isValidName,
  type CredentialFetchReply,
  type CredentialListReply,
  type Delivery,
  partRotationKey,
  type KeyPair,
  type MasterKey,
} from "@mesh/shared";
import { entryJson, readJson, listJson, type Store } from "@mesh/shared/runtime";
import type { CredentialStore } from "@mesh/providers";

/**
 * Answers a fetch, sealing the values with `sender`: the mesh's sealing key (meshSealingKey), whose
 * public half a holder learns from this reply and then asks of every rotation notice.
 */
export async function handleCredentialFetch(
  store: Store,
  credentials: CredentialStore,
  body: unknown,
  sender: KeyPair,
  subject: string,
  masterKey?: MasterKey,
): Promise<CredentialFetchReply> {
  const parsed = CredentialFetchRequest.safeParse(body);
  if (!parsed.success) {
    throw new MeshError(
      ErrorCodes.InvalidRequest,
      `not a credential fetch request: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`,
    );
  }
  const req = parsed.data;
  const id = parseGrantId(req.grant);
  if (!id) throw new MeshError(ErrorCodes.InvalidRequest, `not a grant id: ${JSON.stringify(req.grant)} (expected <module>/<requirement>)`);
  // The subject is what the server let the caller publish to: a body naming another holder is refused.
  if (subject !== subjects.credentialFetch(id.module, id.requirement, req.node, req.part)) {
    throw new MeshError(
      ErrorCodes.Forbidden,
      `a fetch of ${req.grant} for ${req.part} on ${req.node} must be sent on ${subjects.credentialFetch(id.module, id.requirement, req.node, req.part)}, not on ${subject}`,
    );
  }
  const grant = await readGrant(store, credentials, keys.grant(id.module, id.requirement));
  if (!grant) throw new MeshError(ErrorCodes.NotFound, `grant ${req.grant} does not exist`);
  if (!grant.value.targets.some((t) => t.part === req.part && t.node === req.node)) {
    throw new MeshError(ErrorCodes.NotFound, `part ${req.part} on node ${req.node} is not a holder of grant ${req.grant}`);
  }
  // During a rotation the staged generation is served too: holders apply it before the commit.
  if (req.generation > grant.value.generation && !(await isStaged(store, credentials, id.module, id.requirement, req.generation))) {
    throw new MeshError(ErrorCodes.NotFound, `grant ${req.grant} has no generation ${req.generation} yet (current: ${grant.value.generation})`, {
      retryable: true,
    });
  }
  const cred = await readBindings(credentials, id.module, id.requirement, req.generation);
  if (!cred?.bindings) {
    throw new MeshError(ErrorCodes.NotFound, `generation ${req.generation} of ${req.grant} is not applied yet`, { retryable: true });
  }
  let sealed: string;
  try {
    sealed = sealTo(sender, req.recipient, cred.bindings);
  } catch (e) {
    throw new MeshError(ErrorCodes.InvalidRequest, "recipient is not a curve25519 public key (an nkeys xkey starting with X)", { cause: e });
  }
  // Sealed like the values: the part's instances open its rotations' values with it (part-rotation-key.ts).
  const partKey =
    req.partKey && masterKey
      ? sealTo(sender, req.recipient, { key: partRotationKey(masterKey, req.grant, req.node, req.part, grant.value.createdAt) })
      : undefined;
  return { ok: true, generation: req.generation, sender: sender.getPublicKey(), sealed, ...(partKey ? { partKey } : {}) };
}

/**
 * Answers a list request on `subject` (`mesh.api.credential.list.<module>.<node>.<part>`): the
 * current delivery of each of the module's grants that is delivered to that part on that node.
 * Nothing secret is in it; the holder fetches the values as for any delivery.
 */
export async function handleCredentialList(store: Store, subject: string, now = new Date()): Promise<CredentialListReply> {
  const names = subject.split(".").slice(4);
  const [module, node, part] = names;
  if (names.length !== 3 || !names.every(isValidName) || !module || !node || !part || subject !== subjects.credentialList(module, node, part)) {
    throw new MeshError(ErrorCodes.InvalidRequest, `not a credential list subject: ${subject} (expected ${subjects.credentialListsAll})`);
  }
  const grants = await listJson(store.kv.grants, Grant, keys.grantsOf(module));
  const deliveries: Delivery[] = grants
    .map((g) => g.value)
    .filter((g) => g.provider !== null && g.generation > 0 && g.targets.some((t) => t.part === part && t.node === node))
    .map((g) => ({
      grant: g.id,
      module,
      requirement: g.requirement,
      part,
      node,
      kind: g.kind,
      provider: g.provider!,
      generation: g.generation,
      publishedAt: now.toISOString(),
      ...(g.env ? { env: g.env } : {}),
    }));
  return { ok: true, deliveries };
}

/** How long decrypted binding values of one generation are kept to answer a fan-out of fetches. */
export const BINDINGS_CACHE_MS = 2_000;
const STAGED_CACHE_MS = 60_000;
const CACHE_LIMIT = 1_000;

type Bindings = { bindings?: Record<string, string> } | undefined;
/** Per credential store (so per provisioner, never across meshes in one process). */
const caches = new WeakMap<
  CredentialStore,
  {
    // `<grant key>#<generation>` → when it was seen staged. A generation once staged stays valid
    // (a rotation never goes back; committed, the grant's generation has caught up with it).
    staged: Map<string, number>;
    // `<credential key>` → decrypted bindings, briefly: a rotation's holders all ask at once.
    bindings: Map<string, { at: number; value: Promise<Bindings> }>;
    // `<grant key>` → the read of it in flight.
    grants: Map<string, ReturnType<typeof readJson<Grant>>>;
  }
>();
const cachesOf = (c: CredentialStore) => {
  let x = caches.get(c);
  if (!x) caches.set(c, (x = { staged: new Map(), bindings: new Map(), grants: new Map() }));
  return x;
};

function remember<V>(m: Map<string, V>, k: string, v: V): void {
  if (m.size >= CACHE_LIMIT) m.delete(m.keys().next().value!);
  m.set(k, v);
}

/** The binding values of a generation, decrypted once per {@link BINDINGS_CACHE_MS} (concurrent asks share one read). */
function readBindings(credentials: CredentialStore, module: string, requirement: string, generation: number): Promise<Bindings> {
  const { bindings } = cachesOf(credentials);
  const k = keys.credential(module, requirement, generation);
  const hit = bindings.get(k);
  if (hit && Date.now() - hit.at < BINDINGS_CACHE_MS) return hit.value;
  const value = credentials.read(module, requirement, generation).then((c) => (c?.bindings ? { bindings: c.bindings } : undefined));
  remember(bindings, k, { at: Date.now(), value });
  // Only complete values are kept: a generation not applied yet, or a failed read, is asked again.
  value.then(
    (v) => v === undefined && bindings.delete(k),
    () => bindings.delete(k),
  );
  return value;
}

/**
 * The grant, read once for every fetch that arrives while a read of it is in flight (a
 * rotation's holders all ask at once): never older than that read, never kept after it.
 */
function readGrant(store: Store, credentials: CredentialStore, key: string): Promise<Awaited<ReturnType<typeof readJson<Grant>>>> {
  const { grants } = cachesOf(credentials);
  const inFlight = grants.get(key);
  if (inFlight) return inFlight;
  const p = readJson(store.kv.grants, key, Grant).finally(() => grants.delete(key));
  grants.set(key, p);
  return p;
}

/** True when a running rotation of the grant stages `generation` (remembered once seen). */
async function isStaged(store: Store, credentials: CredentialStore, module: string, requirement: string, generation: number): Promise<boolean> {
  const { staged } = cachesOf(credentials);
  const k = `${keys.grant(module, requirement)}#${generation}`;
  const seen = staged.get(k);
  if (seen !== undefined && Date.now() - seen < STAGED_CACHE_MS) return true;
  // Only the two fields needed: the record lists every holder, and is large at fan-out.
  const e = await store.kv.rotations.get(keys.grant(module, requirement));
  if (!e || e.operation !== "PUT" || e.length === 0) return false;
  const r = entryJson(e) as { state?: unknown; to?: unknown } | null;
  const yes = typeof r?.state === "string" && r.state !== RotationStates.Committed && r.to === generation;
  if (yes) remember(staged, k, Date.now());
  return yes;
}
