/**
 * The control plane's images and packages, from bootstrap to registry servers: `meshctl
 * bootstrap` satisfies mesh/images and mesh/packages from object stores of the mesh's own NATS;
 * one image and one package are put there; then a distribution registry (with the mesh's token
 * issuer) and a Verdaccio are registered as preferred providers, and both grants are handed over
 * through the k+1 fan-out while the agent's holder reads the image and the package throughout,
 * each time from wherever its binding says. The rotator is SIGKILLed in the middle of the copy
 * (a test hook freezes it after its first artifact), its rotation record saying how far the
 * copy had come, and the one the supervisor starts again resumes it. Then the registry is stopped: `meshctl status mesh` shows it on the grant the
 * agents read their images from, until it is back.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { Objm, type ObjectStore } from "@nats-io/obj";
import { stringify } from "yaml";
import { Kvm } from "@nats-io/kv";
import { Buckets, Rotation, RotationStates, agentPart, identityRequirement, keys } from "@mesh/shared";
import { natsIdentity } from "@mesh/shared/runtime";
import { getImage, putImage, putPackage, sha1Hex, sha256Digest } from "@mesh/providers";
import { startBootstrappedMesh, type BootstrappedMesh } from "./harness/bootstrapped-mesh.js";
import { ociRegistryProvider, startOwnOciRegistry, type OwnOciRegistry } from "./harness/oci-registry.js";
import { startOwnVerdaccio, VERDACCIO_INSTALL_TIMEOUT_MS, type OwnVerdaccio } from "./harness/verdaccio.js";
import { OciHolder, OCI_MANIFEST } from "./harness/oci-client.js";
import { npm } from "./harness/npm-cli.js";
import { waitFor } from "./harness/wait.js";

const agent = agentPart("node-a");
const bindingDir = (mesh: BootstrappedMesh, requirement: string) => join(mesh.cwd, ".mesh/bindings/node-a/mesh", agent, requirement);
/** A binding as its holder reads it: every file of its directory. */
const readBinding = (dir: string): Record<string, string> => Object.fromEntries(readdirSync(dir).map((f) => [f, readFileSync(join(dir, f), "utf8")]));

interface GrantView {
  requirement: string;
  kind: string;
  provider: string;
  generation: number;
  targets: Array<{ part: string }>;
  conditions: Array<{ type: string; status: string; reason: string; message: string }>;
}

