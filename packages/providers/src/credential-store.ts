/**
 * Credentials at rest: one KV record per grant and generation, its values encrypted with
 * AES-256-GCM under the master key (a data key of grant `mesh/master-key`, or the local
 * key-encryption key: master-key-ring.ts) and bound to the record's key. The secret material is
 * written *before* the provider is touched (write-ahead, as Vault's rotation does), so a
 * provisioner that dies half-way leaves a record the next one finishes from, never a
 * resource with a password nobody knows.
 */
import { z } from "zod";
import {
  CONTROL_PLANE_MODULE,
  ControlPlaneRequirements,
  ErrorCodes,
  MeshError,
  decrypt,
  encrypt,
  keys,
  parseMasterKey,
  type Encrypted,
  type MasterKey,
  recordJson,
} from "@mesh/shared";
import { casModify, casWrite, entryJson, getAtFloor, isCasConflict, type KV } from "@mesh/shared/runtime";
import type { BindingValues, SecretMaterial } from "./adapter.js";

const EncryptedSchema = z.object({
  alg: z.literal("aes-256-gcm"),
  keyId: z.string(),
  iv: z.string(),
  tag: z.string(),
  data: z.string(),
});

/** The stored record; `encrypted` holds JSON `{secret, bindings?}`. */
export const CredentialRecord = z.object({
  grant: z.string(),
  generation: z.number().int().positive(),
  provider: z.string(),
  createdAt: z.string(),
  /** Set once the provider accepted the credential and the binding values are known. */
  appliedAt: z.string().optional(),
  encrypted: EncryptedSchema,
});
export type CredentialRecord = z.infer<typeof CredentialRecord>;

/** Decrypted contents of a credential record. */
export interface StoredCredential {
  secret: SecretMaterial;
  bindings?: BindingValues;
}

/** A credential record as stored, opened, at the revision it was read or written at. */
export type StoredAt = StoredCredential & { record: CredentialRecord; revision: number };

/**
 * The keys a store encrypts and decrypts with: `kek`, the local key-encryption key (the master
 * key's own records are under it); `sealing()`, the key new records are written under;
 * `opening(id)`, the key of id `id`, undefined when this process has none.
 */
export interface CredentialKeys {
  readonly kek: MasterKey;
  sealing(): Promise<MasterKey>;
  opening(keyId: string): Promise<MasterKey | undefined>;
  /** Reads the keys again now (a ring); absent for a fixed key. */
  refresh?(): Promise<void>;
}

/** One key for everything: a store of a process without a key ring (tests, a mesh that never rotates its master key). */
export function singleKey(key: MasterKey): CredentialKeys {
  return { kek: key, sealing: async () => key, opening: async (id) => (id === key.id ? key : undefined) };
}

/** The keys of `key`: a ring as it is, a single master key as {@link singleKey}. */
export function keysOf(key: MasterKey | CredentialKeys): CredentialKeys {
  return "sealing" in key ? key : singleKey(key);
}

/** True when `recordKey` is a credential record of grant `mesh/master-key` (see master-key-ring.ts). */
export function isMasterKeyRecord(recordKey: string): boolean {
  return recordKey.startsWith(`${keys.grant(CONTROL_PLANE_MODULE, ControlPlaneRequirements.masterKey)}.g`);
}

export class CredentialStore {
  private readonly keys: CredentialKeys;

  constructor(
    private readonly kv: KV,
    key: MasterKey | CredentialKeys,
  ) {
    this.keys = keysOf(key);
  }

  /** Encrypts the values of record `k`: a data key of the master-key grant under the KEK, everything else under the sealing key. */
  private async seal(k: string, values: StoredCredential): Promise<Encrypted> {
    return encrypt(isMasterKeyRecord(k) ? this.keys.kek : await this.keys.sealing(), JSON.stringify(values), k);
  }

