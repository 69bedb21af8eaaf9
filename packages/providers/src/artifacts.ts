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
 * Names are relative to the grant's namespace: repository `agent` of an `oci.registry` grant of
 * module `mesh` is `mesh/agent` on a registry; package `lib` of an `npm.registry` grant is
 * `@mesh/lib`. The bootstrap registry's object store names them so (see
 * {@link ociObjectName} and {@link npmObjectNames}).
 */
import { createHash } from "node:crypto";
import { ErrorCodes, MeshError } from "@mesh/shared";
import type { Artifact, ArtifactContent, ArtifactSink, ArtifactSource } from "./adapter.js";

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

/**
 * Copies every artifact of `source` that `sink` lacks, in {@link copyOrder}; `onCopied` is
 * called after each one written (a test hook may freeze the process there). Each read is
 * checked against the digest the source listed, so a corrupt source is refused, not copied.
 */
export async function copyArtifacts(
  source: ArtifactSource,
  sink: ArtifactSink,
  hooks: { onCopied?: (a: Artifact, done: CopyOutcome) => Promise<void> | void } = {},
): Promise<CopyOutcome> {
  const all = copyOrder(await source.list());
  const out: CopyOutcome = { total: all.length, copied: 0, present: 0, bytes: 0 };
  for (const a of all) {
    if (await sink.has(a)) {
      out.present++;
      continue;
    }
    const content = await source.read(a);
    checkDigest(a, content);
    await sink.write(a, content);
    out.copied++;
    out.bytes += content.data.byteLength;
    await hooks.onCopied?.(a, { ...out });
  }
  return out;
}

/** `sha256:<hex>` of `data`, as the OCI distribution API names content. Pure. */
export const sha256Digest = (data: Uint8Array) => `sha256:${createHash("sha256").update(data).digest("hex")}`;
/** The hex sha1 of `data`, as npm's `dist.shasum`. Pure. */
export const sha1Hex = (data: Uint8Array) => createHash("sha1").update(data).digest("hex");

/** Throws `Conflict` when `content` is not what `a` names (its digest or shasum). Pure. */
export function checkDigest(a: Artifact, content: ArtifactContent): void {
  const got = a.type === "package" ? sha1Hex(content.data) : sha256Digest(content.data);
  const want = a.type === "package" ? a.shasum : a.digest;
  if (got !== want) {
    throw new MeshError(
      ErrorCodes.Conflict,
      `${artifactId(a)} read ${a.type === "package" ? "sha1 " : ""}${got}, not the ${want} its source lists: the source is corrupt or changed during the copy; nothing of it was written, fix it at the source and the copy resumes`,
    );
  }
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
