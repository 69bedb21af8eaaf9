import { describe, expect, it } from "vitest";
import { ErrorCodes, MeshError } from "@mesh/shared";
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
} from "./artifacts.js";
import type { Artifact, ArtifactContent, ArtifactSink, ArtifactSource } from "./adapter.js";

/** A source and a sink over maps, keyed by artifactId: the copy's logic, without a server. */
function memory(entries: Array<[Artifact, ArtifactContent]>) {
  const items = new Map(entries.map(([a, c]) => [artifactId(a), { a, c }]));
  const writes: string[] = [];
  const source: ArtifactSource = { list: async () => [...items.values()].map((x) => x.a), read: async (a) => items.get(artifactId(a))!.c };
  const sink: ArtifactSink & { writes: string[] } = {
    writes,
    has: async (a) => items.has(artifactId(a)),
    write: async (a, c) => {
      items.set(artifactId(a), { a, c });
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
