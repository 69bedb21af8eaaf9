/**
 * The files of a NATS server whose operator is the mesh, in one directory (0700, every file
 * 0600): made once, then reused as they are, so a restarted server keeps its accounts.
 *
 * - `operator.json`: the operator's and the accounts' JWTs and public keys (not secret);
 * - `signing-keys.json`: the keys the services that issue and retire identities hold online,
 *   sealed under the master key; `identity-keys.json`: the operator's and the accounts' identity
 *   seeds, sealed the same way, needed only to set a server up again;
 * - `admin.creds`: the operator's own user of the mesh's account, every permission, for
 *   `nats` tooling and `meshctl` (a standard decorated `.creds` file);
 * - `server.conf`, `resolver/` and `store/`: a server's configuration, account JWT store and
 *   JetStream store, when the mesh runs the server itself.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { OPERATOR_ADMIN_CREDS, decrypt, encrypt, type Encrypted, type MasterKey } from "@mesh/shared";
import { createOperatorSetup, openSigningKeys, operatorServerConfig, sealSigningKeys, type IdentitySeeds, type ServerListen } from "./nats-jwt.js";

/** The public half of an operator setup, as `operator.json` keeps it. */
export interface OperatorPublic {
  operatorJwt: string;
  systemAccountJwt: string;
  accountJwt: string;
  systemAccount: string;
  account: string;
}

export interface OperatorFiles {
  dir: string;
  operatorFile: string;
  signingKeysFile: string;
  identityKeysFile: string;
  adminCredsFile: string;
  configFile: string;
  resolverDir: string;
  storeDir: string;
  pidFile: string;
}

export function operatorFiles(dir: string): OperatorFiles {
  return {
    dir,
    operatorFile: join(dir, "operator.json"),
    signingKeysFile: join(dir, "signing-keys.json"),
    identityKeysFile: join(dir, "identity-keys.json"),
    adminCredsFile: join(dir, OPERATOR_ADMIN_CREDS),
    configFile: join(dir, "server.conf"),
    resolverDir: join(dir, "resolver"),
    storeDir: join(dir, "store"),
    pidFile: join(dir, "nats.pid"),
  };
}

const IDENTITY_AAD = "mesh nats identity keys";

/** Writes `text` to `file` (0600) through a temporary file, so no reader sees half of it. */
export function writePrivate(file: string, text: string | Buffer): void {
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, text, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, file);
}

/**
 * Makes the operator's keys and JWTs in `files.dir` unless they are there already (then they
 * are kept: a new operator would lock every identity out); returns the public half. The admin's
 * `.creds` is written last, so its presence says the set is whole.
 */
export async function ensureOperator(files: OperatorFiles, mk: MasterKey): Promise<OperatorPublic> {
  mkdirSync(files.dir, { recursive: true, mode: 0o700 });
  chmodSync(files.dir, 0o700);
  if (!existsSync(files.adminCredsFile)) {
    const s = await createOperatorSetup();
    const pub: OperatorPublic = {
      operatorJwt: s.operatorJwt,
      systemAccountJwt: s.systemAccountJwt,
      accountJwt: s.accountJwt,
      systemAccount: s.signing.systemAccount,
      account: s.signing.account,
    };
    writePrivate(files.operatorFile, `${JSON.stringify(pub, null, 2)}\n`);
    writePrivate(files.signingKeysFile, sealSigningKeys(mk, s.signing));
    writePrivate(files.identityKeysFile, `${JSON.stringify({ mesh: IDENTITY_AAD, sealed: encrypt(mk, JSON.stringify(s.identity), IDENTITY_AAD) }, null, 2)}\n`);
    writePrivate(files.adminCredsFile, s.adminCreds);
  }
  // Opening them checks that they are whole and sealed under this master key.
  openSigningKeys(mk, readFileSync(files.signingKeysFile, "utf8"));
  return readOperator(files);
}

/** The public half of the operator in `files.dir`; throws an Error when it is not there. */
export function readOperator(files: OperatorFiles): OperatorPublic {
  const pub = JSON.parse(readFileSync(files.operatorFile, "utf8")) as Partial<OperatorPublic>;
  for (const k of ["operatorJwt", "systemAccountJwt", "accountJwt", "systemAccount", "account"] as const) {
    if (typeof pub[k] !== "string") throw new Error(`${files.operatorFile} lacks ${k}`);
  }
  return pub as OperatorPublic;
}

/** The identity seeds, opened with the master key (only to set a server up again). */
export function readIdentitySeeds(files: OperatorFiles, mk: MasterKey): IdentitySeeds {
  const f = JSON.parse(readFileSync(files.identityKeysFile, "utf8")) as { sealed: Encrypted };
  return JSON.parse(decrypt(mk, f.sealed, IDENTITY_AAD)) as IdentitySeeds;
}

/** The configuration of a server of this operator, listening as `listen` says (stores under `files.dir` by default). */
export function operatorConfig(files: OperatorFiles, pub: OperatorPublic, listen: Pick<ServerListen, "host" | "port"> & Partial<ServerListen>): string {
  return operatorServerConfig(pub, { storeDir: files.storeDir, resolverDir: files.resolverDir, ...listen });
}

/** Writes `server.conf` for a server the mesh starts itself, with its stores under `files.dir`. */
export async function prepareOperatorServer(
  files: OperatorFiles,
  mk: MasterKey,
  listen: { host: string; port: number; monitorPort?: number; tls?: ServerListen["tls"] },
): Promise<OperatorPublic> {
  const pub = await ensureOperator(files, mk);
  mkdirSync(files.storeDir, { recursive: true, mode: 0o700 });
  mkdirSync(files.resolverDir, { recursive: true, mode: 0o700 });
  writePrivate(files.configFile, operatorConfig(files, pub, { ...listen, pidFile: files.pidFile }));
  return pub;
}
