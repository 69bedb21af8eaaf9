/**
 * `meshctl admin add|remove|list`: operators with names. Each is a `nats.user` identity of module
 * `mesh` (requirement `operator-<name>`), issued by the mesh's NATS provider with
 * `operatorPermissions` (control-plane.ts in @mesh/shared): its requests go on subjects that
 * carry its name, so the services record who asked from the subject the server authorised
 * (audit.ts). Run as the bootstrap admin, in the directory of `meshctl up` or `bootstrap` (its
 * `.mesh/` holds the master key the signing keys are sealed under). The bootstrap admin stays,
 * as the break-glass identity.
 */
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { Kvm } from "@nats-io/kv";
import {
  BOOTSTRAP_PROVIDER,
  CONTROL_PLANE_MODULE,
  ProviderDoc,
  StateFiles,
  checkOperatorName,
  errorMessage,
  isMeshError,
  loadMasterKey,
  operatorOfRequirement,
  operatorPermissions,
  operatorRequirement,
} from "@mesh/shared";
import { entryJson, readJson, type Store } from "@mesh/shared/runtime";
import { NATS_IDENTITY_RECORDS_BUCKET, createNatsUserAdapter, providerConfig } from "@mesh/providers";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import type { Output } from "./output.js";
import { checkOut, writeIdentity } from "./reissue-agent-command.js";
import { meshctlCommand } from "./paths.js";

/** One named operator, as `admin list` shows it. */
export interface OperatorEntry {
  name: string;
  /** Its identity's public key (`U…`). */
  user: string;
  generation: number;
  expiresAt: string;
}

/** The mesh's NATS provider, able to issue identities; a CliError saying why not. */
async function identityProvider(store: Store): Promise<ProviderDoc> {
  const doc = (await readJson(store.kv.providers, BOOTSTRAP_PROVIDER, ProviderDoc))?.value;
  if (!doc?.options?.signingKeysFile) {
    throw new CliError(
      `the mesh's NATS issues no identities (provider ${BOOTSTRAP_PROVIDER} ${doc ? "has no signing keys: its server has no authentication" : "is not in the store"}), so an operator cannot have one of its own. ` +
        `Named operators need a server whose operator is the mesh: ${meshctlCommand()} up (on a server of its own) or ${meshctlCommand()} bootstrap`,
      ExitCodes.Failure,
    );
  }
  return doc;
}

/** The adapter that issues and revokes identities on the mesh's NATS, with the master key of the working directory's `.mesh/`. */
function identityAdapter(doc: ProviderDoc) {
  const fallback = resolve(".mesh", StateFiles.masterKey);
  if (!process.env.MESH_MASTER_KEY && !existsSync(process.env.MESH_MASTER_KEY_FILE || fallback)) {
    throw new CliError(
      `no master key here (${process.env.MESH_MASTER_KEY_FILE || fallback}): the signing keys that issue identities are sealed under it. ` +
        `Run meshctl admin in the directory of the meshctl up or bootstrap that runs this mesh, or set MESH_MASTER_KEY_FILE`,
      ExitCodes.Usage,
    );
  }
  const { key } = loadMasterKey(process.env, fallback);
  return createNatsUserAdapter(providerConfig(doc, process.env, key));
}

/** Every named operator whose identity has not been removed, by name. */
export async function listOperators(store: Store): Promise<OperatorEntry[]> {
  let kv;
  try {
    kv = await new Kvm(store.js).open(NATS_IDENTITY_RECORDS_BUCKET);
  } catch (e) {
    throw new CliError(`could not open the identities' records (${NATS_IDENTITY_RECORDS_BUCKET}): ${errorMessage(e)}`, ExitCodes.Failure, { cause: e });
  }
  const found: OperatorEntry[] = [];
  for await (const k of await kv.keys(`${CONTROL_PLANE_MODULE}.*.*`)) {
    const [, requirement] = k.split(".");
    const name = operatorOfRequirement(requirement ?? "");
    if (!name) continue;
    const e = await kv.get(k);
    if (!e || e.operation !== "PUT") continue;
    const r = entryJson(e) as { generation: number; user: string; expiresAt: number; revokedAt?: number };
    if (r.revokedAt !== undefined) continue;
    found.push({ name, user: r.user, generation: r.generation, expiresAt: new Date(r.expiresAt * 1000).toISOString() });
  }
  return found.sort((a, b) => a.name.localeCompare(b.name) || a.generation - b.generation);
}

