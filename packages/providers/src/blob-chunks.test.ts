import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { BLOB_CHUNK_BYTES, MAX_BLOB_CHUNK_BYTES, chunkSize, chunksOf, heldAfterChunk, resumeAt, uploadedBytes } from "./blob-chunks.js";

/** A stream of `pieces`, counting how many were read and whether it was cancelled. */
function streamOf(pieces: Uint8Array[]) {
  const state = { read: 0, cancelled: false };
  let i = 0;
  const stream = new ReadableStream<Uint8Array>(
    {
      pull(c) {
        if (i === pieces.length) return c.close();
        state.read++;
        c.enqueue(pieces[i++]!);
      },
      cancel() {
        state.cancelled = true;
      },
    },
    { highWaterMark: 0 },
  );
  return { stream, state };
}

/** The chunks, copied (each is a view of a buffer the next overwrites). */
async function chunks(stream: ReadableStream<Uint8Array>, size: number): Promise<Buffer[]> {
  const out: Buffer[] = [];
  for await (const c of chunksOf(stream, size)) out.push(Buffer.from(c));
  return out;
}

describe("a blob cut into upload chunks", () => {
  it("gives chunks of the size, the last shorter, whatever the pieces it is read in", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.uint8Array({ maxLength: 50 }), { maxLength: 20 }), fc.integer({ min: 1, max: 40 }), async (pieces, size) => {
        const got = await chunks(streamOf(pieces).stream, size);
        const all = Buffer.concat(pieces);
        expect(Buffer.concat(got).equals(all)).toBe(true);
        expect(got.every((c) => c.byteLength > 0)).toBe(true);
        expect(got.slice(0, -1).every((c) => c.byteLength === size)).toBe(true);
        expect(got.length).toBe(Math.ceil(all.byteLength / size));
      }),
    );
  });

  it("reads no piece before the chunk in hand is used up", async () => {
    const { stream, state } = streamOf(Array.from({ length: 10 }, (_, i) => new Uint8Array(10).fill(i)));
    const it = chunksOf(stream, 25);
    await it.next();
    // 25 bytes: three pieces of 10.
    expect(state.read).toBe(3);
    await it.next();
    expect(state.read).toBe(5);
  });

  it("cancels the stream when its reader stops early, and passes on the stream's error", async () => {
    const { stream, state } = streamOf([new Uint8Array(10), new Uint8Array(10), new Uint8Array(10)]);
    for await (const c of chunksOf(stream, 10)) {
      expect(c.byteLength).toBe(10);
      break;
    }
    expect(state.cancelled).toBe(true);
    const broken = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(new Uint8Array(4));
        c.error(new Error("the source went away"));
      },
    });
    await expect(chunks(broken, 3)).rejects.toThrow("the source went away");
  });

  it("refuses a chunk size that is not positive", async () => {
    await expect(chunks(streamOf([]).stream, 0)).rejects.toThrow(RangeError);
  });
});

describe("where an interrupted upload goes on", () => {
  it("reads the bytes a registry holds from its Range", () => {
    expect(uploadedBytes("0-1048575")).toBe(1_048_576);
    expect(uploadedBytes("bytes=0-9")).toBe(10);
    // A registry answers 0-0 for an empty upload.
    expect(uploadedBytes("0-0")).toBe(0);
    expect(uploadedBytes(null)).toBeUndefined();
    expect(uploadedBytes("5-9")).toBeUndefined();
    expect(uploadedBytes("0-x")).toBeUndefined();
  });

  it("reads what a registry holds after a chunk it took, a one-byte blob's included", () => {
    expect(heldAfterChunk("0-2097151", 2_097_152)).toBe(2_097_152);
    expect(heldAfterChunk(null, 4096)).toBe(4096);
    expect(heldAfterChunk("0-0", 1)).toBe(1);
    // A registry that says it holds less than it was sent: the upload goes on from there.
    expect(heldAfterChunk("0-99", 200)).toBe(100);
  });

  it("goes on within the chunk in hand, and starts over when the registry holds what is not in hand any more", () => {
    // The chunk [100, 200) was being sent.
    expect(resumeAt(100, 200, 100)).toBe(100); // none of it arrived
    expect(resumeAt(100, 200, 150)).toBe(150); // half of it did
    expect(resumeAt(100, 200, 200)).toBe(200); // all of it did; the answer was lost
    expect(resumeAt(100, 200, 50)).toBeUndefined(); // the registry lost an earlier chunk
    expect(resumeAt(100, 200, 250)).toBeUndefined(); // it holds more than was sent
    expect(resumeAt(100, 200, undefined)).toBeUndefined(); // it did not say
  });

  it("takes a registry's larger minimum chunk, up to what a copy holds", () => {
    expect(chunkSize(BLOB_CHUNK_BYTES, null)).toBe(BLOB_CHUNK_BYTES);
    expect(chunkSize(BLOB_CHUNK_BYTES, "5242880")).toBe(BLOB_CHUNK_BYTES);
    expect(chunkSize(BLOB_CHUNK_BYTES, String(16 * 1024 * 1024))).toBe(16 * 1024 * 1024);
    expect(chunkSize(BLOB_CHUNK_BYTES, String(MAX_BLOB_CHUNK_BYTES + 1))).toBeUndefined();
    expect(chunkSize(BLOB_CHUNK_BYTES, "not a number")).toBe(BLOB_CHUNK_BYTES);
  });
});
