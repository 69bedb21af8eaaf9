import { describe, expect, it } from "vitest";
import { ErrorCodes, MeshError } from "@mesh/shared";
import { createHash } from "node:crypto";
import {
  artifactId,
  copyArtifacts,
  copyOrder,
  npmObjectNames,
  npmVersionOfObject,
  ociArtifactOfObject,
  ociObjectName,
  sha1Hex,
  sha256Digest,
  type CopyProgress,
} from "./artifacts.js";
import type { Artifact, ArtifactContent, ArtifactSink, ArtifactSource, BlobArtifact, OpenBlob } from "./adapter.js";
import { chunksOf } from "./blob-chunks.js";

/** `data` as a stream of pieces of `piece` bytes. */
const streamOf = (data: Uint8Array, piece = 3) =>
  new ReadableStream<Uint8Array>({
    start(c) {
      for (let at = 0; at < data.byteLength; at += piece) c.enqueue(data.subarray(at, at + piece));
      c.close();
    },
  });

/** All of a stream's bytes. */
async function readAll(stream: ReadableStream<Uint8Array>): Promise<Buffer> {
  const pieces: Uint8Array[] = [];
  for await (const p of stream) pieces.push(p);
  return Buffer.concat(pieces);
}

/** A source and a sink over maps, keyed by artifactId: the copy's logic, without a server. A blob is written once its stream ended well. */
function memory(entries: Array<[Artifact, ArtifactContent]>) {
  const items = new Map(entries.map(([a, c]) => [artifactId(a), { a, c }]));
  const writes: string[] = [];
  const source: ArtifactSource = {
    list: async () => [...items.values()].map((x) => x.a),
    read: async (a) => items.get(artifactId(a))!.c,
    openBlob: async (a) => streamOf(items.get(artifactId(a))!.c.data),
  };
  const sink: ArtifactSink & { writes: string[] } = {
    writes,
    has: async (a) => items.has(artifactId(a)),
    write: async (a, c) => {
      items.set(artifactId(a), { a, c });
      writes.push(artifactId(a));
    },
    writeBlob: async (a, open) => {
      const data = await readAll(await open());
      items.set(artifactId(a), { a, c: { data } });
      writes.push(artifactId(a));
    },
  };
  return { source, sink, items };
}

const bytes = (s: string) => Buffer.from(s);
const blob = (s: string): [Artifact, ArtifactContent] => [{ type: "blob", repository: "agent", digest: sha256Digest(bytes(s)) }, { data: bytes(s) }];
const manifest = (s: string, tag = "1.0"): [Artifact, ArtifactContent] => [
  { type: "manifest", repository: "agent", tag, digest: sha256Digest(bytes(s)) },
  { data: bytes(s) },
];
const pkg = (s: string): [Artifact, ArtifactContent] => [
  { type: "package", name: "lib", version: "1.0.0", shasum: sha1Hex(bytes(s)) },
  { data: bytes(s), manifest: { name: "@mesh/lib" } },
];

