/**
 * The file `meshctl backup` writes and `meshctl restore` reads. Pure: bytes in, bytes out.
 *
 *     MESH-BACKUP 1\n
 *     {"format":1,"createdAt":…,"meshVersion":…,"recordVersion":…,"keyId":…,"streams":[…]}\n
 *     <12-byte IV><16-byte GCM tag><AES-256-GCM ciphertext>
 *
 * The two first lines say what the file is without its key (when, which release, which
 * streams and files, how large: nothing secret); the rest is every stream's snapshot, the
 * operator's and the authority's files (backup-state-files.ts) and the master key, encrypted under the backup's key, with those lines as associated data, so that a header
 * changed or a file cut short does not open.
 */
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import { GCM_IV_BYTES, GCM_TAG_BYTES, type MasterKey } from "@mesh/shared";
import type { StreamSnapshot } from "@mesh/shared/runtime";
import type { StateFile } from "./backup-state-files.js";
import { CliError } from "./cli-error.js";

const MAGIC = "MESH-BACKUP";
/** The layout of the file this build writes, and the newest it reads. */
export const BACKUP_FORMAT = 1;

/** What a backup says of itself, readable without its key. */
export interface BackupHeader {
  format: number;
  createdAt: string;
  /** The release of meshctl that wrote it. */
  meshVersion: string;
  /** The newest record format (record-version.ts) of the release that wrote it. */
  recordVersion: number;
  /** The id of the key it is encrypted under (a hash prefix, not the key). */
  keyId: string;
  /** Each stream, in the order its snapshot was taken. */
  streams: Array<{ name: string; messages: number; bytes: number }>;
  /** The files of the state directory it holds (backup-state-files.ts), by their paths under it; absent in a backup of a mesh without them. */
  files?: string[];
}

/** What a backup holds under its key. */
export interface BackupContents {
  streams: StreamSnapshot[];
  /** The master key the credentials are encrypted under, hex. */
  masterKey: string;
  /** The operator's and the authority's files (backup-state-files.ts). */
  files: StateFile[];
}

/** The file for `contents`, encrypted under `key`. */
export function sealBackup(key: MasterKey, header: Omit<BackupHeader, "keyId" | "format">, contents: BackupContents): Buffer {
  const head = `${MAGIC} ${BACKUP_FORMAT}\n${JSON.stringify({ format: BACKUP_FORMAT, ...header, keyId: key.id })}\n`;
  const plain = Buffer.from(
    JSON.stringify({
      masterKey: contents.masterKey,
      files: contents.files.map((f) => ({ path: f.path, data: f.data.toString("base64") })),
      streams: contents.streams.map((s) => ({ config: s.config, state: s.state, data: Buffer.from(s.data).toString("base64") })),
    }),
  );
  const iv = randomBytes(GCM_IV_BYTES);
  const c = createCipheriv("aes-256-gcm", key.key, iv, { authTagLength: GCM_TAG_BYTES });
  c.setAAD(Buffer.from(head));
  const body = Buffer.concat([c.update(plain), c.final()]);
  return Buffer.concat([Buffer.from(head), iv, c.getAuthTag(), body]);
}

/** The header of backup `file` (its bytes `buf`), and where its encrypted part starts. */
export function readBackupHeader(file: string, buf: Buffer): { header: BackupHeader; bodyAt: number } {
  const first = buf.indexOf(0x0a);
  const second = first < 0 ? -1 : buf.indexOf(0x0a, first + 1);
  const magic = first < 0 ? "" : buf.subarray(0, first).toString("utf8");
  if (second < 0 || !magic.startsWith(`${MAGIC} `)) throw new CliError(`${file} is not a backup of the mesh (it does not begin with "${MAGIC}")`);
  const format = Number(magic.slice(MAGIC.length + 1));
  if (!Number.isInteger(format) || format > BACKUP_FORMAT)
    throw new CliError(
      `${file} was written by a newer meshctl (backup format ${magic.slice(MAGIC.length + 1)}; this one reads up to ${BACKUP_FORMAT}): restore it with that release`,
    );
  let header: BackupHeader;
  try {
    header = JSON.parse(buf.subarray(first + 1, second).toString("utf8")) as BackupHeader;
  } catch {
    throw new CliError(`${file}'s header is not readable: the file was changed or is not a backup of the mesh`);
  }
  return { header, bodyAt: second + 1 };
}

/** The contents of backup `file` (its bytes `buf`), opened with `key`. */
export function openBackup(file: string, buf: Buffer, key: MasterKey): { header: BackupHeader; contents: BackupContents } {
  const { header, bodyAt } = readBackupHeader(file, buf);
  if (header.keyId !== key.id)
    throw new CliError(`${file} is encrypted under key ${header.keyId}, and the key given is ${key.id}: give the key file the backup was made with`);
  const iv = buf.subarray(bodyAt, bodyAt + GCM_IV_BYTES);
  const tag = buf.subarray(bodyAt + GCM_IV_BYTES, bodyAt + GCM_IV_BYTES + GCM_TAG_BYTES);
  let plain: Buffer;
  try {
    const d = createDecipheriv("aes-256-gcm", key.key, iv, { authTagLength: GCM_TAG_BYTES });
    d.setAAD(buf.subarray(0, bodyAt));
    d.setAuthTag(tag);
    plain = Buffer.concat([d.update(buf.subarray(bodyAt + GCM_IV_BYTES + GCM_TAG_BYTES)), d.final()]);
  } catch {
    throw new CliError(`${file} does not open under its key: it was changed or cut short since it was written; use another copy`);
  }
  const raw = JSON.parse(plain.toString("utf8")) as {
    masterKey: string;
    files?: Array<{ path: string; data: string }>;
    streams: Array<Omit<StreamSnapshot, "data"> & { data: string }>;
  };
  return {
    header,
    contents: {
      masterKey: raw.masterKey,
      files: (raw.files ?? []).map((f) => ({ path: f.path, data: Buffer.from(f.data, "base64") })),
      streams: raw.streams.map((s) => ({ config: s.config, state: s.state, data: Buffer.from(s.data, "base64") })),
    },
  };
}
