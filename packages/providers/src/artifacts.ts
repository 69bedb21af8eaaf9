/**
 * What a registry grant stores, and its copy from one provider to another when the grant is
 * handed over (docs/control-plane.md, "Images and packages"): the images
 * of an `oci.registry` grant (blobs, then the manifests naming them) and the package versions
 * of an `npm.registry` grant. A credential moves by the k+1 fan-out; what was stored under it
 * moves by {@link copyArtifacts}, before any holder is told of k+1.
 *
 * The copy resumes after a crash by being idempotent: each artifact already at the
 * destination, with the same digest, is skipped, so a second run copies only what the first
 * did not. Nothing is deleted at the source (the old resource is kept with its data).
 *
 * A blob goes from source to sink as a stream, hashed as it passes, so the copy holds a
 * bounded part of it at a time whatever its size (the sink decides how much: a registry's
 * chunk); manifests and package versions are small, and go whole.
 *
 * Names are relative to the grant's namespace: repository `agent` of an `oci.registry` grant of
 * module `mesh` is `mesh/agent` on a registry; package `lib` of an `npm.registry` grant is
 * `@mesh/lib`. The bootstrap registry's object store names them so (see
 * {@link ociObjectName} and {@link npmObjectNames}).
 */
import { createHash } from "node:crypto";
import { ErrorCodes, MeshError } from "@mesh/shared";
import type { Artifact, ArtifactContent, ArtifactSink, ArtifactSource, BlobArtifact } from "./adapter.js";

/** What one run of {@link copyArtifacts} did. */
export interface CopyOutcome {
  /** Artifacts at the source. */
  total: number;
  /** Copied by this run. */
  copied: number;
  /** Already at the destination (a run before this one copied them, or they were put there). */
  present: number;
  /** Bytes this run copied. */
  bytes: number;
}

/** Artifacts in the order a copy takes them: blobs before the manifests that name them; packages after. Pure. */
export function copyOrder(artifacts: readonly Artifact[]): Artifact[] {
  const rank = { blob: 0, manifest: 1, package: 2 } as const;
  return [...artifacts].sort((a, b) => rank[a.type] - rank[b.type] || artifactId(a).localeCompare(artifactId(b)));
}

/** How an artifact is named in messages and logs: `blob agent@sha256:…`, `manifest agent:1.0`, `package lib@1.0.0`. Pure. */
export function artifactId(a: Artifact): string {
  switch (a.type) {
    case "blob":
      return `blob ${a.repository}@${a.digest}`;
    case "manifest":
      return `manifest ${a.repository}:${a.tag}`;
    case "package":
      return `package ${a.name}@${a.version}`;
  }
}

/** Where a copy stands: {@link CopyOutcome} so far, its `bytes` counting those of the blob under way. */
export interface CopyProgress extends CopyOutcome {
  /** The artifact being copied ({@link artifactId}), while one is. */
  artifact?: string;
}

/** What a copy tells its caller as it goes; each awaited before the copy goes on. */
export interface CopyHooks {
  /** After each artifact written (a test hook may freeze the process there). */
  onCopied?: (a: Artifact, done: CopyOutcome) => Promise<void> | void;
  /** After each artifact copied or found there, and after each piece of a blob read: often, so the caller throttles what it does with it. */
  onProgress?: (p: CopyProgress) => Promise<void> | void;
}

/**
 * Copies every artifact of `source` that `sink` lacks, in {@link copyOrder}. Each read is
 * checked against the digest the source listed, so a corrupt source is refused, not copied.
 */
export async function copyArtifacts(source: ArtifactSource, sink: ArtifactSink, hooks: CopyHooks = {}): Promise<CopyOutcome> {
  const all = copyOrder(await source.list());
  const out: CopyOutcome = { total: all.length, copied: 0, present: 0, bytes: 0 };
  const progress = (under?: { a: Artifact; bytes: number }) =>
    hooks.onProgress?.({ ...out, ...(under ? { bytes: out.bytes + under.bytes, artifact: artifactId(under.a) } : {}) });
  for (const a of all) {
    if (await sink.has(a)) {
      out.present++;
      await progress();
      continue;
    }
    if (a.type === "blob") {
      out.bytes += await copyBlob(source, sink, a, (bytes) => progress({ a, bytes }));
    } else {
      const content = await source.read(a);
      checkDigest(a, content);
      await sink.write(a, content);
      out.bytes += content.data.byteLength;
    }
    out.copied++;
    await progress();
    await hooks.onCopied?.(a, { ...out });
  }
  return out;
}