describe("copying a registry grant's artifacts", () => {
  it("takes blobs before the manifests naming them, whatever order the source lists", () => {
    const order = copyOrder([manifest("m")[0], pkg("p")[0], blob("b")[0]]).map((a) => a.type);
    expect(order).toEqual(["blob", "manifest", "package"]);
  });

  it("copies everything into an empty sink, then nothing on a second run (it resumes by skipping what is there)", async () => {
    const src = memory([blob("layer"), blob("config"), manifest("m"), pkg("tgz")]);
    const dst = memory([]);
    expect(await copyArtifacts(src.source, dst.sink)).toMatchObject({ total: 4, copied: 4, present: 0, bytes: 5 + 6 + 1 + 3 });
    expect(dst.sink.writes.slice(0, 2).every((w) => w.startsWith("blob"))).toBe(true);
    expect(await copyArtifacts(src.source, dst.sink)).toMatchObject({ total: 4, copied: 0, present: 4, bytes: 0 });
  });

  it("after a run stopped in the middle, the next copies only what the first had not", async () => {
    const src = memory([blob("layer"), blob("config"), manifest("m")]);
    const dst = memory([]);
    const crash = new Error("killed");
    await expect(
      copyArtifacts(src.source, dst.sink, {
        onCopied: (_a, done) => {
          if (done.copied === 1) throw crash;
        },
      }),
    ).rejects.toBe(crash);
    expect(dst.sink.writes).toHaveLength(1);
    expect(await copyArtifacts(src.source, dst.sink)).toMatchObject({ total: 3, copied: 2, present: 1 });
    expect(new Set(dst.sink.writes).size).toBe(3);
  });

  it("refuses content that is not what its source lists, and writes nothing of it", async () => {
    const [a] = blob("layer");
    const src = memory([[a, { data: bytes("tampered") }]]);
    const dst = memory([]);
    const e = await copyArtifacts(src.source, dst.sink).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(MeshError);
    expect((e as MeshError).code).toBe(ErrorCodes.Conflict);
    expect(dst.sink.writes).toEqual([]);
  });
});

/**
 * A blob of `size` bytes made as it is read, in pieces of 64 KiB, counting what was read; its
 * digest is known before (the bytes are a function of their offset).
 */
function madeBlob(size: number) {
  const PIECE = 64 * 1024;
  const pieceAt = (at: number) => {
    const p = Buffer.alloc(Math.min(PIECE, size - at), (at / PIECE) % 251);
    p.writeUInt32BE(at >>> 0, 0);
    return p;
  };
  const hash = createHash("sha256");
  for (let at = 0; at < size; at += PIECE) hash.update(pieceAt(at));
  const blob: BlobArtifact = { type: "blob", repository: "agent", digest: `sha256:${hash.digest("hex")}` };
  const counts = { read: 0, opened: 0 };
  const source: ArtifactSource = {
    list: async () => [blob],
    read: async () => {
      throw new Error("a blob is never read whole");
    },
    openBlob: async () => {
      counts.opened++;
      let at = 0;
      return new ReadableStream<Uint8Array>(
        {
          pull(c) {
            if (at >= size) return c.close();
            const p = pieceAt(at);
            at += p.byteLength;
            counts.read += p.byteLength;
            c.enqueue(p);
          },
        },
        { highWaterMark: 0 },
      );
    },
  };
  return { blob, source, counts };
}

/** A sink that takes blobs in chunks of `chunk` bytes, as a registry's upload does, with `send` between them; nothing is kept. */
function chunkedSink(chunk: number, send: (piece: Uint8Array) => Promise<void>): ArtifactSink & { committed: string[] } {
  const committed: string[] = [];
  return {
    committed,
    has: async () => false,
    write: async () => {},
    writeBlob: async (a: BlobArtifact, open: OpenBlob) => {
      for await (const piece of chunksOf(await open(), chunk)) await send(piece);
      committed.push(a.digest);
    },
  };
}

