/**
 * `meshctl backup FILE` and `meshctl restore FILE`: every stream of the mesh (its buckets, the
 * holders' streams, the audit trail) through JetStream's own snapshots, which keep sequences,
 * revisions and consumers' floors, with the master key, in one file encrypted under a key the
 * operator gives (backup-file.ts). The mesh keeps running while it is taken.
 *
 * Consistent means: every generation a grant or a rotation in the backup names is in the
 * backup's credentials. JetStream has no moment across streams, so the snapshots are taken in a
 * fixed order ({@link backupOrder}): first every stream whose records the services derive
 * again or only add to (manifests, modules, receipts, the holders' streams, the audit trail…),
 * then, together and last, the grants, the rotations and the credentials. A generation is
 * written before any record names it (the credential first, then the rotation or grant), so
 * credentials taken after the grants and rotations hold every generation those name, except one
 * retired (purged) in between: the credentials stream is read for purges over those moments,
 * and when there was one, those three are taken again. A restore onto an empty server puts
 * every stream back as it was snapshotted; the services, started on it, verify every grant and
 * carry on with what was running (a running rotation whose broadcast a holder stream's snapshot,
 * taken before the rotations', does not hold is published there again by the rotator).
 */
import { existsSync, readFileSync, writeFileSync, renameSync, mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { Buckets, RECORD_VERSION, parseMasterKey, type MasterKey } from "@mesh/shared";
import { restoreStream, snapshotStream, storeReplicas, type NatsConnection, type StreamSnapshot } from "@mesh/shared/runtime";
import { openBackup, sealBackup, type BackupContents, type BackupHeader } from "./backup-file.js";
import { collectStateFiles, holdsOperator, putBackStateFiles, type StateDirs } from "./backup-state-files.js";
import { CliError } from "./cli-error.js";
import { firstNatsServer } from "./connect.js";
import { ExitCodes, type ExitCode } from "./exit-codes.js";
import { liveLine, type LiveLine } from "./live-status.js";
import type { Output } from "./output.js";

const kvStreamOf = (bucket: string) => `KV_${bucket}`;
const CREDENTIALS = kvStreamOf(Buckets.credentials);

/** The streams of the mesh among `names`: its buckets (`KV_mesh-…`), object stores (`OBJ_mesh_…`) and streams (`MESH_…`). */
export function isMeshStream(name: string): boolean {
  return name.startsWith("KV_mesh-") || name.startsWith("OBJ_mesh_") || name.startsWith("MESH_");
}

/** The streams whose records name generations, and the credentials they name, in the order their snapshots are taken: last of all, together. */
const REFERRING = [kvStreamOf(Buckets.grants), kvStreamOf(Buckets.rotations)];

/** The order the snapshots of `names` (the mesh's streams) are taken in: see the file's comment. Pure. */
export function backupOrder(names: readonly string[]): string[] {
  const last = [...REFERRING, CREDENTIALS];
  return [...names.filter((n) => !last.includes(n)).sort(), ...last.filter((n) => names.includes(n))];
}

/** The key a backup is encrypted under, from `file` (64 hex characters, as `openssl rand -hex 32` writes). */
export function readBackupKey(file: string): MasterKey {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new CliError(
      `cannot read the backup key ${file}: ${(e as Error).message}; make one with: (umask 077 && openssl rand -hex 32 > ${file})`,
      ExitCodes.Usage,
    );
  }
  try {
    return parseMasterKey(text);
  } catch {
    throw new CliError(`${file} is not a backup key: it must hold 32 bytes as 64 hex characters (make one with: openssl rand -hex 32)`, ExitCodes.Usage);
  }
}

/**
 * The master key the mesh's credentials are encrypted under, as the services find it
 * (`MESH_MASTER_KEY`, else the file `MESH_MASTER_KEY_FILE`, else `fallbackFile`); never made
 * here, unlike a service's start: a backup without it could not be restored.
 */
export function existingMasterKey(env: NodeJS.ProcessEnv, fallbackFile: string): MasterKey {
  if (env.MESH_MASTER_KEY) return parseMasterKey(env.MESH_MASTER_KEY);
  const file = env.MESH_MASTER_KEY_FILE || fallbackFile;
  if (!existsSync(file))
    throw new CliError(
      `a backup carries the master key, and there is none at ${file}: run meshctl in the mesh's directory (where meshctl up keeps .mesh/), or name the key with MESH_MASTER_KEY_FILE`,
    );
  return parseMasterKey(readFileSync(file, "utf8"));
}