function checkName(name: string): void {
  const why = checkOperatorName(name);
  if (why) throw new CliError(why, ExitCodes.Usage);
}

/** `meshctl admin add NAME --out DIR`: issues operator NAME's identity and writes it to DIR. */
export async function runAdminAdd(store: Store, opts: { name: string; out: string; json?: boolean }, out: Output): Promise<number> {
  checkName(opts.name);
  const dir = resolve(opts.out);
  checkOut(dir);
  const doc = await identityProvider(store);
  if ((await listOperators(store)).some((o) => o.name === opts.name)) {
    throw new CliError(
      `operator ${opts.name} has an identity already; to issue a new one, remove it first (${meshctlCommand()} admin remove ${opts.name}: its current one stops working at once)`,
      ExitCodes.Failure,
    );
  }
  const adapter = identityAdapter(doc);
  try {
    const p = operatorPermissions(opts.name);
    const made = await adapter.create({
      grant: { module: CONTROL_PLANE_MODULE, requirement: operatorRequirement(opts.name), generation: 1 },
      secret: adapter.generate(),
      options: { publish: p.publish, subscribe: p.subscribe, ...(p.denyPublish ? { denyPublish: p.denyPublish } : {}) },
    });
    writeIdentity(dir, made.bindings);
    if (opts.json) {
      out.out(JSON.stringify({ name: opts.name, out: dir, user: made.bindings.nkey, expiresAt: made.expiresAt }, null, 2));
      return ExitCodes.Ok;
    }
    out.out(
      [
        `operator ${opts.name}: identity written to ${dir} (its creds and inbox prefix, readable by you only)${made.expiresAt ? `; it expires ${made.expiresAt}` : ""}.`,
        `Give the directory to ${opts.name}, who runs meshctl with MESH_NATS_CREDENTIALS=${dir}: every request is recorded as operator:${opts.name} in the audit trail (${meshctlCommand()} audit).`,
      ].join("\n"),
    );
    return ExitCodes.Ok;
  } catch (e) {
    if (isMeshError(e)) throw new CliError(`could not issue operator ${opts.name}'s identity: ${e.message}`, ExitCodes.Failure, { cause: e });
    throw e;
  } finally {
    await adapter.close();
  }
}

/** `meshctl admin remove NAME`: revokes every identity of operator NAME (its connections close at once). */
export async function runAdminRemove(store: Store, opts: { name: string; json?: boolean }, out: Output): Promise<number> {
  checkName(opts.name);
  const doc = await identityProvider(store);
  const had = (await listOperators(store)).filter((o) => o.name === opts.name);
  if (had.length === 0) {
    throw new CliError(`there is no operator ${opts.name}; ${meshctlCommand()} admin list names them`, ExitCodes.NotFound);
  }
  const adapter = identityAdapter(doc);
  try {
    await adapter.delete({ grant: { module: CONTROL_PLANE_MODULE, requirement: operatorRequirement(opts.name) } });
  } catch (e) {
    if (isMeshError(e)) throw new CliError(`could not revoke operator ${opts.name}'s identity: ${e.message}; try again`, ExitCodes.Failure, { cause: e });
    throw e;
  } finally {
    await adapter.close();
  }
  if (opts.json) out.out(JSON.stringify({ name: opts.name, revoked: had.map((o) => o.user) }, null, 2));
  else out.out(`operator ${opts.name} removed: its identity (${had.map((o) => o.user).join(", ")}) is revoked, and the server has closed its connections`);
  return ExitCodes.Ok;
}

/** `meshctl admin list`: the named operators. */
export async function runAdminList(store: Store, opts: { json?: boolean }, out: Output): Promise<number> {
  await identityProvider(store);
  const all = await listOperators(store);
  if (opts.json) {
    out.out(JSON.stringify({ operators: all, breakGlass: "the bootstrap admin (admin.creds)" }, null, 2));
    return ExitCodes.Ok;
  }
  if (all.length === 0) out.out(`no named operators; only the bootstrap admin (break-glass). Add one with: ${meshctlCommand()} admin add NAME --out DIR`);
  else {
    out.out("NAME\tIDENTITY\tEXPIRES");
    for (const o of all) out.out(`${o.name}\t${o.user}\t${o.expiresAt}`);
  }
  return ExitCodes.Ok;
}
