/** How a KV bucket's keys appear on the streams and subjects under it. */

/** The key of a KV change message: the part of the subject after `$KV.<bucket>.`. */
export function kvKeyOf(bucket: string): (subject: string) => string | undefined {
  const prefix = `$KV.${bucket}.`;
  return (subject) => (subject.startsWith(prefix) ? subject.slice(prefix.length) : undefined);
}

/** The JetStream stream that backs a KV bucket. */
export function kvStream(bucket: string): string {
  return `KV_${bucket}`;
}

/** The subject filter of every key of a KV bucket, or of the keys matching `keyFilter`. */
export function kvFilter(bucket: string, keyFilter = ">"): string {
  return `$KV.${bucket}.${keyFilter}`;
}
