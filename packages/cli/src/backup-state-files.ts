/**
 * The files beside the mesh's streams that a backup carries: what a server whose operator is the
 * mesh needs to accept the same identities again, and the mesh's certificate authority. Under
 * the state directory (`.mesh/`):
 *
 * - `nats-operator/`: the operator's and accounts' JWTs (`operator.json`), their keys sealed
 *   under the master key (`signing-keys.json`, `identity-keys.json`), the admin's `.creds`, and
 *   the account resolver's JWTs (`resolver/`: the account as last pushed, with its revocations);
 * - `mesh-ca/`: the authority's bundle and its key, sealed (and the next one's during a rotation).
 *
 * Not carried: what is made again at a start (the server's configuration, its certificates, its
 * pid) and its JetStream store, which the streams' snapshots are.
 *
 * Put back only where nothing is, or the same is: a different operator or authority in place
 * would make every identity of the backup fail, so a restore refuses before it writes anything.
 * The resolver's JWTs are the exception: one in place is the server's newer view of the same
 * account, and is kept.
 */
import { existsSync, lstatSync, readFileSync, readdirSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { StateFiles } from "@mesh/shared";
import { caFiles, operatorFiles, writePrivate } from "@mesh/providers";
import { CliError } from "./cli-error.js";
import { makePrivateDir } from "./private-tree.js";

/** A file of the state directory in a backup: its path as in `meshctl up`'s layout (`nats-operator/admin.creds`, `/`-separated) and its bytes. */
export interface StateFile {
  path: string;
  data: Buffer;
}

/**
 * Where those files are on this machine: under the state directory for `meshctl up` and
 * `bootstrap` ({@link stateDirsOf}); elsewhere on a host set up by hand (deploy/README.md:
 * `/etc/mesh/nats-operator`, the resolver's directory on the NATS host).
 */
export interface StateDirs {
  operator: string;
  resolver: string;
  ca: string;
}

/** The layout of `meshctl up` under state directory `stateDir`, with any of it placed elsewhere by `given`. */
export function stateDirsOf(stateDir: string, given: Partial<StateDirs> = {}): StateDirs {
  const operator = given.operator ?? join(stateDir, StateFiles.operatorDir);
  return { operator, resolver: given.resolver ?? operatorFiles(operator).resolverDir, ca: given.ca ?? join(stateDir, StateFiles.caDir) };
}

/** Each file a backup carries, by its path in a backup and where it is here; and the resolver's directory, whose files are kept as they are when present. */
function carried(dirs: StateDirs): { files: Map<string, string>; resolver: string } {
  const op = operatorFiles(dirs.operator);
  const ca = caFiles(dirs.ca);
  const inOperator = [op.operatorFile, op.signingKeysFile, op.identityKeysFile, op.adminCredsFile].map((f) => [`${StateFiles.operatorDir}/${basename(f)}`, f]);
  const inCa = [ca.certFile, ca.keyFile, ca.nextKeyFile].map((f) => [`${StateFiles.caDir}/${basename(f)}`, f]);
  return { files: new Map([...inOperator, ...inCa] as Array<[string, string]>), resolver: dirs.resolver };
}

/** The prefix of a resolver's JWT in a backup. */
const RESOLVER_PATH = `${StateFiles.operatorDir}/${basename(operatorFiles("").resolverDir)}/`;
/** The operator's JWTs in a backup: there when the mesh is its server's operator. */
const OPERATOR_PATH = `${StateFiles.operatorDir}/${basename(operatorFiles("").operatorFile)}`;

/** Whether `files` hold an operator's (a mesh that is its server's operator). */
export function holdsOperator(files: readonly StateFile[]): boolean {
  return files.some((f) => f.path === OPERATOR_PATH);
}

/** The files a backup carries that are present in `dirs` (none for a mesh without an operator or authority of its own). */
export function collectStateFiles(dirs: StateDirs): StateFile[] {
  const { files, resolver } = carried(dirs);
  const found = [...files].filter(([, at]) => existsSync(at));
  if (existsSync(resolver))
    for (const name of readdirSync(resolver).sort()) if (lstatSync(join(resolver, name)).isFile()) found.push([RESOLVER_PATH + name, join(resolver, name)]);
  return found.map(([path, at]) => ({ path, data: readFileSync(at) }));
}

/** Where `file` goes among the places {@link carried} names, refused when it is not one of the files a backup carries (a changed backup cannot write elsewhere). */
function placeOf({ files, resolver }: ReturnType<typeof carried>, file: StateFile): { at: string; kept: boolean } {
  const at = files.get(file.path);
  if (at) return { at, kept: false };
  const name = file.path.startsWith(RESOLVER_PATH) ? file.path.slice(RESOLVER_PATH.length) : "";
  if (/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name)) return { at: join(resolver, name), kept: true };
  throw new CliError(`the backup holds a file meshctl does not restore (${JSON.stringify(file.path)}): it was not written by meshctl backup`);
}

/**
 * Writes `files` into `dirs` (directories 0700, files 0600) where absent; returns the paths
 * written. Throws a CliError, having written nothing, when a file in place differs from the
 * backup's (another operator or authority), naming it and what to do.
 */
export function putBackStateFiles(dirs: StateDirs, files: readonly StateFile[]): string[] {
  const into = carried(dirs);
  const placed = files.map((f) => ({ ...f, ...placeOf(into, f) }));
  const differing = placed.filter((f) => !f.kept && existsSync(f.at) && !readFileSync(f.at).equals(f.data));
  if (differing.length)
    throw new CliError(
      `${differing.map((f) => f.at).join(", ")} ${differing.length === 1 ? "differs" : "differ"} from the backup's: this machine holds another mesh's ` +
        `operator or certificate authority, under which none of the backup's identities would be accepted. Restore where there is none (a new machine's ` +
        `directory), or move ${[...new Set(differing.map((f) => dirname(f.at)))].join(" and ")} away first`,
    );
  const written: string[] = [];
  for (const f of placed) {
    if (existsSync(f.at)) continue;
    makePrivateDir(dirname(f.at));
    writePrivate(f.at, f.data);
    written.push(f.at);
  }
  return written;
}