describe("the control plane's images and packages handed over from bootstrap to registry servers", () => {
  let mesh: BootstrappedMesh;
  let registry: OwnOciRegistry;
  let verdaccio: OwnVerdaccio;
  let admin: NatsConnection;
  let work: string;
  const markerDir = mkdtempSync(join(tmpdir(), "mesh-carry-"));
  const marker = join(markerDir, "paused");

  // The image and the package the control plane stored before any registry ran.
  const layer = Buffer.from(`layer of the agent image ${Date.now()}`);
  const config = Buffer.from(JSON.stringify({ architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: [] } }));
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: OCI_MANIFEST,
      config: { mediaType: "application/vnd.oci.image.config.v1+json", digest: sha256Digest(config), size: config.length },
      layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar", digest: sha256Digest(layer), size: layer.length }],
    }),
  );
  let tarball: Buffer;

  const status = async (): Promise<Record<string, GrantView>> => {
    const r = await mesh.meshctl(["status", "mesh", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const m = (JSON.parse(r.stdout) as { modules: Array<{ module: string; state: string; grants: GrantView[] }> }).modules.find((x) => x.module === "mesh")!;
    return Object.fromEntries(m.grants.map((g) => [g.requirement, g]));
  };

  beforeAll(async () => {
    [mesh, registry, verdaccio] = await Promise.all([
      startBootstrappedMesh({ env: { MESH_ROTATOR_TEST_PAUSE_IN_CARRY: marker } }),
      startOwnOciRegistry(),
      startOwnVerdaccio(),
    ]);
    admin = await connect({ servers: mesh.url, authenticator: credsAuthenticator(readFileSync(mesh.adminCredsFile)), ...mesh.tls() });
    work = mkdtempSync(join(tmpdir(), "mesh-handover-work-"));
    // A real npm tarball of @mesh/lib, as `npm pack` makes it.
    const src = join(work, "lib");
    mkdirSync(src);
    writeFileSync(join(src, "package.json"), JSON.stringify({ name: "@mesh/lib", version: "1.0.0", main: "index.js", license: "UNLICENSED" }));
    writeFileSync(join(src, "index.js"), "module.exports = 'the control plane lib';\n");
    writeFileSync(join(work, "none.npmrc"), "");
    const packed = await npm(join(work, "none.npmrc"), src, ["pack", "--pack-destination", work]);
    expect(packed, packed.out).toMatchObject({ code: 0 });
    tarball = readFileSync(join(work, "mesh-lib-1.0.0.tgz"));
  }, VERDACCIO_INSTALL_TIMEOUT_MS + 180_000);
  afterAll(async () => {
    await admin?.close();
    await mesh?.stop();
    await Promise.all([registry?.stop(), verdaccio?.stop()]);
    rmSync(markerDir, { recursive: true, force: true });
    if (work) rmSync(work, { recursive: true, force: true });
  });

  /**
   * The operator's image and package put into the bootstrap object stores, once, by whichever
   * test needs them first; the image's digest.
   */
  let filling: Promise<string> | undefined;
  const filled = () =>
    (filling ??= (async () => {
      const js = jetstream(admin);
      const digest = await putImage(await new Objm(js).open(readBinding(bindingDir(mesh, "images")).bucket!), {
        repository: "agent",
        tag: "1.0",
        manifest,
        blobs: [config, layer],
      });
      await putPackage(await new Objm(js).open(readBinding(bindingDir(mesh, "packages")).bucket!), {
        name: "lib",
        version: "1.0.0",
        manifest: { name: "@mesh/lib", version: "1.0.0", main: "index.js" },
        tarball,
      });
      return digest;
    })());

  /**
   * The handover: both registries installed and preferred, the rotator killed where it froze in
   * the middle of the image's copy, and both handovers committed; their rotation records. Done
   * once, by whichever test needs it first.
   */
  let handingOver: Promise<{ images: Rotation; packages: Rotation; frozen: Rotation }> | undefined;
  const handedOver = () =>
    (handingOver ??= (async () => {
      // The registries are installed, and preferred.
      const providers = [
        { ...ociRegistryProvider(registry, "registry-oci", work), preference: 10 },
        {
          kind: "Provider",
          name: "registry-npm",
          serves: ["npm.registry"],
          node: "node-a",
          endpoint: verdaccio.endpoint,
          options: { usersDir: verdaccio.usersDir },
          preference: 10,
          installed: true,
        },
      ];
      const applyProvider = async (p: (typeof providers)[number]) => {
        const file = join(work, `${p.name}.yaml`);
        writeFileSync(file, stringify(p));
        const applied = await mesh.meshctl(["apply", "-f", file]);
        expect(applied.code, applied.stdout + applied.stderr).toBe(0);
      };
      // The image registry first: its copy (two blobs, then the manifest) is the one killed in the middle.
      await applyProvider(providers[0]!);
      const record = async (requirement: string) => {
        const e = await (await new Kvm(admin).open(Buckets.rotations)).get(keys.grant("mesh", requirement));
        return e?.operation === "PUT" ? Rotation.parse(e.json()) : undefined;
      };
      // The rotator froze after the first artifact it copied: killed there, mid-copy, its record as it left it.
      await waitFor("the rotator to freeze in the middle of a copy", () => existsSync(marker), 60_000, 100);
      const pid = Number(readFileSync(marker, "utf8").trim());
      expect(pid).toBe(mesh.servicePid("rotator"));
      const frozen = (await record("images"))!;
      process.kill(pid, "SIGKILL");
      await applyProvider(providers[1]!);

      // The supervisor starts it again; it finishes both handovers.
      const committed = async (requirement: string) => {
        const rot = await record(requirement);
        return rot?.trigger === "handover" && rot.state === RotationStates.Committed ? rot : undefined;
      };
      const [images, packages] = await Promise.all([
        waitFor("mesh/images handed over", () => committed("images"), 120_000, 500),
        waitFor("mesh/packages handed over", () => committed("packages"), 120_000, 500),
      ]);
      return { images, packages, frozen };
    })());

  it("at bootstrap, the agent's images and packages are object stores of the mesh's own NATS, which hold what was put there", async () => {
    const grants = await status();
    expect(grants.images).toMatchObject({ kind: "oci.registry", provider: "mesh-nats", generation: 1 });
    expect(grants.packages).toMatchObject({ kind: "npm.registry", provider: "mesh-nats", generation: 1 });
    const images = readBinding(bindingDir(mesh, "images"));
    const packages = readBinding(bindingDir(mesh, "packages"));
    // The binding keys before the handover (docs/control-plane.md lists them).
    expect(Object.keys(images).sort()).toEqual(["bucket", "format", "host", "port", "provider", "type", "uri"]);
    expect(images).toMatchObject({ type: "nats-object-store", provider: "mesh-nats", bucket: "mesh_images", format: "oci" });
    expect(Object.keys(packages).sort()).toEqual(["bucket", "format", "host", "port", "provider", "type", "uri"]);
    expect(packages).toMatchObject({ type: "nats-object-store", bucket: "mesh_packages", format: "npm" });

    expect(await filled()).toBe(sha256Digest(manifest));
  });

  it("hands both over to the registries with the holder reading throughout; the copy, killed in the middle, resumes; the binding keys change to the registries'", async () => {
    await filled();
    // The agent's identity: what it reads the object stores with (its binding of the part's identity).
    const asAgent = await connect({
      servers: mesh.url,
      ...natsIdentity({ MESH_NATS_CREDENTIALS: bindingDir(mesh, identityRequirement(agent)) }),
      ...mesh.tls(),
    });
    const stores = new Map<string, ObjectStore>();
    const objectStore = async (bucket: string) => stores.get(bucket) ?? stores.set(bucket, await new Objm(jetstream(asAgent)).open(bucket)).get(bucket)!;

    /** One read of the image and the package, from where the binding says now; what was read from where. */
    const readOnce = async (): Promise<{ image: string; pkg: string }> => {
      const images = readBinding(bindingDir(mesh, "images"));
      const packages = readBinding(bindingDir(mesh, "packages"));
      let image: string;
      if (images.type === "nats-object-store") {
        const got = await getImage(await objectStore(images.bucket!), "agent", "1.0");
        if (!got || sha256Digest(got.manifest) !== sha256Digest(manifest)) throw new Error(`image agent:1.0 not in ${images.bucket}`);
        const blob = await got.blob(sha256Digest(layer));
        if (!blob || !Buffer.from(blob).equals(layer)) throw new Error(`layer of agent:1.0 not in ${images.bucket}`);
        image = "nats";
      } else {
        const pulled = await new OciHolder(images, { cacheTokens: false }).pullImage({ repository: `${images.namespace}/agent`, tag: "1.0" });
        if (!pulled.layer.equals(layer)) throw new Error("pulled another layer");
        image = "registry";
      }
      let pkg: string;
      if (packages.type === "nats-object-store") {
        const got = await (await objectStore(packages.bucket!)).getBlob("lib/1.0.0.tgz");
        if (!got || sha1Hex(got) !== sha1Hex(tarball)) throw new Error(`lib@1.0.0 not in ${packages.bucket}`);
        pkg = "nats";
      } else {
        const res = await fetch(new URL("@mesh/lib/-/lib-1.0.0.tgz", packages.registry), { headers: { authorization: `Basic ${packages.auth}` } });
        if (!res.ok) throw new Error(`GET @mesh/lib-1.0.0.tgz: HTTP ${res.status}`);
        if (sha1Hex(Buffer.from(await res.arrayBuffer())) !== sha1Hex(tarball)) throw new Error("installed another tarball");
        pkg = "registry";
      }
      return { image, pkg };
    };

    const failures: string[] = [];
    const seen = new Set<string>();
    let reads = 0;
    let running = true;
    const loop = (async () => {
      while (running) {
        try {
          const r = await readOnce();
          seen.add(`image@${r.image}`);
          seen.add(`package@${r.pkg}`);
          reads++;
        } catch (e) {
          failures.push(String(e));
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    })();

    try {
      await waitFor("the holder's first reads", () => reads >= 3 || failures.length > 0, 20_000);
      expect(failures).toEqual([]);

      // The registries are installed and preferred; the rotator, killed in the middle of the image's copy, finishes both handovers.
      const { images, packages, frozen } = await handedOver();
      // In the middle of the copy its record said how far it had come: the first blob streamed (its
      // first report is written at once, the next a second later at the earliest), none done yet.
      expect(frozen).toMatchObject({ state: RotationStates.Staged, carrying: { total: 3, copied: 0, present: 0 } });
      expect(frozen.carrying!.artifact).toMatch(/^blob agent@sha256:[0-9a-f]{64}$/);
      expect([config.length, layer.length]).toContain(frozen.carrying!.bytes);
      expect(frozen.carried).toBeUndefined();
      expect(images).toMatchObject({ fromProvider: "mesh-nats", provider: "registry-oci", from: 1, to: 2 });
      expect(packages).toMatchObject({ fromProvider: "mesh-nats", provider: "registry-npm", from: 1, to: 2 });
      // Everything was carried over, two blobs and a manifest, and the package version; what the
      // killed rotator had copied, its successor found there and did not copy again:
      console.log(`carried over: images ${JSON.stringify(images.carried)}, packages ${JSON.stringify(packages.carried)}`);
      // The first blob was there already; the rest the rotator started again copied.
      expect(images.carried).toMatchObject({ total: 3, present: 1, copied: 2 });
      expect(packages.carried).toMatchObject({ total: 1, present: 0, copied: 1 });
      // Once complete, the outcome replaced the progress.
      expect(images.carrying).toBeUndefined();
      expect(packages.carrying).toBeUndefined();
      // Every holder confirmed before the commit.
      for (const r of [images, packages]) expect(Object.values(r.holders).every((h) => h.c !== undefined)).toBe(true);

      await waitFor(
        "the holder reading from both registries",
        () => (seen.has("image@registry") && seen.has("package@registry")) || failures.length > 0,
        30_000,
      );
      const at = reads;
      await waitFor("more reads from the registries", () => reads >= at + 3 || failures.length > 0, 20_000);
    } finally {
      running = false;
      await loop;
      await asAgent.close();
    }
    // Not one read failed, from bootstrap to registry.
    expect(failures).toEqual([]);
    expect([...seen].sort()).toEqual(["image@nats", "image@registry", "package@nats", "package@registry"]);

    // The binding keys after the handover.
    const images = readBinding(bindingDir(mesh, "images"));
    expect(Object.keys(images).sort()).toEqual(["host", "namespace", "password", "port", "provider", "registry", "type", "url", "username"]);
    expect(images).toMatchObject({ type: "oci", provider: "registry-oci", namespace: "mesh", url: registry.registryUrl });
    const packages = readBinding(bindingDir(mesh, "packages"));
    expect(Object.keys(packages).sort()).toEqual(["auth", "host", "npmrc", "password", "port", "provider", "registry", "scope", "type", "username"]);
    expect(packages).toMatchObject({ type: "npm", provider: "registry-npm", scope: "@mesh" });
    // The package installs with the delivered npmrc, as a holder installs it.
    const app = join(work, "app");
    mkdirSync(app);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true }));
    const inst = await npm(join(bindingDir(mesh, "packages"), "npmrc"), app, ["install", "@mesh/lib@1.0.0"]);
    expect(inst, inst.out).toMatchObject({ code: 0 });
    expect(readFileSync(join(app, "node_modules/@mesh/lib/index.js"), "utf8")).toContain("the control plane lib");

    const grants = await status();
    expect(grants.images).toMatchObject({ provider: "registry-oci", generation: 2 });
    // What the grant says of the handover: copied, not left behind.
    expect(grants.images!.conditions.find((c) => c.type === "Provisioned")?.message).toMatch(
      /handed over from mesh-nats: generation 1 retired there, what it stored there copied here first \(3 artifacts\)/,
    );
    expect(grants.packages).toMatchObject({ provider: "registry-npm", generation: 2 });
  }, 300_000);

  it("a registry stopped shows on the grant its holders read from, in meshctl status mesh, until it is back", async () => {
    await filled();
    await handedOver();
    const reachable = (g: GrantView | undefined) => g?.conditions.find((c) => c.type === "Reachable" || c.type === "Verified");
    await registry.stopServer();
    try {
      const down = await waitFor(
        "mesh/images not verified while its registry is down",
        async () => {
          const g = (await status()).images;
          const c = g?.conditions.find((x) => x.status === "False" && /Unreachable/.test(x.reason));
          return g && c ? { g, c } : undefined;
        },
        90_000,
        1_000,
      );
      expect(down.c.message).toContain(registry.registryUrl.replace(/^http:\/\//, ""));
      expect(down.g.targets.map((t) => t.part)).toEqual([agent]);
      const text = await mesh.meshctl(["status", "mesh"]);

      expect(text.stdout).toMatch(/images/);
      expect(text.stdout).toMatch(/Unreachable/);
      // The other registry's grant is not affected.
      expect((await status()).packages!.conditions.some((x) => x.status === "False")).toBe(false);
    } finally {
      await registry.startServer();
    }
    await waitFor(
      "mesh/images verified again",
      async () => {
        const g = (await status()).images;
        return g && !g.conditions.some((x) => x.status === "False") && reachable(g)?.status === "True" ? g : undefined;
      },
      90_000,
      1_000,
    );
  }, 420_000); // alone, it makes the handover first (up to 180 s of its waits)
});
