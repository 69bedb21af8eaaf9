/**
 * Which format of the mesh's stored records wrote a record. Every JSON record a program of the
 * mesh writes into a bucket carries {@link RECORD_VERSION_FIELD}: the format it was written in.
 * A reader takes every format up to its own {@link RECORD_VERSION} (a record without the field
 * was written before formats were recorded, and is format 1) and refuses, naming the record, one
 * written in a newer format, rather than misread it: during a rolling upgrade an older instance
 * leaves such a record to the upgraded ones (the refusal is retryable), and an older release
 * rolled back to says what it met. The skew policy built on this is in docs/upgrades.md.
 *
 * The format changes only when a record's meaning changes so that an older reader would take
 * it wrongly (a field renamed, a value read otherwise); a field added as optional does not
 * change it, since readers ignore what they do not know.
 */
import { ErrorCodes, MeshError } from "./errors.js";

/** The newest record format this build reads, and the one it writes. */
export const RECORD_VERSION = 1;

/** The field of a record's JSON that names its format. */
export const RECORD_VERSION_FIELD = "recordVersion";

/** What a reader throws for a record written in a format newer than it knows: retryable, nothing of it was read. */
export class RecordTooNewError extends MeshError {
  constructor(
    /** The record: `<bucket>/<key>`. */
    readonly record: string,
    /** The format it was written in. */
    readonly version: number,
  ) {
    super(
      ErrorCodes.RecordTooNew,
      `record ${record} was written by a newer release of the mesh (record format ${version}; this program reads formats up to ` +
        `${RECORD_VERSION}): it was neither read nor changed. Upgrade this program to the release the other services run ` +
        `(docs/upgrades.md); what depends on the record waits until then`,
      { retryable: true },
    );
  }
}

/** The format `raw` (a record's parsed JSON) was written in: 1 for a record from before formats were recorded, or one that is not an object. */
export function recordVersionOf(raw: unknown): number {
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) return 1;
  const v = (raw as Record<string, unknown>)[RECORD_VERSION_FIELD];
  return typeof v === "number" && Number.isInteger(v) && v >= 1 ? v : 1;
}

/**
 * `raw` (a record's parsed JSON, read from `record`: `<bucket>/<key>`) without its format, once
 * that is one this build reads (a record is then what its schema says, whichever format of
 * those wrote it); throws {@link RecordTooNewError} otherwise.
 */
export function readableRecord(raw: unknown, record: string): unknown {
  const version = recordVersionOf(raw);
  if (version > RECORD_VERSION) throw new RecordTooNewError(record, version);
  if (raw === null || typeof raw !== "object" || Array.isArray(raw) || !(RECORD_VERSION_FIELD in raw)) return raw;
  const { [RECORD_VERSION_FIELD]: _format, ...rest } = raw as Record<string, unknown>;
  return rest;
}

/** The JSON to store for `value`: an object carries the format this build writes. */
export function recordJson(value: unknown): string {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return JSON.stringify(value);
  return JSON.stringify({ ...value, [RECORD_VERSION_FIELD]: RECORD_VERSION });
}
