/**
 * The values of a rotation, in the broadcast itself, for the SDK instances of one part: a
 * broadcast is one message for all of them (holder-streams.ts), so k+1 cannot be sealed to each
 * instance's own xkey in it; it is encrypted (AES-256-GCM) under a key of the part's, which an
 * instance is given, sealed to its own xkey, by the provisioner with the first credential it
 * fetches. Without it, or when it does not open, the instance fetches k+1 as before.
 *
 * The key is derived from the master key for one grant, one part on one node and one
 * incarnation of the grant (its `createdAt`: a grant deleted and declared again gets a new
 * key). Who has it: the mesh's services that hold the master key, and the part's instances,
 * which share its identity and its credentials anyway; a part that no longer holds the grant is
 * no longer given it, and its identity is taken back with it.
 */
import { hkdfSync } from "node:crypto";
import { decrypt, encrypt, parseMasterKey, type Encrypted, type MasterKey } from "./crypto.js";
import type { CredentialValues } from "./schemas/events.js";

/** The part key of `part` on `node` for grant `grant` in its incarnation `createdAt`, as base64 (what the provisioner seals to an instance). */
export function partRotationKey(mk: MasterKey, grant: string, node: string, part: string, createdAt: string | undefined): string {
  const info = ["mesh part rotation key v1", grant, node, part, createdAt ?? ""].join("\0");
  return Buffer.from(hkdfSync("sha256", mk.key, Buffer.alloc(0), info, 32)).toString("base64");
}

/** What the values are bound to: a ciphertext of one rotation, grant, part and generation opens for no other. */
function aadOf(b: { rotation: string; grant: string; to: number }, node: string, part: string): string {
  return `${b.rotation}\0${b.grant}\0${node}\0${part}\0${b.to}`;
}

/** k+1's `values` encrypted under part key `key` (base64) for broadcast `b` to `part` on `node`. */
export function encryptForPart(
  key: string,
  b: { rotation: string; grant: string; to: number },
  node: string,
  part: string,
  values: CredentialValues,
): Encrypted {
  return encrypt(parseMasterKey(key), JSON.stringify(values), aadOf(b, node, part));
}

/** The values {@link encryptForPart} made, or undefined when they do not open with `key` for this broadcast and part (then fetch). */
export function decryptForPart(
  key: MasterKey,
  b: { rotation: string; grant: string; to: number },
  node: string,
  part: string,
  e: Encrypted,
): CredentialValues | undefined {
  try {
    const v = JSON.parse(decrypt(key, e, aadOf(b, node, part))) as unknown;
    if (!v || typeof v !== "object" || Object.values(v).some((x) => typeof x !== "string")) return undefined;
    return v as CredentialValues;
  } catch {
    return undefined;
  }
}