  /** Decrypts record `k` with the key it names; `Decrypt` when this process has no such key. */
  private async open(k: string, e: Encrypted): Promise<StoredCredential> {
    const key = await this.keys.opening(e.keyId);
    if (!key) {
      throw new MeshError(
        ErrorCodes.Decrypt,
        `credential ${k} is encrypted under key ${e.keyId}, which is neither this process's master key file (${this.keys.kek.id}) nor a data key of mesh/master-key in the store; ` +
          "give every provisioner, verifier and rotator the same MESH_MASTER_KEY_FILE (or MESH_MASTER_KEY)",
      );
    }
    return JSON.parse(decrypt(key, e, k)) as StoredCredential;
  }

  /** Reads and decrypts a generation; undefined when it was never written. */
  async read(module: string, requirement: string, generation: number): Promise<StoredAt | undefined> {
    const k = keys.credential(module, requirement, generation);
    // Never older than this process's own writes of it: on a cluster a follower may answer a get before it applied them (read-floors.ts).
    const e = await getAtFloor(this.kv, k);
    if (!e || e.operation !== "PUT" || e.length === 0) return undefined;
    const record = CredentialRecord.parse(entryJson(e));
    const values = await this.open(k, record.encrypted as Encrypted);
    return { ...values, record, revision: e.revision };
  }

  /**
   * The secret material of a generation: the stored one if any (a crashed attempt is rolled
   * forward with the same secret), otherwise `generate()`'s, written before it is returned.
   * Two provisioners racing both end up with the one that was written first.
   */
  async ensure(
    grant: { module: string; requirement: string; id: string },
    generation: number,
    provider: string,
    generate: () => SecretMaterial,
  ): Promise<SecretMaterial> {
    return (await this.ensureStored(grant, generation, provider, generate)).secret;
  }

  /**
   * {@link ensure}, with the record as it is stored after it: {@link setBindings} writes over
   * that revision without reading the record again (on a cluster, a read fewer on the way to
   * a grant or a rotation).
   */
  async ensureStored(
    grant: { module: string; requirement: string; id: string },
    generation: number,
    provider: string,
    generate: () => SecretMaterial,
  ): Promise<StoredAt> {
    const existing = await this.read(grant.module, grant.requirement, generation);
    if (existing) return existing;
    const secret = generate();
    const k = keys.credential(grant.module, grant.requirement, generation);
    const record: CredentialRecord = {
      grant: grant.id,
      generation,
      provider,
      createdAt: new Date().toISOString(),
      encrypted: await this.seal(k, { secret }),
    };
    try {
      return { secret, record, revision: await casWrite(this.kv, k, recordJson(record), undefined) };
    } catch (e) {
      if (!isCasConflict(e)) throw e;
      const won = await this.read(grant.module, grant.requirement, generation);
      if (!won) throw new MeshError(ErrorCodes.Internal, `credential ${k} vanished during a concurrent write`, { retryable: true });
      return won;
    }
  }

  /** The generations of a grant the store holds a value of, ascending. */
  async generations(module: string, requirement: string): Promise<number[]> {
    const found: number[] = [];
    for await (const k of await this.kv.keys(keys.credentialsOf(module, requirement))) {
      const m = /\.g(\d+)$/.exec(k);
      if (m) found.push(Number(m[1]));
    }
    return found.sort((a, b) => a - b);
  }

  /**
   * Erases every generation of a grant: each key is purged (a rollup that removes all its
   * revisions from the stream), so no value of it is readable through the API any more, not a
   * delete marker over its history. Idempotent.
   */
  async purge(module: string, requirement: string): Promise<void> {
    for (const generation of await this.generations(module, requirement)) await this.purgeGeneration(module, requirement, generation);
  }

  /**
   * Erases one generation of a grant, every revision of it (idempotent). A data key of the
   * master key is erased only once no record is encrypted under it (else those records would
   * never open again): until then this throws a retryable `Conflict` saying how many and what to do.
   */
  async purgeGeneration(module: string, requirement: string, generation: number): Promise<void> {
    const k = keys.credential(module, requirement, generation);
    if (isMasterKeyRecord(k)) await this.checkUnused(k);
    await this.kv.purge(k);
  }

