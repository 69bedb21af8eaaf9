/**
 * A stand-in for the provisioner's credential source, for tests of holders (the agent, the
 * SDK) without a provisioner: it stores a generation's binding values encrypted in KV
 * `credentials` under a master key, and answers `subjects.credentialFetchesAll` with them sealed
 * to the caller's xkey — with the real shared crypto, the real subjects and schemas. It
 * checks, as the provisioner does, that the caller is a target of the grant.
 */
import { randomBytes } from "node:crypto";
import {
  CredentialFetchRequest,
  ErrorCodes,
  Grant,
  MeshError,
  QueueGroups,
  createSealingKey,
  decrypt,
  encrypt,
  keys,
  parseGrantId,
  parseMasterKey,
  sealTo,
  subjects,
} from "@mesh/shared";
import { readJson, serveJson, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";

export interface CredentialResponder {
  /** Stores generation `generation` of `<module>/<requirement>` (encrypted). */
  put(module: string, requirement: string, generation: number, values: Record<string, string>): Promise<void>;
  /** Requests answered so far. */
  readonly served: number;
  /** Starts answering (again). */
  start(): void;
  /** Stops answering; fetches then fail with "no responders". */
  stop(): Promise<void>;
}

export function credentialResponder(store: Store, log: Logger): CredentialResponder {
  const mk = parseMasterKey(randomBytes(32).toString("hex"));
  const sender = createSealingKey();
  let sub: { stop(): Promise<void> } | undefined;
  let served = 0;

  const handle = async (body: unknown) => {
    const req = CredentialFetchRequest.parse(body);
    const id = parseGrantId(req.grant);
    if (!id) throw new MeshError(ErrorCodes.InvalidRequest, `not a grant id: ${req.grant}`);
    const grant = await readJson(store.kv.grants, keys.grant(id.module, id.requirement), Grant);
    if (!grant?.value.targets.some((t) => t.part === req.part && t.node === req.node)) {
      throw new MeshError(ErrorCodes.NotFound, `part ${req.part} on node ${req.node} is not a holder of grant ${req.grant}`);
    }
    const k = keys.credential(id.module, id.requirement, req.generation);
    const e = await store.kv.credentials.get(k);
    if (!e || e.operation !== "PUT") throw new MeshError(ErrorCodes.NotFound, `no generation ${req.generation} of ${req.grant}`, { retryable: true });
    const values: unknown = JSON.parse(decrypt(mk, (e.json() as { encrypted: Parameters<typeof decrypt>[1] }).encrypted, k));
    served++;
    return { ok: true, generation: req.generation, sender: sender.getPublicKey(), sealed: sealTo(sender, req.recipient, values) };
  };

  const responder: CredentialResponder = {
    async put(module, requirement, generation, values) {
      const k = keys.credential(module, requirement, generation);
      const record = { grant: `${module}/${requirement}`, generation, createdAt: new Date().toISOString(), encrypted: encrypt(mk, JSON.stringify(values), k) };
      await store.kv.credentials.put(k, JSON.stringify(record));
    },
    get served() {
      return served;
    },
    start() {
      sub ??= serveJson(store.nc, subjects.credentialFetchesAll, QueueGroups.provisioner, log, handle);
    },
    async stop() {
      await sub?.stop();
      sub = undefined;
    },
  };
  responder.start();
  return responder;
}
