/**
 * Serving credential values to holders: only to a part the grant is delivered to, only a
 * generation that exists, and sealed to the caller's xkey so nothing in between reads it.
 */
import {
  CredentialFetchRequest,
  ErrorCodes,
  Grant,
  MeshError,
  createSealingKey,
  keys,
  parseGrantId,
  readJson,
  sealTo,
  type CredentialFetchReply,
  type Store,
} from "@mesh/shared";
import type { CredentialStore } from "@mesh/providers";

// The provisioner's sealing key: ephemeral, one per process; its public half travels with each reply.
const sender = createSealingKey();

export async function handleCredentialFetch(store: Store, credentials: CredentialStore, body: unknown): Promise<CredentialFetchReply> {
  const parsed = CredentialFetchRequest.safeParse(body);
  if (!parsed.success) {
    throw new MeshError(ErrorCodes.InvalidRequest, `not a credential fetch request: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
  }
  const req = parsed.data;
  const id = parseGrantId(req.grant);
  if (!id) throw new MeshError(ErrorCodes.InvalidRequest, `not a grant id: ${JSON.stringify(req.grant)} (expected <module>/<requirement>)`);
  const grant = await readJson(store.kv.grants, keys.grant(id.module, id.requirement), Grant);
  if (!grant) throw new MeshError(ErrorCodes.NotFound, `grant ${req.grant} does not exist`);
  if (!grant.value.targets.some((t) => t.part === req.part && t.node === req.node)) {
    throw new MeshError(ErrorCodes.NotFound, `part ${req.part} on node ${req.node} is not a holder of grant ${req.grant}`);
  }
  if (req.generation > grant.value.generation) {
    throw new MeshError(ErrorCodes.NotFound, `grant ${req.grant} has no generation ${req.generation} yet (current: ${grant.value.generation})`, { retryable: true });
  }
  const cred = await credentials.read(id.module, id.requirement, req.generation);
  if (!cred?.bindings) {
    throw new MeshError(ErrorCodes.NotFound, `generation ${req.generation} of ${req.grant} is not applied yet`, { retryable: true });
  }
  let sealed: string;
  try {
    sealed = sealTo(sender, req.recipient, cred.bindings);
  } catch (e) {
    throw new MeshError(ErrorCodes.InvalidRequest, "recipient is not a curve25519 public key (an nkeys xkey starting with X)", { cause: e });
  }
  return { ok: true, generation: req.generation, sender: sender.getPublicKey(), sealed };
}