  /** Throws when data key `k` (a master-key record) still encrypts a record of the store. */
  private async checkUnused(k: string): Promise<void> {
    const e = await this.kv.get(k);
    if (!e || e.operation !== "PUT" || e.length === 0) return;
    const { secret } = await this.open(k, CredentialRecord.parse(entryJson(e)).encrypted as Encrypted);
    if (typeof secret.value !== "string") return;
    const id = parseMasterKey(secret.value).id;
    let users = 0;
    for await (const other of await this.kv.keys()) {
      const o = await this.kv.get(other);
      if (o && o.operation === "PUT" && o.length > 0 && CredentialRecord.parse(entryJson(o)).encrypted.keyId === id) users++;
    }
    if (users > 0) {
      throw new MeshError(
        ErrorCodes.Conflict,
        `${k} is the data key of ${users} credential record${users > 1 ? "s" : ""}, so it is kept: rotate the master key (meshctl rotate mesh/master-key), which moves them under the new one, and it goes at a later commit`,
        { retryable: true },
      );
    }
  }

  /**
   * Records the binding values the provider produced for a generation. `over`: the record as
   * {@link ensureStored} left it, written over without a read; should it have moved on since,
   * the compare-and-set fails and the record is read again.
   */
  async setBindings(module: string, requirement: string, generation: number, bindings: BindingValues, over?: StoredAt): Promise<void> {
    const k = keys.credential(module, requirement, generation);
    await casModify(
      this.kv,
      k,
      () => this.read(module, requirement, generation),
      async (cur): Promise<CredentialRecord | undefined> => {
        if (!cur) throw new MeshError(ErrorCodes.Internal, `credential ${k} missing while recording its bindings`, { retryable: true });
        if (cur.bindings && JSON.stringify(cur.bindings) === JSON.stringify(bindings)) return undefined;
        return { ...cur.record, appliedAt: new Date().toISOString(), encrypted: await this.seal(k, { secret: cur.secret, bindings }) };
      },
      over ? { start: over, startMayBeStale: true } : {},
    );
  }

  /**
   * Re-encrypts every record not under the sealing key (the newest data key) under it, each by
   * a compare-and-set on the revision read, so a concurrent write is read again, never lost.
   * The master key's own records stay under the KEK. Idempotent and resumable: a pass that
   * died half-way leaves records under the old key, which still opens, and the next pass moves
   * them. Passes repeat until one moves nothing (a writer that had not yet seen the new key may
   * have written under the old one meanwhile), at most `maxPasses` times.
   */
  async reencrypt(opts: { maxPasses?: number; onMoved?: (key: string) => void } = {}): Promise<{ target: string; moved: number; passes: number }> {
    await this.keys.refresh?.();
    const target = await this.keys.sealing();
    let moved = 0;
    let passes = 0;
    for (; passes < (opts.maxPasses ?? 5);) {
      passes++;
      let movedNow = 0;
      const all: string[] = [];
      for await (const k of await this.kv.keys()) all.push(k);
      for (const k of all) {
        if (isMasterKeyRecord(k)) continue;
        if (await this.reencryptOne(k, target)) {
          movedNow++;
          opts.onMoved?.(k);
        }
      }
      moved += movedNow;
      if (movedNow === 0) break;
    }
    return { target: target.id, moved, passes };
  }

  /** Moves record `k` under `target` unless it is there (or gone); true when it moved it. */
  private async reencryptOne(k: string, target: MasterKey): Promise<boolean> {
    const read = async () => {
      const e = await getAtFloor(this.kv, k);
      return e && e.operation === "PUT" && e.length > 0 ? { record: CredentialRecord.parse(entryJson(e)), revision: e.revision } : undefined;
    };
    const out = await casModify(this.kv, k, read, async (cur): Promise<CredentialRecord | undefined> => {
      if (!cur || cur.record.encrypted.keyId === target.id) return undefined;
      const values = await this.open(k, cur.record.encrypted as Encrypted);
      return { ...cur.record, encrypted: encrypt(target, JSON.stringify(values), k) };
    });
    return out.wrote;
  }
}