/** How many times the last snapshots are taken again when a generation was retired while they were taken. */
const ATTEMPTS = 10;

async function meshStreams(jsm: JetStreamManager): Promise<string[]> {
  const names: string[] = [];
  for await (const n of jsm.streams.names()) if (isMeshStream(n)) names.push(n);
  return names;
}

/**
 * Whether a credential was purged or deleted in the credentials stream after sequence `after`,
 * up to `upTo`: each message between is read by its sequence (a direct get, headers and a small
 * value; one removed since is skipped), a handful while the three last snapshots were taken.
 */
async function retiredBetween(jsm: JetStreamManager, after: number, upTo: number): Promise<boolean> {
  for (let seq = after + 1; seq <= upTo; seq++) {
    // Null for one removed since (by a purge of its key, itself a message of the range).
    const m = await jsm.direct.getMessage(CREDENTIALS, { seq });
    const op = m?.header?.get("KV-Operation");
    if (op === "PURGE" || op === "DEL") return true;
  }
  return false;
}

/** Progress as meshctl shows it, but none beside `--json`: standard output is the document alone. */
const progressLine = (out: Output, json: boolean | undefined): LiveLine => (json ? { show: () => undefined, done: () => undefined } : liveLine(out));

const size = (bytes: number) => (bytes < 1024 * 1024 ? `${(bytes / 1024).toFixed(1)} KiB` : `${(bytes / 1024 / 1024).toFixed(1)} MiB`);

/**
 * Writes the backup of the mesh at `nc` to `o.file`, encrypted under `o.key`, with the master
 * key `o.masterKey` and the operator's and authority's files in `o.dirs`.
 */
export async function runBackup(
  nc: NatsConnection,
  o: { file: string; key: MasterKey; masterKey: MasterKey; dirs: StateDirs; meshVersion: string; json?: boolean },
  out: Output,
): Promise<ExitCode> {
  const jsm = await jetstreamManager(nc);
  const names = backupOrder(await meshStreams(jsm));
  if (!names.includes(kvStreamOf(Buckets.grants)) || !names.includes(CREDENTIALS))
    throw new CliError("this server holds no mesh (no KV_mesh-grants stream): point --server at the mesh's NATS server, as its identity's admin");
  const line = progressLine(out, o.json);
  const snapshots: StreamSnapshot[] = [];
  const take = async (name: string) =>
    snapshots.push(await snapshotStream(nc, name, (bytes) => line.show(`backing up ${snapshots.length + 1}/${names.length} ${name}: ${size(bytes)}`)));
  const last = names.filter((n) => REFERRING.includes(n) || n === CREDENTIALS);
  for (const name of names.filter((n) => !last.includes(n))) await take(name);
  for (let attempt = 1, kept = snapshots.length; ; attempt++) {
    const credentialsBefore = (await jsm.streams.info(CREDENTIALS)).state.last_seq;
    for (const name of last) await take(name);
    if (!(await retiredBetween(jsm, credentialsBefore, snapshots.at(-1)!.state.last_seq))) break;
    if (attempt >= ATTEMPTS)
      throw new CliError(
        `a generation was retired each of the ${ATTEMPTS} times the grants and credentials were taken, so no backup holds every generation its grants name; run meshctl backup again when fewer rotations run`,
      );
    snapshots.length = kept;
  }
  line.done();
  const files = collectStateFiles(o.dirs);
  // A server that requires an identity may be one whose operator is the mesh: without its files, the backup could not bring its identities back.
  if (nc.info?.auth_required && !holdsOperator(files))
    out.err(
      `meshctl backup: the server requires an identity, and ${o.dirs.operator} holds no operator's files: if the mesh is that server's operator, ` +
        "this backup cannot bring its identities back. Run it in the mesh's directory (where .mesh/nats-operator is), or name --operator-dir and --resolver-dir",
    );
  const header: Omit<BackupHeader, "keyId" | "format"> = {
    createdAt: new Date().toISOString(),
    meshVersion: o.meshVersion,
    recordVersion: RECORD_VERSION,
    streams: snapshots.map((s) => ({ name: s.config.name, messages: s.state.messages, bytes: s.data.length })),
    files: files.map((f) => f.path),
  };
  const sealed = sealBackup(o.key, header, { streams: snapshots, files, masterKey: o.masterKey.key.toString("hex") });
  mkdirSync(dirname(o.file), { recursive: true });
  const tmp = `${o.file}.${process.pid}.tmp`;
  writeFileSync(tmp, sealed, { mode: 0o600 });
  renameSync(tmp, o.file);
  if (o.json) out.out(JSON.stringify({ file: o.file, bytes: sealed.length, keyId: o.key.id, ...header }));
  else
    out.out(
      `wrote ${o.file} (${size(sealed.length)}): ${snapshots.length} streams, ` +
        `${files.length ? `the operator's and the certificate authority's keys (${files.length} files) ` : ""}and the master key, encrypted under key ${o.key.id}. ` +
        "Keep the key apart from the file: whoever holds both holds every credential of the mesh.",
    );
  return ExitCodes.Ok;
}

