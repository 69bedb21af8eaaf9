/**
 * The bootstrap registry's contents: the images and packages of an `oci.registry` or
 * `npm.registry` grant kept in a JetStream object store of the mesh's own NATS, in the layout
 * of artifacts.ts (`<repository>/blobs/<digest>`, `<repository>/manifests/<tag>`;
 * `<name>/<version>.tgz` beside `<name>/<version>.json`). Read by a handover's copy, and
 * written by whoever fills the store (an operator's tooling, the tests) through
 * {@link putImage} and {@link putPackage}, so the layout has one writer.
 */
import type { JetStreamClient, JsMsg } from "@nats-io/jetstream";
import type { ObjectInfo, ObjectStore } from "@nats-io/obj";
import { ErrorCodes, Kinds, MeshError, errorMessage } from "@mesh/shared";
import type { Artifact, ArtifactContent, ArtifactSink, ArtifactSource, BlobArtifact, OpenBlob, WholeArtifact } from "./adapter.js";
import { artifactId, manifestMediaType, npmObjectNames, npmVersionOfObject, ociArtifactOfObject, ociObjectName, sha1Hex, sha256Digest } from "./artifacts.js";

/** The registry kinds the bootstrap registry serves. */
export type RegistryKind = typeof Kinds.OciRegistry | typeof Kinds.NpmRegistry;

/** How many of an object's chunks (128 KiB each as putBlob and put cut them) a read asks the server for ahead of its reader. */
const READ_AHEAD_CHUNKS = 4;
/** How long a read waits for the next chunk of an object. */
const CHUNK_WAIT_MS = 30_000;

/**
 * The artifacts of one grant's object store `os`, to read and to write; `js` (of the same
 * connection) reads a blob's chunks at its reader's pace.
 */
export function objectStoreArtifacts(js: JetStreamClient, os: ObjectStore, kind: RegistryKind, where: string): ArtifactSource & ArtifactSink {
  const missing = (a: Artifact) =>
    new MeshError(ErrorCodes.Conflict, `${artifactId(a)} is listed in ${where} but has no content there (deleted during the copy?); the copy is tried again`, {
      retryable: true,
    });
  return {
    ...objectStoreWriter(os),
    async list() {
      const infos = (await os.list()).filter((i) => !i.deleted);
      if (kind === Kinds.OciRegistry) {
        return infos.flatMap((i) => {
          const a = ociArtifactOfObject(i.name, digestOfInfo(i));
          return a ? [a] : [];
        });
      }
      const out: Artifact[] = [];
      for (const i of infos) {
        const v = npmVersionOfObject(i.name);
        if (!v) continue;
        const manifest = await readManifest(os, v.name, v.version, where);
        const shasum = typeof manifest.dist?.shasum === "string" ? manifest.dist.shasum : undefined;
        out.push({ type: "package", ...v, shasum: shasum ?? sha1Hex((await os.getBlob(i.name)) ?? new Uint8Array()) });
      }
      return out;
    },
    async read(a) {
      if (a.type === "package") {
        const names = npmObjectNames(a.name, a.version);
        const data = await os.getBlob(names.tarball);
        if (!data) throw missing(a);
        return { data, manifest: await readManifest(os, a.name, a.version, where) };
      }
      const data = await os.getBlob(ociObjectName(a));
      if (!data) throw missing(a);
      return { data, mediaType: manifestMediaType(data) };
    },
    async openBlob(a) {
      const info = await os.info(ociObjectName(a));
      if (!info || info.deleted) throw missing(a);
      if (info.options?.link) {
        throw new MeshError(
          ErrorCodes.Conflict,
          `${artifactId(a)} in ${where} is a link to another object, which a copy does not follow; put the blob itself there (putImage), and the copy resumes`,
        );
      }
      return objectChunks(js, info, `${artifactId(a)} in ${where}`);
    },
    async has(a) {
      if (a.type === "package") return (await os.info(npmObjectNames(a.name, a.version).tarball)) !== null;
      const info = await os.info(ociObjectName(a));
      if (!info || info.deleted) return false;
      if (a.type === "manifest" && digestOfInfo(info) !== a.digest) {
        throw new MeshError(
          ErrorCodes.Conflict,
          `${where} holds ${artifactId(a)} with digest ${digestOfInfo(info)}, not ${a.digest}: a tag is not overwritten by a copy; remove it there first`,
        );
      }
      return true;
    },
  };
}

/** What writes the layout into an object store: a copy's sink, and {@link putImage} and {@link putPackage}. */
function objectStoreWriter(os: ObjectStore): Pick<ArtifactSink, "write" | "writeBlob"> {
  return {
    async write(a: WholeArtifact, content: ArtifactContent) {
      if (a.type === "package") {
        const names = npmObjectNames(a.name, a.version);
        // The manifest first: a tarball without its manifest is not listed (npmVersionOfObject finds tarballs and reads their manifest).
        await os.putBlob({ name: names.manifest }, Buffer.from(JSON.stringify(content.manifest ?? {})));
        await os.putBlob({ name: names.tarball }, content.data);
        return;
      }
      await os.putBlob({ name: ociObjectName(a) }, content.data);
    },
    // The store cuts the stream into its chunks as it reads it; a stream that errors leaves nothing (put removes the chunks it wrote).
    async writeBlob(a: BlobArtifact, open: OpenBlob) {
      await os.put({ name: ociObjectName(a) }, await open());
    },
  };
}