/** Streams blob `a` from `source` into `sink`, through {@link digestChecked}; the bytes of the read the sink completed. */
async function copyBlob(source: ArtifactSource, sink: ArtifactSink, a: BlobArtifact, onBytes: (n: number) => Promise<void> | void): Promise<number> {
  let bytes = 0;
  await sink.writeBlob(a, async () =>
    (await source.openBlob(a)).pipeThrough(
      digestChecked(a, (n) => {
        bytes = n;
        return onBytes(n);
      }),
    ),
  );
  return bytes;
}

/**
 * Passes blob `a`'s bytes on as they come, hashing them, and errors the stream at its end with
 * {@link digestConflict} when they are not the blob's, so no sink commits them. `onBytes` gets
 * the count so far after each piece, and is awaited before the piece goes on.
 */
export function digestChecked(a: BlobArtifact, onBytes: (n: number) => Promise<void> | void = () => {}): TransformStream<Uint8Array, Uint8Array> {
  const hash = createHash("sha256");
  let n = 0;
  return new TransformStream({
    async transform(piece, controller) {
      hash.update(piece);
      n += piece.byteLength;
      await onBytes(n);
      controller.enqueue(piece);
    },
    flush() {
      const got = `sha256:${hash.digest("hex")}`;
      if (got !== a.digest) throw digestConflict(a, got);
    },
  });
}

/** `sha256:<hex>` of `data`, as the OCI distribution API names content. Pure. */
export const sha256Digest = (data: Uint8Array) => `sha256:${createHash("sha256").update(data).digest("hex")}`;
/** The hex sha1 of `data`, as npm's `dist.shasum`. Pure. */
export const sha1Hex = (data: Uint8Array) => createHash("sha1").update(data).digest("hex");

/** Throws {@link digestConflict} when `content` is not what `a` names (its digest or shasum). Pure. */
export function checkDigest(a: Artifact, content: ArtifactContent): void {
  const got = a.type === "package" ? sha1Hex(content.data) : sha256Digest(content.data);
  if (got !== (a.type === "package" ? a.shasum : a.digest)) throw digestConflict(a, got);
}

/** The `Conflict` of artifact `a` read as `got` (a sha256 digest, or a package's sha1), not what its source lists. Pure. */
export function digestConflict(a: Artifact, got: string): MeshError {
  const want = a.type === "package" ? a.shasum : a.digest;
  return new MeshError(
    ErrorCodes.Conflict,
    `${artifactId(a)} read ${a.type === "package" ? "sha1 " : ""}${got}, not the ${want} its source lists: the source is corrupt or changed during the copy; nothing of it was written, fix it at the source and the copy resumes`,
  );
}

/** The media type an OCI manifest says it is (`mediaType`), else the OCI image manifest's. Pure. */
export function manifestMediaType(data: Uint8Array): string {
  try {
    const m = JSON.parse(Buffer.from(data).toString("utf8")) as { mediaType?: unknown };
    if (typeof m.mediaType === "string" && m.mediaType) return m.mediaType;
  } catch {
    // not JSON: the registry will say so when it is written
  }
  return OCI_IMAGE_MANIFEST;
}

export const OCI_IMAGE_MANIFEST = "application/vnd.oci.image.manifest.v1+json";

/**
 * The bootstrap registry's layout in its object store (format `oci`): `<repository>/blobs/<digest>`
 * and `<repository>/manifests/<tag>`, the repository relative to the namespace. Pure.
 */
export function ociObjectName(a: Extract<Artifact, { type: "blob" | "manifest" }>): string {
  return a.type === "blob" ? `${a.repository}/blobs/${a.digest}` : `${a.repository}/manifests/${a.tag}`;
}

/** The artifact an object of the `oci` layout is, or undefined for a name outside it. Pure. */
export function ociArtifactOfObject(name: string, digest: string): Extract<Artifact, { type: "blob" | "manifest" }> | undefined {
  const m = /^(.+)\/(blobs|manifests)\/([^/]+)$/.exec(name);
  if (!m) return undefined;
  const [, repository, what, last] = m as unknown as [string, string, string, string];
  if (what === "blobs") return /^sha256:[0-9a-f]{64}$/.test(last) ? { type: "blob", repository, digest: last } : undefined;
  return /^[\w][\w.-]{0,127}$/.test(last) ? { type: "manifest", repository, tag: last, digest } : undefined;
}

/** The bootstrap registry's layout (format `npm`): `<name>/<version>.tgz` and `<name>/<version>.json` (its manifest), the name relative to the scope. Pure. */
export function npmObjectNames(name: string, version: string): { tarball: string; manifest: string } {
  return { tarball: `${name}/${version}.tgz`, manifest: `${name}/${version}.json` };
}

/** The package version a tarball object of the `npm` layout is, or undefined for any other name. Pure. */
export function npmVersionOfObject(name: string): { name: string; version: string } | undefined {
  const m = /^((?:[^/]+))\/([^/]+)\.tgz$/.exec(name);
  return m ? { name: m[1]!, version: m[2]! } : undefined;
}