/** A backup opened with its key: refused when its records are newer than this meshctl reads. */
export interface OpenedBackup {
  file: string;
  header: BackupHeader;
  contents: BackupContents;
  masterKey: MasterKey;
}

/** Reads and opens backup `file` with `key`; a CliError when it cannot be read, does not open, or is newer than this meshctl reads. */
export function openBackupFile(file: string, key: MasterKey): OpenedBackup {
  let buf: Buffer;
  try {
    buf = readFileSync(file);
  } catch (e) {
    throw new CliError(`cannot read the backup ${file}: ${(e as Error).message}`, ExitCodes.Usage);
  }
  const { header, contents } = openBackup(file, buf, key);
  if (header.recordVersion > RECORD_VERSION)
    throw new CliError(
      `${file} holds records of format ${header.recordVersion}, written by meshctl ${header.meshVersion}; this meshctl reads formats up to ${RECORD_VERSION}: restore it with that release or a newer one`,
    );
  return { file, header, contents, masterKey: parseMasterKey(contents.masterKey) };
}

/**
 * Puts the backup's master key in `o.masterKeyFile` and its operator's and authority's files
 * in `o.dirs` (backup-state-files.ts), where absent; refuses, having written nothing,
 * when another master key, operator or authority is in place (`MESH_MASTER_KEY` in `env`
 * included). Returns the files written.
 */
export function putBackKeys(backup: OpenedBackup, o: { masterKeyFile: string; dirs: StateDirs }, env: NodeJS.ProcessEnv = process.env): string[] {
  const { masterKey } = backup;
  const present = env.MESH_MASTER_KEY
    ? { key: parseMasterKey(env.MESH_MASTER_KEY), where: "MESH_MASTER_KEY" }
    : existsSync(o.masterKeyFile)
      ? { key: parseMasterKey(readFileSync(o.masterKeyFile, "utf8")), where: o.masterKeyFile }
      : undefined;
  if (present && present.key.id !== masterKey.id)
    throw new CliError(
      `${present.where} holds master key ${present.key.id}, and the backup's credentials are encrypted under ${masterKey.id}: ` +
        (present.where === "MESH_MASTER_KEY"
          ? "unset MESH_MASTER_KEY (the restore writes the backup's key to a file)"
          : "move that file away (the restore writes the backup's there), or name another with MESH_MASTER_KEY_FILE"),
    );
  // Checked whole before the master key is written: a refusal leaves nothing behind.
  const written = putBackStateFiles(o.dirs, backup.contents.files);
  if (!present) {
    mkdirSync(dirname(o.masterKeyFile), { recursive: true, mode: 0o700 });
    writeFileSync(o.masterKeyFile, backup.contents.masterKey + "\n", { mode: 0o600, flag: "wx" });
    written.unshift(o.masterKeyFile);
  }
  return written;
}

/**
 * Refuses, before anything is written, a server the backup's streams cannot go onto: one that
 * holds any of them already, or a server alone for a cluster's streams (its own refusal would
 * come only after the streams before were restored).
 */
