/**
 * A blob cut into the chunks of a registry's chunked upload, and where an upload interrupted
 * in the middle goes on (the OCI distribution spec, "Pushing a blob in chunks": POST opens an
 * upload, each PATCH sends the next chunk with its `Content-Range`, PUT with the digest closes
 * it; after a failure, GET on the upload's URL answers `Range: 0-<last byte held>`). The
 * upload itself is in registry-artifacts.ts; this is its arithmetic. Pure.
 */

/** The chunk a copy sends to a registry unless the registry asks for larger: what it holds of a blob at a time. */
export const BLOB_CHUNK_BYTES = 8 * 1024 * 1024;
/** The largest chunk a copy agrees to hold, whatever a registry asks for. */
export const MAX_BLOB_CHUNK_BYTES = 64 * 1024 * 1024;

/** The first buffer {@link chunksOf} takes, grown up to the chunk size: a small blob never takes a whole chunk's memory. */
const FIRST_BUFFER_BYTES = 64 * 1024;

/**
 * Reads `stream` as chunks of `size` bytes, the last one shorter (none is empty; an empty
 * stream gives none). Each chunk is a view of one buffer of at most `size` bytes that the next
 * overwrites: use it up before asking for the next. Stopping early cancels the stream.
 */
export async function* chunksOf(stream: ReadableStream<Uint8Array>, size: number): AsyncGenerator<Uint8Array, void, undefined> {
  if (!(size > 0)) throw new RangeError(`a chunk size must be positive, not ${size}`);
  const reader = stream.getReader();
  let buffer = new Uint8Array(Math.min(size, FIRST_BUFFER_BYTES));
  let filled = 0;
  let ended = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      for (let at = 0; at < value.byteLength;) {
        const take = Math.min(size - filled, value.byteLength - at);
        if (filled + take > buffer.byteLength) {
          const grown = new Uint8Array(Math.min(size, Math.max(filled + take, buffer.byteLength * 2)));
          grown.set(buffer.subarray(0, filled));
          buffer = grown;
        }
        buffer.set(value.subarray(at, at + take), filled);
        filled += take;
        at += take;
        if (filled === size) {
          filled = 0;
          yield buffer.subarray(0, size);
        }
      }
    }
    ended = true;
    if (filled > 0) yield buffer.subarray(0, filled);
  } finally {
    if (ended) reader.releaseLock();
    else await reader.cancel().catch(() => undefined);
  }
}

/**
 * How many bytes an upload holds by the `Range` a registry answers about it (`0-<last byte>`,
 * inclusive); undefined without one. A registry answers `0-0` for an empty upload too, so
 * `0-0` is read as empty. Pure.
 */
export function uploadedBytes(range: string | null): number | undefined {
  const m = /^(?:bytes=)?0-(\d+)$/.exec(range?.trim() ?? "");
  if (!m) return undefined;
  const last = Number(m[1]);
  return last === 0 ? 0 : last + 1;
}

/**
 * How many bytes an upload holds by the `Range` a registry answered a chunk ending at byte
 * `end` with: `end` when it says none; `0-0` is one byte when one is all there was to take. Pure.
 */
export function heldAfterChunk(range: string | null, end: number): number {
  const held = uploadedBytes(range);
  if (held === undefined) return end;
  return held === 0 && end === 1 ? 1 : held;
}

/**
 * Where an upload goes on in the chunk of bytes `[start, end)` when the registry holds `held`
 * bytes: from `held` when that is within the chunk (whatever of it arrived stays); undefined
 * when it is not, or unknown: the registry lost what it had taken, or took more than was sent,
 * and the upload must start over. Pure.
 */
export function resumeAt(start: number, end: number, held: number | undefined): number | undefined {
  return held !== undefined && held >= start && held <= end ? held : undefined;
}

/**
 * The chunk size of an upload: `ours`, or the minimum a registry asks for in its
 * `OCI-Chunk-Min-Length` when that is larger; undefined when that is above
 * {@link MAX_BLOB_CHUNK_BYTES}. Pure.
 */
export function chunkSize(ours: number, registryMin: string | null): number | undefined {
  const min = Number(registryMin ?? "");
  if (!Number.isSafeInteger(min) || min <= ours) return ours;
  return min <= MAX_BLOB_CHUNK_BYTES ? min : undefined;
}
