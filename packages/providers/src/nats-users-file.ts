/**
 * The users file of a NATS server and the records it is rendered from, on the server's host.
 *
 * Each user has a record file of its own in `<usersFile>.d/`; the users file is rendered from
 * the whole directory. Several provisioners may write at once without a lock and without
 * losing a user: each writes its record (temp file + rename), then renders the directory into
 * the users file (temp file + rename) and lists the directory again, rendering anew until the
 * listing it rendered equals the listing after its rename. Whoever renames last has therefore
 * rendered a listing at least as new as every record written before, so once writers stop, the
 * file holds every record. The file's header names the revision (a hash of the records), which
 * is how a renderer tells whether the file is current, and how the server is asked whether it
 * has loaded it (see nats-user.ts).
 *
 * No network here: {@link initNatsUsersFile} uses it to write the first file before the server
 * starts (its config includes the file, so it must exist).
 */
import { randomBytes } from "node:crypto";
import { mkdir, open, readFile, readdir, rename, unlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import bcrypt from "bcryptjs";
import { ErrorCodes, MeshError, errorMessage } from "@mesh/shared";
import {
  ADMIN_RECORD_FILE,
  RECORD_MARKER,
  checkAdminName,
  isRenderedUsersFile,
  parseUserRecord,
  recordFileName,
  renderUsersFile,
  renderedRevision,
  revisionOf,
  type UserRecord,
} from "./nats-user-config.js";

/**
 * bcrypt cost of the admin's password: the operator picks it, so it may be weak, and the server's
 * default tool (`nats server passwd`) uses 11. nats-server 2.9.10 takes ~100 ms per check at 11.
 */
export const ADMIN_BCRYPT_COST = 11;

/** How often a renderer lists, renders and lists again before giving up on writers that never stop. */
const MAX_RENDER_ROUNDS = 20;

type FsError = Error & { code?: string };

/** The admin user every users file must hold, with its password in the clear (only in memory). */
export interface NatsAdmin {
  username: string;
  password: string;
}

/** The outcome of {@link NatsUsersFile.render}. */
export interface Rendered {
  /** Revision of the records the users file now holds. */
  revision: string;
  /** Whether this call wrote the users file (so the server should reload it). */
  written: boolean;
}

export class NatsUsersFile {
  /** Directory of the record files: `<usersFile>.d`. */
  readonly recordsDir: string;
  /** The admin hash last seen to match the admin's password, so it is not checked (~100 ms) again. */
  private verifiedAdminHash: string | undefined;

  constructor(
    readonly usersFile: string,
    private readonly admin: NatsAdmin,
  ) {
    this.recordsDir = `${usersFile}.d`;
  }

  /** The record of `user`, or undefined when it has none. */
  async readRecord(user: string): Promise<UserRecord | undefined> {
    return this.readRecordFile(recordFileName(user));
  }

  /** Writes (replaces) the record of `record.user`, atomically. */
  async writeRecord(record: UserRecord): Promise<void> {
    await this.fs("write the record of a NATS user", async () => {
      // Not recursive: the users file's directory is the operator's to make (and to own).
      await mkdir(this.recordsDir, { mode: 0o750 }).catch((e: FsError) => {
        if (e.code !== "EEXIST") throw e;
      });
      await writeAtomically(join(this.recordsDir, record.grant === undefined ? ADMIN_RECORD_FILE : recordFileName(record.user)), `${JSON.stringify(record, null, 2)}\n`);
    });
  }

  /** Removes the record of `user`; a missing one is fine. */
  async removeRecord(user: string): Promise<void> {
    await this.fs("remove the record of a NATS user", async () => {
      await unlink(join(this.recordsDir, recordFileName(user))).catch((e: FsError) => {
        if (e.code !== "ENOENT") throw e;
      });
    });
  }

  /**
   * Makes sure the admin's record holds the admin's name and a hash of its password, rewriting
   * it otherwise: the provider document is the authority on the admin, and every rendered file
   * holds the admin, so the mesh cannot lock itself out of its own server.
   */
  async ensureAdmin(): Promise<void> {
    const cur = await this.readRecordFile(ADMIN_RECORD_FILE);
    if (cur && cur.user === this.admin.username) {
      if (cur.passwordHash === this.verifiedAdminHash) return;
      if (await bcrypt.compare(this.admin.password, cur.passwordHash)) {
        this.verifiedAdminHash = cur.passwordHash;
        return;
      }
    }
    const passwordHash = await bcrypt.hash(this.admin.password, ADMIN_BCRYPT_COST);
    await this.writeRecord({ mesh: RECORD_MARKER, user: this.admin.username, passwordHash });
    this.verifiedAdminHash = passwordHash;
  }

  /** Every record in the directory, checked; a file that vanishes while listed is gone and left out. */
  async readRecords(): Promise<UserRecord[]> {
    const names = await this.fs("list the records of NATS users", () =>
      readdir(this.recordsDir).catch((e: FsError) => {
        if (e.code === "ENOENT") return [] as string[];
        throw e;
      }),
    );
    const records: UserRecord[] = [];
    for (const name of names.sort()) {
      // Temp files start with "."; anything else not a record is not ours to read.
      if (name.startsWith(".") || !name.endsWith(".json")) continue;
      const r = await this.readRecordFile(name);
      if (r) records.push(r);
    }
    return records;
  }

  /** The users file as it is on disk, or undefined when there is none. */
  async readUsersFile(): Promise<string | undefined> {
    return this.fs("read the NATS users file", () =>
      readFile(this.usersFile, "utf8").catch((e: FsError) => {
        if (e.code === "ENOENT") return undefined;
        throw e;
      }),
    );
  }

  /**
   * Renders the records into the users file until the file holds what the directory holds
   * after the rename (see the file comment). Throws MeshError `Conflict` when the users file
   * exists and was not written by the mesh: it is never overwritten.
   */
  async render(): Promise<Rendered> {
    let written = false;
    for (let round = 0; round < MAX_RENDER_ROUNDS; round++) {
      const records = await this.readRecords();
      const revision = revisionOf(records);
      const current = await this.readUsersFile();
      if (current !== undefined && !isRenderedUsersFile(current)) {
        throw new MeshError(
          ErrorCodes.Conflict,
          `the NATS users file ${this.usersFile} exists and was not written by the mesh; move it away, or point the provider's options.usersFile at a file of the mesh's own`,
        );
      }
      if (current === undefined || renderedRevision(current) !== revision) {
        const text = renderUsersFile(records, this.recordsDir);
        await this.fs("write the NATS users file", () => writeAtomically(this.usersFile, text));
        written = true;
      }
      if (revisionOf(await this.readRecords()) === revision) return { revision, written };
    }
    throw new MeshError(
      ErrorCodes.ProviderRejected,
      `the records in ${this.recordsDir} kept changing while ${this.usersFile} was rendered ${MAX_RENDER_ROUNDS} times; try again`,
      { retryable: true },
    );
  }

  private async readRecordFile(name: string): Promise<UserRecord | undefined> {
    const path = join(this.recordsDir, name);
    const text = await this.fs("read the record of a NATS user", () =>
      readFile(path, "utf8").catch((e: FsError) => {
        if (e.code === "ENOENT") return undefined;
        throw e;
      }),
    );
    if (text === undefined) return undefined;
    let record: UserRecord;
    try {
      record = parseUserRecord(text);
    } catch (e) {
      throw this.badRecord(path, errorMessage(e));
    }
    // The admin's record is the only one without a grant; every other is named after its user.
    const isAdminFile = name === ADMIN_RECORD_FILE;
    if (isAdminFile !== (record.grant === undefined) || (!isAdminFile && name !== recordFileName(record.user))) {
      throw this.badRecord(path, "its name does not match its user");
    }
    return record;
  }

  private badRecord(path: string, why: string): MeshError {
    return new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `the NATS user record ${path} is refused (${why}); the mesh writes only what it can read back, so remove that file or restore it`,
    );
  }

  /** Runs a file operation; maps a failure other than a MeshError to `ProviderMisconfigured` naming the path. */
  private async fs<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (e) {
      if (e instanceof MeshError) throw e;
      const code = (e as FsError).code;
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `cannot ${what} at ${this.usersFile} (${code ?? errorMessage(e)}); the provisioner must run on the NATS server's host, and the directory of options.usersFile must be writable by it`,
        { cause: e, retryable: code === "EMFILE" || code === "ENFILE" || code === "EAGAIN" },
      );
    }
  }
}

/** Writes `text` to `path` through a synced temp file beside it and a rename, so a reader sees the old file or the new one. */
async function writeAtomically(path: string, text: string): Promise<void> {
  const tmp = join(dirname(path), `.${basename(path)}.${randomBytes(6).toString("hex")}.tmp`);
  const fh = await open(tmp, "wx", 0o640);
  try {
    await fh.writeFile(text);
    await fh.sync();
  } finally {
    await fh.close();
  }
  try {
    await rename(tmp, path);
  } catch (e) {
    await unlink(tmp).catch(() => {});
    throw e;
  }
}

/**
 * Writes the users file at `usersFile` with the admin (and whatever records are there already),
 * without a server: for bootstrap, before nats-server starts with a config that includes it.
 * Returns the revision written. The directory of `usersFile` must exist.
 */
export async function initNatsUsersFile(usersFile: string, admin: NatsAdmin): Promise<string> {
  checkAdminName(admin.username, `the NATS users file ${usersFile}`);
  const file = new NatsUsersFile(usersFile, admin);
  await file.ensureAdmin();
  return (await file.render()).revision;
}
