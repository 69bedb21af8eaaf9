/**
 * Credential secrecy: generation of values, encryption at rest, sealing in transit.
 *
 * - Values are generated with the operating system's CSPRNG (`crypto.randomBytes`).
 * - At rest they are encrypted with AES-256-GCM under the master key, with a fresh 96-bit
 *   nonce per record and the record's identity as additional data, so a ciphertext moved to
 *   another key of the store does not decrypt.
 * - In transit to a holder they are sealed to the holder's curve25519 xkey (nkeys), so the
 *   broker and other subscribers see only ciphertext.
 */
import { createCipheriv, createDecipheriv, createHash, hkdfSync, randomBytes } from "node:crypto";
import { chmodSync, existsSync, linkSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { Prefix, createCurve, fromCurveSeed, type KeyPair } from "@nats-io/nkeys";
import { Codec } from "@nats-io/nkeys/lib/codec.js";
import { ErrorCodes, MeshError } from "./errors.js";
import { SealingKeyPair } from "./sealing-key.js";

export type { KeyPair };

/** A 32-byte master key and a short id of it (not secret: a hash prefix) for messages. */
export interface MasterKey {
  readonly id: string;
  readonly key: Buffer;
}

function makeKey(key: Buffer): MasterKey {
  const id = createHash("sha256").update(key).digest("hex").slice(0, 12);
  const mk = { id, key };
  // A master key printed by accident shows only its id.
  Object.defineProperty(mk, "toJSON", { value: () => ({ id }), enumerable: false });
  Object.defineProperty(mk, Symbol.for("nodejs.util.inspect.custom"), { value: () => `MasterKey(${id})`, enumerable: false });
  return mk;
}

/** Parses a master key given as 64 hex characters or as base64 of 32 bytes. */
export function parseMasterKey(text: string): MasterKey {
  const t = text.trim();
  const buf = /^[0-9a-fA-F]{64}$/.test(t) ? Buffer.from(t, "hex") : Buffer.from(t, "base64");
  if (buf.length !== 32) {
    throw new MeshError(ErrorCodes.MasterKey, "the master key must be 32 bytes, written as 64 hex characters or base64 (make one with: openssl rand -hex 32)");
  }
  return makeKey(buf);
}

/**
 * Loads the master key: from `MESH_MASTER_KEY` if set, otherwise from the file
 * `MESH_MASTER_KEY_FILE` (default `fallbackFile`), which is created with mode 0600 and a fresh
 * random key when it does not exist yet.
 */
export function loadMasterKey(env: NodeJS.ProcessEnv, fallbackFile: string): { key: MasterKey; source: string; created: boolean } {
  const inline = env.MESH_MASTER_KEY;
  if (inline) return { key: parseMasterKey(inline), source: "MESH_MASTER_KEY", created: false };
  const file = env.MESH_MASTER_KEY_FILE || fallbackFile;
  if (!existsSync(file)) {
    // Services that start together may all find no key: each writes a whole file of its own and
    // links it into place, which only the first does; the others read that one. A reader never
    // sees a partly written key.
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    const tmp = `${file}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`;
    writeFileSync(tmp, randomBytes(32).toString("hex") + "\n", { mode: 0o600, flag: "wx" });
    chmodSync(tmp, 0o600);
    let created = true;
    try {
      linkSync(tmp, file);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      created = false;
    } finally {
      unlinkSync(tmp);
    }
    return { key: parseMasterKey(readFileSync(file, "utf8")), source: file, created };
  }
  try {
    return { key: parseMasterKey(readFileSync(file, "utf8")), source: file, created: false };
  } catch (e) {
    if (e instanceof MeshError) throw new MeshError(e.code, `${file}: ${e.message}`, { cause: e });
    throw new MeshError(ErrorCodes.MasterKey, `cannot read the master key file ${file}: ${(e as Error).message}`, { cause: e });
  }
}

/** The AES-GCM nonce and tag lengths the mesh writes, and the only ones it reads. */
export const GCM_IV_BYTES = 12;
export const GCM_TAG_BYTES = 16;

/** An AES-256-GCM ciphertext as stored. */
export interface Encrypted {
  alg: "aes-256-gcm";
  keyId: string;
  iv: string;
  tag: string;
  data: string;
}

/** Encrypts `plaintext` under the master key, bound to `aad` (the record's identity). */
export function encrypt(mk: MasterKey, plaintext: string, aad: string): Encrypted {
  const iv = randomBytes(GCM_IV_BYTES);
  const c = createCipheriv("aes-256-gcm", mk.key, iv, { authTagLength: GCM_TAG_BYTES });
  c.setAAD(Buffer.from(aad));
  const data = Buffer.concat([c.update(plaintext, "utf8"), c.final()]);
  return { alg: "aes-256-gcm", keyId: mk.id, iv: iv.toString("base64"), tag: c.getAuthTag().toString("base64"), data: data.toString("base64") };
}

/** Decrypts what {@link encrypt} made; a wrong key or a tampered record is a clear error. */
export function decrypt(mk: MasterKey, e: Encrypted, aad: string): string {
  if (e.keyId !== mk.id) {
    throw new MeshError(
      ErrorCodes.Decrypt,
      `credential ${aad} was encrypted under master key ${e.keyId}, but this process has key ${mk.id}; ` +
        "give every provisioner the same MESH_MASTER_KEY or MESH_MASTER_KEY_FILE",
    );
  }
  const iv = Buffer.from(e.iv, "base64");
  const tag = Buffer.from(e.tag, "base64");
  // Node accepts a shorter tag (down to 4 bytes) and checks only that many: a forger would then
  // need to guess 32 bits, not 128. Only what encrypt() makes is accepted.
  if (iv.length !== GCM_IV_BYTES || tag.length !== GCM_TAG_BYTES) {
    throw new MeshError(
      ErrorCodes.Decrypt,
      `credential ${aad} does not decrypt: its nonce is ${iv.length} bytes and its tag ${tag.length} (they must be ${GCM_IV_BYTES} and ${GCM_TAG_BYTES}); the record was altered`,
    );
  }
  try {
    const d = createDecipheriv("aes-256-gcm", mk.key, iv, { authTagLength: GCM_TAG_BYTES });
    d.setAAD(Buffer.from(aad));
    d.setAuthTag(tag);
    return Buffer.concat([d.update(Buffer.from(e.data, "base64")), d.final()]).toString("utf8");
  } catch (cause) {
    throw new MeshError(ErrorCodes.Decrypt, `credential ${aad} does not decrypt: the record was altered or belongs elsewhere`, { cause });
  }
}

/**
 * A random secret of `bytes` bytes from the CSPRNG, as URL-safe base64 without padding:
 * safe in URIs, env files and SQL string literals.
 */
export function generateSecret(bytes = 32): string {
  return randomBytes(bytes).toString("base64url");
}

/**
 * A curve25519 key pair for sealing values in transit (nkeys format; its public key and the
 * box key shared with each peer are computed once, see {@link SealingKeyPair}).
 */
export function createSealingKey(): KeyPair {
  return new SealingKeyPair(createCurve());
}

/** Rebuilds a sealing key pair from its seed (as kept in a holder's state file). */
export function sealingKeyFromSeed(seed: string): KeyPair {
  return new SealingKeyPair(fromCurveSeed(new TextEncoder().encode(seed)));
}

const meshSealingKeys = new Map<string, KeyPair>();

/**
 * The mesh's sealing key: derived from the master key (HKDF-SHA256), so every provisioner and
 * rotator instance seals with the same key, and a holder that learned its public half from a
 * credential it fetched (a reply only the provisioner may send) can refuse values sealed by
 * anyone else. Made once per master key.
 */
export function meshSealingKey(mk: MasterKey): KeyPair {
  let kp = meshSealingKeys.get(mk.id);
  if (!kp) {
    const raw = new Uint8Array(hkdfSync("sha256", mk.key, Buffer.alloc(0), "mesh sealing key v1", 32));
    kp = sealingKeyFromSeed(new TextDecoder().decode(Codec.encodeSeed(Prefix.Curve, raw)));
    meshSealingKeys.set(mk.id, kp);
  }
  return kp;
}

/** Seals a JSON value to `recipient`'s public xkey; returns base64. */
export function sealTo(sender: KeyPair, recipient: string, value: unknown): string {
  const sealed = sender.seal(new TextEncoder().encode(JSON.stringify(value)), recipient);
  return Buffer.from(sealed).toString("base64");
}

/** Opens what {@link sealTo} made; throws when it was not sealed to `me` by `sender`. */
export function openFrom(me: KeyPair, sender: string, sealedBase64: string): unknown {
  const opened = me.open(Buffer.from(sealedBase64, "base64"), sender);
  if (!opened) throw new MeshError(ErrorCodes.Decrypt, "a sealed credential did not open: it was not sealed to this holder's key");
  return JSON.parse(new TextDecoder().decode(opened));
}
