/**
 * `meshctl reissue-agent NODE --out DIR`: a node that lost its disk (re-imaged, its bindings root
 * deleted) lost its agent's own identity too, and an agent cannot fetch anything without one.
 * As the operator: revoke the node's agent identity (grant `mesh/nats-agent-<node>`, at once,
 * whoever confirmed: the old key may be on a disk that is gone, or in someone's hands), fetch
 * the new generation sealed to a key made for this one fetch, and write it to DIR in the
 * binding's layout (`creds`, `inboxPrefix` …: what `MESH_NATS_CREDENTIALS` reads), readable by
 * the caller only. The agent started on it writes its own binding again from its delivery, and
 * every other binding of its node (the lost-bindings restore), and confirms.
 */
import { existsSync, readdirSync, writeFileSync, chmodSync } from "node:fs";
import { join, resolve } from "node:path";
import {
  CONTROL_PLANE_MODULE,
  Grant,
  NAME_RULE,
  Rotation,
  agentPart,
  createSealingKey,
  errorMessage,
  identityRequirement,
  isValidName,
  keys,
} from "@mesh/shared";
import { fetchCredential, readJson, type Store } from "@mesh/shared/runtime";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import { bufferOutput, type Output } from "./output.js";
import { PRIVATE_FILE_MODE, makePrivateDir } from "./private-tree.js";
import { retrying, type RetryPolicy } from "./retry.js";
import { runRotate } from "./rotate-command.js";

export interface ReissueAgentOptions {
  node: string;
  /** Where the new identity is written: a directory that does not exist, or an empty one. */
  out: string;
  /** Recorded on the grant with who revoked and when; default names the node. */
  reason?: string;
  /** Who asks (`user@host`), recorded with the revocation. */
  by: string;
  json?: boolean;
  policy: RetryPolicy;
}

/** The grant holding `node`'s agent identity: `mesh/nats-agent-<node>`. */
export function agentIdentityGrant(node: string): { module: string; requirement: string; id: string; part: string } {
  const part = agentPart(node);
  const requirement = identityRequirement(part);
  return { module: CONTROL_PLANE_MODULE, requirement, id: `${CONTROL_PLANE_MODULE}/${requirement}`, part };
}

/** Refuses an `--out` that holds something: the identity is never written over other files. */
export function checkOut(dir: string): void {
  if (!existsSync(dir)) return;
  let entries: string[];
  try {
    entries = readdirSync(dir);
  } catch (e) {
    throw new CliError(`--out ${dir} is not a directory this user can read (${errorMessage(e)}); give a new directory`, ExitCodes.Usage, { cause: e });
  }
  if (entries.length > 0) throw new CliError(`--out ${dir} is not empty; give a new directory, nothing is written over other files`, ExitCodes.Usage);
}

/** Issues `opts.node`'s agent identity again and revokes the current one; see the file's comment. */
export async function runReissueAgent(store: Store, opts: ReissueAgentOptions, out: Output): Promise<number> {
  if (!isValidName(opts.node)) throw new CliError(`node ${JSON.stringify(opts.node)} is not a node name: ${NAME_RULE}`, ExitCodes.Usage);
  const dir = resolve(opts.out);
  checkOut(dir);
  const g = agentIdentityGrant(opts.node);
  const key = keys.grant(g.module, g.requirement);
  const grant = (await retrying("read the grant", opts.policy, () => readJson(store.kv.grants, key, Grant), { read: true }))?.value;
  if (!grant) {
    throw new CliError(
      `node ${opts.node} has no agent identity: module ${CONTROL_PLANE_MODULE} has no requirement ${g.requirement}. ` +
        `Each node listed in meshctl bootstrap --nodes (or meshctl control-plane --nodes) has one; meshctl get grants ${CONTROL_PLANE_MODULE} lists them`,
      ExitCodes.NotFound,
    );
  }
  const reason = opts.reason ?? `the agent identity of node ${opts.node} issued again (a node that lost its disk)`;
  // The revocation's own lines, or its JSON kept to be printed as part of this command's.
  const buffered = opts.json ? bufferOutput() : undefined;
  const revokeOut = buffered ?? out;
  const code = await runRotate(
    store,
    { grant: g.id, json: !!opts.json, graceMs: 5_000, policy: opts.policy, revoke: { graceMs: 0, by: opts.by, reason } },
    revokeOut,
  );
  if (code !== ExitCodes.Ok) {
    if (buffered) out.out(buffered.stdout.trimEnd());
    return code;
  }
  const rotation = (await readJson(store.kv.rotations, key, Rotation))?.value;
  if (!rotation)
    throw new CliError(`the revocation of ${g.id} committed but its record is gone; run meshctl reissue-agent ${opts.node} again`, ExitCodes.Failure);
  try {
    const fetched = await fetchCredential(store.nc, { grant: g.id, node: opts.node, part: g.part, generation: rotation.to }, createSealingKey());
    writeIdentity(dir, fetched.values);
  } catch (e) {
    throw new CliError(
      `generation ${rotation.to} of ${g.id} was issued (generation ${rotation.from} is revoked) but could not be fetched and written to ${dir}: ${errorMessage(e)}. ` +
        `Run meshctl reissue-agent ${opts.node} again (with an --out this user can write to, and the provisioner running)`,
      ExitCodes.Failure,
      { cause: e },
    );
  }
  if (opts.json) {
    out.out(JSON.stringify({ node: opts.node, grant: g.id, rotation: rotation.id, revoked: rotation.from, generation: rotation.to, out: dir }, null, 2));
    return ExitCodes.Ok;
  }
  out.out(
    [
      `generation ${rotation.to} of ${g.id} written to ${dir} (its creds and the binding's other files, readable by you only); generation ${rotation.from} is revoked.`,
      `On node ${opts.node}: copy that directory there, and start its agent once with MESH_NATS_CREDENTIALS set to it.`,
      `It writes its own binding again (${CONTROL_PLANE_MODULE}/${g.part}/${g.requirement} under its bindings root) and every other binding of the node, and confirms.`,
      `Then point MESH_NATS_CREDENTIALS back at that binding, restart the agent, and delete the copy.`,
    ].join("\n"),
  );
  return ExitCodes.Ok;
}

/** Writes `values` as a binding directory (one file per key, 0600, in a 0700 directory). */
export function writeIdentity(dir: string, values: Record<string, string>): void {
  makePrivateDir(dir);
  for (const [k, v] of Object.entries(values)) {
    const file = join(dir, k);
    writeFileSync(file, v, { mode: PRIVATE_FILE_MODE, flag: "wx" });
    chmodSync(file, PRIVATE_FILE_MODE);
  }
}