export async function checkRestoreTarget(nc: NatsConnection, backup: OpenedBackup): Promise<void> {
  const { streams } = backup.contents;
  const replicas = storeReplicas(nc.info, {});
  const wider = streams.filter((s) => (s.config.num_replicas ?? 1) > replicas);
  if (wider.length)
    throw new CliError(
      `the backup's streams were kept on a cluster (${wider[0]!.config.name} at ${wider[0]!.config.num_replicas} replicas), and this server ` +
        `${replicas === 1 ? "is not in a cluster of three" : `stores ${replicas} replicas`}: restore it onto a cluster of at least that many servers`,
    );
  const there = await meshStreams(await jetstreamManager(nc));
  const clash = streams.map((s) => s.config.name).filter((n) => there.includes(n));
  if (clash.length)
    throw new CliError(
      `the server already holds ${clash.length} of the backup's streams (${clash.slice(0, 5).join(", ")}${clash.length > 5 ? ", …" : ""}): ` +
        "restore onto a server without the mesh (a new one, or one whose store was emptied), before any service of the mesh starts on it",
    );
}

/** Restores every stream of `backup` onto the server at `nc` (checked with {@link checkRestoreTarget}), showing progress on `line`. */
export async function restoreStreams(nc: NatsConnection, backup: OpenedBackup, line: LiveLine): Promise<void> {
  const { streams } = backup.contents;
  for (const [i, s] of streams.entries())
    await restoreStream(nc, s, (bytes) => line.show(`restoring ${i + 1}/${streams.length} ${s.config.name}: ${size(bytes)}`));
  line.done();
}

/**
 * Restores backup `o.file` onto the server at `nc`, which must hold none of its streams; writes
 * its master key to `o.masterKeyFile` and its operator's and authority's files under
 * `o.dirs`. Without `nc`, the files alone: what a server run apart from
 * meshctl is configured with (`meshctl nats-config`) before the streams are restored onto it.
 */
export async function runRestore(
  nc: NatsConnection | undefined,
  o: { file: string; key: MasterKey; masterKeyFile: string; dirs: StateDirs; json?: boolean },
  out: Output,
): Promise<ExitCode> {
  const backup = openBackupFile(o.file, o.key);
  const { header, contents } = backup;
  if (nc) await checkRestoreTarget(nc, backup);
  const written = putBackKeys(backup, o);
  if (nc) await restoreStreams(nc, backup, progressLine(out, o.json));
  if (o.json)
    out.out(
      JSON.stringify({
        file: o.file,
        createdAt: header.createdAt,
        streams: nc ? header.streams : [],
        files: written,
        masterKeyFile: o.masterKeyFile,
        masterKeyId: backup.masterKey.id,
      }),
    );
  else {
    const files = written.length ? `wrote ${written.join(", ")}` : "every file of it was in place already";
    out.out(
      nc
        ? `restored ${contents.streams.length} streams of the backup of ${header.createdAt} (meshctl ${header.meshVersion}, backup format ${header.format}); ${files}. ` +
            "Start the mesh's services on this server: they verify every grant, and name and repair any that changed since."
        : `put back the keys of the backup of ${header.createdAt}: ${files}. Configure and start the server with them (meshctl nats-config), then run meshctl restore ${o.file} --key-file … against it to put its streams back.`,
    );
  }
  return ExitCodes.Ok;
}

/**
 * What `meshctl up --restore` says when the restored mesh reached its NATS server at `before`
 * (its bus provider's endpoint in the backup) and runs at `now`: the identities already
 * delivered name the old address until they are issued again. Undefined when it is the same
 * server, or there was none. Pure.
 */
export function movedServerWarning(before: string | undefined, now: string): string | undefined {
  const [was, is] = [before && firstNatsServer(before), firstNatsServer(now)];
  if (!before || (was && is && was.host === is.host && was.port === is.port)) return undefined;
  return (
    `the backup's mesh reached its NATS server at ${before}, and this one is at ${now}: every identity already delivered names ${before} ` +
    `until it is issued again, so a holder that follows its binding cannot reach this server. Stop this mesh and start it again at that address ` +
    `(NATS_URL=${before} meshctl up, or bootstrap, in this directory: the restored store is kept)`
  );
}