/**
 * The bytes of object `info` as a stream read at its reader's pace: an ordered consumer of the
 * object's chunks, asked for {@link READ_AHEAD_CHUNKS} at a time (`os.get` would take every
 * chunk as fast as the server sends it, whatever its reader does). Failures become a retryable
 * `ProviderUnreachable` naming `what`.
 */
function objectChunks(js: JetStreamClient, info: ObjectInfo, what: string): ReadableStream<Uint8Array> {
  let read = 0;
  const failed = (e: unknown) =>
    new MeshError(
      ErrorCodes.ProviderUnreachable,
      `reading ${what} failed after ${read} of its ${info.size} bytes (${errorMessage(e)}); the copy is tried again, skipping what it copied already`,
      { retryable: true, cause: e },
    );
  if (info.size === 0) return new ReadableStream({ start: (c) => c.close() });
  let messages: { stop(): void } | undefined;
  let next: () => Promise<IteratorResult<JsMsg>>;
  return new ReadableStream<Uint8Array>(
    {
      async start() {
        try {
          // The object store's layout (ADR-20): stream OBJ_<bucket>, the object's chunks on $O.<bucket>.C.<nuid>.
          const consumer = await js.consumers.get(`OBJ_${info.bucket}`, { filter_subjects: `$O.${info.bucket}.C.${info.nuid}` });
          const m = await consumer.consume({ max_messages: READ_AHEAD_CHUNKS });
          messages = m;
          const it = m[Symbol.asyncIterator]();
          next = () => it.next();
        } catch (e) {
          throw failed(e);
        }
      },
      async pull(controller) {
        let got: IteratorResult<JsMsg>;
        let timer: NodeJS.Timeout | undefined;
        try {
          got = await Promise.race([
            next(),
            new Promise<never>((_, reject) => {
              timer = setTimeout(() => reject(new Error(`no chunk came within ${CHUNK_WAIT_MS / 1000} s`)), CHUNK_WAIT_MS);
            }),
          ]);
        } catch (e) {
          messages?.stop();
          throw failed(e);
        } finally {
          clearTimeout(timer);
        }
        if (got.done) throw failed(new Error("its chunks ended early"));
        read += got.value.data.byteLength;
        if (got.value.data.byteLength > 0) controller.enqueue(got.value.data);
        if (got.value.info.pending === 0) {
          messages?.stop();
          controller.close();
        }
      },
      cancel() {
        messages?.stop();
      },
    },
    // Nothing read ahead beyond the consumer's own few chunks.
    { highWaterMark: 0 },
  );
}

/**
 * Puts an image into an `oci` object store: its blobs (config and layers), then its manifest
 * under `tag`. Returns the manifest's digest.
 */
export async function putImage(os: ObjectStore, image: { repository: string; tag: string; manifest: Uint8Array; blobs: Uint8Array[] }): Promise<string> {
  const store = objectStoreWriter(os);
  for (const data of image.blobs) {
    await store.writeBlob({ type: "blob", repository: image.repository, digest: sha256Digest(data) }, async () => new Blob([data]).stream());
  }
  const digest = sha256Digest(image.manifest);
  await store.write({ type: "manifest", repository: image.repository, tag: image.tag, digest }, { data: image.manifest });
  return digest;
}

/** Puts a package version into an `npm` object store: its manifest (with `dist.shasum` set) and its tarball. Returns the shasum. */
export async function putPackage(
  os: ObjectStore,
  pkg: { name: string; version: string; manifest: Record<string, unknown>; tarball: Uint8Array },
): Promise<string> {
  const shasum = sha1Hex(pkg.tarball);
  const manifest = { ...pkg.manifest, dist: { ...(pkg.manifest.dist as object | undefined), shasum } };
  await objectStoreWriter(os).write({ type: "package", name: pkg.name, version: pkg.version, shasum }, { data: pkg.tarball, manifest });
  return shasum;
}

/** What a holder reads from an `oci` object store: the manifest under a tag and its blobs, or undefined when the tag is not there. */
export async function getImage(
  os: ObjectStore,
  repository: string,
  tag: string,
): Promise<{ manifest: Uint8Array; blob(digest: string): Promise<Uint8Array | null> } | undefined> {
  const manifest = await os.getBlob(ociObjectName({ type: "manifest", repository, tag, digest: "" }));
  if (!manifest) return undefined;
  return { manifest, blob: (digest) => os.getBlob(ociObjectName({ type: "blob", repository, digest })) };
}

/** A package version's manifest in an `npm` object store. */
async function readManifest(os: ObjectStore, name: string, version: string, where: string): Promise<Record<string, unknown> & { dist?: { shasum?: unknown } }> {
  const data = await os.getBlob(npmObjectNames(name, version).manifest);
  if (!data)
    throw new MeshError(
      ErrorCodes.Conflict,
      `package ${name}@${version} in ${where} has a tarball but no manifest (${npmObjectNames(name, version).manifest}); put it with its manifest (putPackage)`,
    );
  try {
    return JSON.parse(Buffer.from(data).toString("utf8")) as Record<string, unknown>;
  } catch (e) {
    throw new MeshError(ErrorCodes.Conflict, `the manifest of package ${name}@${version} in ${where} is not JSON; put it again`, { cause: e });
  }
}

/** An object's digest as the OCI API names content: the object store keeps `SHA-256=<base64url>`. */
function digestOfInfo(i: ObjectInfo): string {
  const m = /^SHA-256=(.+)$/i.exec(i.digest ?? "");
  return m ? `sha256:${Buffer.from(m[1]!, "base64url").toString("hex")}` : "";
}
