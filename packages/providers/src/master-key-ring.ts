/**
 * The master key as a data key the mesh rotates: the keys the credentials store is encrypted
 * under, and the one new records are written under.
 *
 * - The **key-encryption key** (KEK) is the local file `master.key` (`MESH_MASTER_KEY_FILE`,
 *   `MESH_MASTER_KEY`), never delivered and never stored in NATS. It wraps the data keys, seals
 *   the local files that must open before NATS runs (the operator's keys, the NATS signing
 *   keys: nats-operator-files.ts), and the mesh's sealing key for values in transit is derived
 *   from it (crypto.ts `meshSealingKey`), so a holder's pinned sender key survives a rotation
 *   of the data key.
 * - The **data keys** are the generations of grant `mesh/master-key` (a `secret` the mesh
 *   provisions, delivers to the provisioner, verifier and rotator, and rotates like any other):
 *   32 random bytes each, kept in the credentials bucket like every credential, but their own
 *   records encrypted under the KEK (never under a data key, which would be circular). A cold
 *   start after a full restart needs only the KEK file and NATS: the wrapped data keys are
 *   read from JetStream.
 * - New records are written under the newest generation stored (a staged k+1 included): a
 *   process that does not know it yet reloads the ring when it meets its key id, so every
 *   record is readable by every process at every moment. Before `mesh/master-key` exists (the
 *   first moments of bootstrap, a mesh without the control plane module), records are written
 *   under the KEK itself, which stays in the ring; the first rotation moves them under a data key.
 * - A rotation re-encrypts the store before it commits ({@link reencryptCredentials} in
 *   credential-store.ts, run by the rotator): both k and k+1 open during it, the pass is
 *   idempotent, and a rotator that dies mid-way runs it again from the start at its next commit
 *   step. Generation k leaves the store only at a later commit (the history kept is at least 2).
 */
import {
  CONTROL_PLANE_MODULE,
  ControlPlaneRequirements,
  ErrorCodes,
  MeshError,
  decrypt,
  keys,
  parseMasterKey,
  type Encrypted,
  type MasterKey,
} from "@mesh/shared";
import { entryJson, type KV, type Store } from "@mesh/shared/runtime";
import { CredentialRecord, type CredentialKeys } from "./credential-store.js";

/** The key ring of a service: `kek` (its master key file) and the data keys in `store`. */
export function storeKeyRing(store: Pick<Store, "kv">, kek: MasterKey): MasterKeyRing {
  return new MasterKeyRing(kek, store.kv.credentials, store.kv.grants);
}

/** How often, at most, the ring looks for a newer data key when asked for the key to write under. */
export const RING_REFRESH_MS = 1_000;
/** Generations below the grant's committed one that the ring looks for (the store keeps at least 2; records move at every commit). */
const LOOK_BELOW = 8;

/**
 * The keys of a process that reads or writes credentials: its KEK and the data keys of grant
 * `mesh/master-key` found in the store. Safe to share within a process; every method reads
 * the store by key (direct gets), which every service's identity may.
 */
export class MasterKeyRing implements CredentialKeys {
  private readonly dataKeys = new Map<number, MasterKey>();
  private checkedAt = 0;
  private loading: Promise<void> | undefined;

  constructor(
    readonly kek: MasterKey,
    private readonly credentials: KV,
    private readonly grants: KV,
    private readonly now: () => number = Date.now,
  ) {}

  /** The data keys known, by generation (ascending); empty before the master-key grant exists. */
  generations(): number[] {
    return [...this.dataKeys.keys()].sort((a, b) => a - b);
  }

  /** The key new records are written under: the newest data key, else the KEK. Looks for a newer one at most every {@link RING_REFRESH_MS}. */
  async sealing(): Promise<MasterKey> {
    if (this.checkedAt === 0) await this.refresh();
    else if (this.now() - this.checkedAt >= RING_REFRESH_MS) await this.probeNext();
    const newest = this.generations().at(-1);
    return newest === undefined ? this.kek : this.dataKeys.get(newest)!;
  }

  /** The key of id `keyId`: the KEK, a known data key, or one the store holds now (the ring is reloaded once to find it). */
  async opening(keyId: string): Promise<MasterKey | undefined> {
    const known = this.find(keyId);
    if (known) return known;
    await this.refresh();
    return this.find(keyId);
  }

  /** Reads the store again: the generations around the grant's committed one. Concurrent calls share one read. */
  refresh(): Promise<void> {
    return (this.loading ??= this.load().finally(() => (this.loading = undefined)));
  }

  /** One direct get: the generation above the newest known, staged by a rotation that began since. */
  private async probeNext(): Promise<void> {
    const started = this.now();
    const next = (this.generations().at(-1) ?? 0) + 1;
    const k = await this.readDataKey(next);
    if (k) {
      this.dataKeys.set(next, k);
      return this.probeNext();
    }
    this.checkedAt = started;
  }

  private find(keyId: string): MasterKey | undefined {
    if (keyId === this.kek.id) return this.kek;
    for (const k of this.dataKeys.values()) if (k.id === keyId) return k;
    return undefined;
  }

  private async load(): Promise<void> {
    const started = this.now();
    const committed = await this.committedGeneration();
    const top = Math.max(committed, ...this.generations(), 0);
    const found = new Map<number, MasterKey>();
    for (let g = Math.max(1, top - LOOK_BELOW); g <= top; g++) {
      const k = await this.readDataKey(g);
      if (k) found.set(g, k);
    }
    // Staged generations above: read until the first that is not there.
    for (let g = top + 1; ; g++) {
      const k = await this.readDataKey(g);
      if (!k) break;
      found.set(g, k);
    }
    // A generation purged from the store stays known here: a record still under it (none should be) opens.
    for (const [g, k] of found) this.dataKeys.set(g, k);
    this.checkedAt = started;
  }

  private async committedGeneration(): Promise<number> {
    const e = await this.grants.get(keys.grant(CONTROL_PLANE_MODULE, ControlPlaneRequirements.masterKey));
    if (!e || e.operation !== "PUT" || e.length === 0) return 0;
    const g = (entryJson(e) as { generation?: unknown }).generation;
    return typeof g === "number" && Number.isInteger(g) && g > 0 ? g : 0;
  }

  private async readDataKey(generation: number): Promise<MasterKey | undefined> {
    const k = keys.credential(CONTROL_PLANE_MODULE, ControlPlaneRequirements.masterKey, generation);
    const e = await this.credentials.get(k);
    if (!e || e.operation !== "PUT" || e.length === 0) return undefined;
    const record = CredentialRecord.parse(entryJson(e));
    if (record.encrypted.keyId !== this.kek.id) {
      throw new MeshError(
        ErrorCodes.MasterKey,
        `the data key ${k} is wrapped under key-encryption key ${record.encrypted.keyId}, but this process has ${this.kek.id}; give every provisioner, verifier and rotator the same MESH_MASTER_KEY_FILE`,
      );
    }
    const { secret } = JSON.parse(decrypt(this.kek, record.encrypted as Encrypted, k)) as { secret: { value?: unknown } };
    if (typeof secret.value !== "string") throw new MeshError(ErrorCodes.MasterKey, `the data key ${k} holds no value`);
    return parseMasterKey(secret.value);
  }
}