describe("copying a blob", () => {
  const MiB = 1024 * 1024;

  it("streams it: the copy reads no further ahead of the sink than the sink's chunk", async () => {
    const { blob, source, counts } = madeBlob(24 * MiB + 5);
    let sent = 0;
    let ahead = 0;
    const sink = chunkedSink(MiB, async (piece) => {
      ahead = Math.max(ahead, counts.read - sent);
      await new Promise((r) => setImmediate(r));
      sent += piece.byteLength;
    });
    expect(await copyArtifacts(source, sink)).toEqual({ total: 1, copied: 1, present: 0, bytes: 24 * MiB + 5 });
    expect(sink.committed).toEqual([blob.digest]);
    expect(sent).toBe(24 * MiB + 5);
    // Read ahead of what the sink sent: its chunk, and a piece or two in the stream between them.
    expect(ahead).toBeLessThanOrEqual(MiB + 2 * 64 * 1024);
  });

  it("refuses a blob that is not what its source lists at its end, before the sink commits it", async () => {
    const { source } = madeBlob(3 * MiB);
    const listed: BlobArtifact = { type: "blob", repository: "agent", digest: sha256Digest(bytes("another")) };
    const sink = chunkedSink(MiB, async () => {});
    const e = await copyArtifacts({ ...source, list: async () => [listed] }, sink).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(MeshError);
    expect((e as MeshError).code).toBe(ErrorCodes.Conflict);
    expect((e as MeshError).message).toContain(listed.digest);
    expect(sink.committed).toEqual([]);
  });

  it("reads it again from its first byte for a sink that starts over", async () => {
    const { blob, source, counts } = madeBlob(2 * MiB + 7);
    const got: Buffer[] = [];
    const sink: ArtifactSink = {
      has: async () => false,
      write: async () => {},
      writeBlob: async (_a, open) => {
        // The first upload is lost after a chunk: started over with a fresh read.
        for await (const piece of chunksOf(await open(), MiB)) {
          got.push(Buffer.from(piece));
          break;
        }
        got.length = 0;
        for await (const piece of chunksOf(await open(), MiB)) got.push(Buffer.from(piece));
      },
    };
    expect(await copyArtifacts(source, sink)).toMatchObject({ copied: 1, bytes: 2 * MiB + 7 });
    expect(counts.opened).toBe(2);
    expect(sha256Digest(Buffer.concat(got))).toBe(blob.digest);
  });

  it("says where it stands: bytes as a blob's pieces pass, and each artifact copied or found there", async () => {
    const { blob, source } = madeBlob(MiB);
    const src = memory([manifest("m"), pkg("p")]);
    const seen: CopyProgress[] = [];
    const all: ArtifactSource = {
      list: async () => [blob, ...(await src.source.list())],
      read: (a) => src.source.read(a),
      openBlob: (a) => source.openBlob(a),
    };
    const sink = { ...memory([pkg("p")]).sink, writeBlob: chunkedSink(256 * 1024, async () => {}).writeBlob };
    const out = await copyArtifacts(all, sink, { onProgress: (p) => void seen.push(p) });
    expect(out).toEqual({ total: 3, copied: 2, present: 1, bytes: MiB + 1 });
    const underWay = seen.filter((p) => p.artifact === artifactId(blob));
    expect(underWay.length).toBe(16);
    expect(underWay.map((p) => p.bytes)).toEqual(underWay.map((_, i) => (i + 1) * 64 * 1024));
    expect(seen.filter((p) => !p.artifact).map((p) => [p.copied, p.present])).toEqual([
      [1, 0],
      [2, 0],
      [2, 1],
    ]);
    expect(seen.at(-1)).toEqual({ ...out });
  });
});

describe("the bootstrap registry's object names", () => {
  it("round-trip an image's blob and manifest, repositories with slashes included", () => {
    const b = { type: "blob" as const, repository: "tools/agent", digest: sha256Digest(bytes("x")) };
    expect(ociArtifactOfObject(ociObjectName(b), "")).toEqual(b);
    const m = { type: "manifest" as const, repository: "tools/agent", tag: "v1.2", digest: "sha256:ab" };
    expect(ociArtifactOfObject(ociObjectName(m), m.digest)).toEqual(m);
  });

  it("ignore names outside the layout (a blob not named by a sha256 digest, a tag with a slash)", () => {
    expect(ociArtifactOfObject("agent/blobs/md5:abc", "")).toBeUndefined();
    expect(ociArtifactOfObject("agent/things/x", "")).toBeUndefined();
    expect(ociArtifactOfObject("manifests/1.0", "")).toBeUndefined();
  });

  it("find a package version by its tarball, and name its manifest beside it", () => {
    const n = npmObjectNames("lib", "1.0.0");
    expect(n).toEqual({ tarball: "lib/1.0.0.tgz", manifest: "lib/1.0.0.json" });
    expect(npmVersionOfObject(n.tarball)).toEqual({ name: "lib", version: "1.0.0" });
    expect(npmVersionOfObject(n.manifest)).toBeUndefined();
  });
});
