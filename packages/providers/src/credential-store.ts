/**
 * Credentials at rest: one KV record per grant and generation, its values encrypted with
 * AES-256-GCM under the master key and bound to the record's key. The secret material is
 * written *before* the provider is touched (write-ahead, as Vault's rotation does), so a
 * provisioner that dies half-way leaves a record the next one finishes from, never a
 * resource with a password nobody knows.
 */
import { z } from "zod";
import {
  ErrorCodes,
  MeshError,
  decrypt,
  encrypt,
  isCasConflict,
  keys,
  storeWrite,
  type Encrypted,
  type KV,
  type MasterKey,
} from "@mesh/shared";
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

export class CredentialStore {
  constructor(
    private readonly kv: KV,
    private readonly key: MasterKey,
  ) {}

  /** Reads and decrypts a generation; undefined when it was never written. */
  async read(module: string, requirement: string, generation: number): Promise<(StoredCredential & { record: CredentialRecord; revision: number }) | undefined> {
    const k = keys.credential(module, requirement, generation);
    const e = await this.kv.get(k);
    if (!e || e.operation !== "PUT" || e.length === 0) return undefined;
    const record = CredentialRecord.parse(e.json());
    const values = JSON.parse(decrypt(this.key, record.encrypted as Encrypted, k)) as StoredCredential;
    return { ...values, record, revision: e.revision };
  }

  /**
   * The secret material of a generation: the stored one if any (a crashed attempt is rolled
   * forward with the same secret), otherwise `generate()`'s, written before it is returned.
   * Two provisioners racing both end up with the one that was written first.
   */
  async ensure(grant: { module: string; requirement: string; id: string }, generation: number, provider: string, generate: () => SecretMaterial): Promise<SecretMaterial> {
    const existing = await this.read(grant.module, grant.requirement, generation);
    if (existing) return existing.secret;
    const secret = generate();
    const k = keys.credential(grant.module, grant.requirement, generation);
    const record: CredentialRecord = {
      grant: grant.id,
      generation,
      provider,
      createdAt: new Date().toISOString(),
      encrypted: encrypt(this.key, JSON.stringify({ secret } satisfies StoredCredential), k),
    };
    try {
      const data = JSON.stringify(record);
      await storeWrite(this.kv, k, () => this.kv.create(k, data), { bytes: Buffer.byteLength(data) });
      return secret;
    } catch (e) {
      if (!isCasConflict(e)) throw e;
      const won = await this.read(grant.module, grant.requirement, generation);
      if (!won) throw new MeshError(ErrorCodes.Internal, `credential ${k} vanished during a concurrent write`, { retryable: true });
      return won.secret;
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

  /** Erases one generation of a grant, every revision of it (idempotent). */
  async purgeGeneration(module: string, requirement: string, generation: number): Promise<void> {
    await this.kv.purge(keys.credential(module, requirement, generation));
  }

  /** Records the binding values the provider produced for a generation. */
  async setBindings(module: string, requirement: string, generation: number, bindings: BindingValues): Promise<void> {
    const k = keys.credential(module, requirement, generation);
    for (;;) {
      const cur = await this.read(module, requirement, generation);
      if (!cur) throw new MeshError(ErrorCodes.Internal, `credential ${k} missing while recording its bindings`, { retryable: true });
      if (cur.bindings && JSON.stringify(cur.bindings) === JSON.stringify(bindings)) return;
      const record: CredentialRecord = {
        ...cur.record,
        appliedAt: new Date().toISOString(),
        encrypted: encrypt(this.key, JSON.stringify({ secret: cur.secret, bindings } satisfies StoredCredential), k),
      };
      try {
        const data = JSON.stringify(record);
        await storeWrite(this.kv, k, () => this.kv.update(k, data, cur.revision), { bytes: Buffer.byteLength(data) });
        return;
      } catch (e) {
        if (!isCasConflict(e)) throw e;
      }
    }
  }
}
