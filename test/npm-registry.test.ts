/**
 * The `npm.registry` kind on a mesh: `examples/providers/npm.yaml` as shipped applies on a machine
 * where no registry runs (its requirements wait, `ProviderNotInstalled`); pointed at a Verdaccio
 * of this file's own (test/harness/verdaccio.ts) it provisions a scope whose binding, as the agent
 * wrote it, publishes and installs with the npm client, and the verifier finds it working; and a rotation through the rotator's
 * confirmed fan-out, with a holder reading its package from the registry throughout, sees no
 * failure and ends with the old generation refused.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { getCondition, keys, Kinds, parseAllowedHooks, ProviderDoc, Rotation, RotationStates, subjects, type ModuleDoc } from "@mesh/shared";
import { readJson } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { bindingGeneration, bindingPath, startAgent, type Agent } from "@mesh/agent";
import { jetstream } from "@nats-io/jetstream";
import { Objm } from "@nats-io/obj";
import { copyArtifacts, objectStoreArtifacts, putPackage } from "@mesh/providers";
import { npmRegistrySink } from "../packages/providers/src/registry-artifacts.js";
import { startRotator, type Rotator } from "@mesh/rotator";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { startOwnVerdaccio, VERDACCIO_INSTALL_TIMEOUT_MS, type OwnVerdaccio } from "./harness/verdaccio.js";
import { waitFor } from "./harness/wait.js";
import { markerHook, type MarkerHook } from "./harness/marker-hook.js";
import { npm } from "./harness/npm-cli.js";

const repo = fileURLToPath(new URL("..", import.meta.url));
const example = ProviderDoc.parse(parse(readFileSync(join(repo, "examples/providers/npm.yaml"), "utf8")));

/** The hook the holder's part names: it waits until the holder switched to the delivered generation. */
const AWAIT_SWITCH = "await-switch";

const moduleDoc = (name: string, onRotate?: string): ModuleDoc => ({
  kind: "Module",
  name,
  parts: [{ name: "app", node: "node-a", installed: true, ...(onRotate ? { onRotate } : {}) }],
  requires: [{ name: "pkgs", kind: Kinds.NpmRegistry, parts: ["app"] }],
});

/** Runs npm with `npmrc` as its only config; resolves to its exit code and output. */
describe("the npm example provider, as shipped, where no registry runs", () => {
  let mesh: TestMesh;
  beforeAll(async () => {
    mesh = await startTestMesh();
  });
  afterAll(async () => {
    await mesh?.stop();
  });

  it("applies cleanly, and its requirements wait as ProviderNotInstalled naming it", async () => {
    expect(example).toMatchObject({ installed: false, serves: [Kinds.NpmRegistry] });
    const reply = await mesh.apply([example, moduleDoc("ex-npm")]);
    expect(reply.ok, JSON.stringify(reply)).toBe(true);
    await mesh.waitForState("ex-npm", "Unsatisfiable");
    const resolved = getCondition((await mesh.grant("ex-npm", "pkgs"))!.conditions, "Resolved");
    expect(resolved).toMatchObject({ reason: "ProviderNotInstalled" });
    expect(resolved!.message).toContain("npm-main");
  });
});

describe("npm.registry on a mesh with a Verdaccio of its own", () => {
  let registry: OwnVerdaccio;
  let mesh: TestMesh;
  let rotator: Rotator;
  let agent: Agent;
  let hook: MarkerHook;
  let root: string;
  let work: string;

  beforeAll(async () => {
    registry = await startOwnVerdaccio();
    mesh = await startTestMesh({ nodes: [], verifier: { intervalMs: 1_000 } });
    hook = markerHook();
    work = mkdtempSync(join(tmpdir(), "mesh-npm-work-"));
    root = join(mesh.bindingsRoot, "node-a");
    agent = await startAgent({
      store: mesh.store,
      node: "node-a",
      bindingsRoot: root,
      hooks: parseAllowedHooks([hook.allow(AWAIT_SWITCH)]),
      log: createLogger("agent", { destination: mesh.logs, level: "debug" }),
    });
    rotator = await startRotator({
      store: mesh.store,
      masterKey: mesh.masterKey,
      log: createLogger("rotator", { destination: mesh.logs, level: "debug" }),
      env: process.env,
      sweepMs: 500,
    });
    const provider = { ...example, endpoint: registry.endpoint, options: { usersDir: registry.usersDir }, installed: true };
    expect((await mesh.apply([provider, moduleDoc("shop", AWAIT_SWITCH)])).ok).toBe(true);
    await mesh.waitForState("shop", "Ready", 30_000);
  }, VERDACCIO_INSTALL_TIMEOUT_MS + 60_000);
  afterAll(async () => {
    await rotator?.stop();
    await agent?.stop();
    await mesh?.stop();
    await registry?.stop();
    hook?.remove();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  const bindingDir = () => bindingPath(root, "shop", "app", "pkgs");
  const read = (key: string) => readFileSync(join(bindingDir(), key), "utf8");

  it("is verified by the verifier, with npm whoami's request", async () => {
    await waitFor(
      "shop/pkgs Verified",
      async () => getCondition((await mesh.grant("shop", "pkgs"))?.conditions ?? [], "Verified")?.status === "True" || undefined,
      20_000,
    );
  });

  it("delivers a binding whose npmrc publishes and installs a package of @shop", async () => {
    expect(read("scope")).toBe("@shop");
    expect(read("username")).toBe("shop_pkgs_a");
    const src = join(work, "lib");
    mkdirSync(src);
    writeFileSync(join(src, "package.json"), JSON.stringify({ name: "@shop/lib", version: "1.0.0", main: "index.js", license: "UNLICENSED" }));
    writeFileSync(join(src, "index.js"), "module.exports = 'shop lib';\n");
    const pub = await npm(join(bindingDir(), "npmrc"), src, ["publish", "--registry", read("registry")]);
    expect(pub, pub.out).toMatchObject({ code: 0 });
    const app = join(work, "app");
    mkdirSync(app);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true }));
    const inst = await npm(join(bindingDir(), "npmrc"), app, ["install", "@shop/lib@1.0.0"]);
    expect(inst, inst.out).toMatchObject({ code: 0 });
    expect(readFileSync(join(app, "node_modules/@shop/lib/index.js"), "utf8")).toContain("shop lib");
  });

  it("rotates with a holder reading @shop/lib throughout: no failure, and generation 1 is refused after", async () => {
    // The holder as a module runs it: its auth from the binding on disk, re-read when the generation changes.
    let generation = bindingGeneration(root, "shop", "app", "pkgs")!;
    let auth = read("auth");
    const firstAuth = auth;
    const failures: string[] = [];
    let reads = 0;
    let stopped = false;
    const holder = (async () => {
      while (!stopped) {
        const onDisk = bindingGeneration(root, "shop", "app", "pkgs");
        if (onDisk !== undefined && onDisk !== generation) {
          auth = read("auth");
          generation = onDisk;
          hook.mark("shop", "app", onDisk);
        }
        const status = await fetch(`${registry.endpoint}/${encodeURIComponent("@shop/lib")}`, {
          headers: { authorization: `Basic ${auth}` },
          signal: AbortSignal.timeout(5_000),
        }).then(
          async (r) => (await r.body?.cancel(), r.status),
          (e: Error) => e.message,
        );
        if (status === 200) reads++;
        else failures.push(`g${generation}: ${status}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    try {
      const reply = await mesh.nc
        .request(subjects.rotate, JSON.stringify({ grant: "shop/pkgs" }), { timeout: 15_000 })
        .then((m) => m.json<{ ok: boolean; rotation?: Rotation }>());
      expect(reply).toMatchObject({ ok: true, rotation: { from: 1, to: 2 } });
      await waitFor(
        "rotation committed",
        async () => (await readJson(mesh.store.kv.rotations, keys.grant("shop", "pkgs"), Rotation))?.value.state === RotationStates.Committed || undefined,
        30_000,
      );
      const at = reads;
      await waitFor("reads after the commit", () => reads > at + 10 || undefined);
    } finally {
      stopped = true;
      await holder;
    }
    expect(failures).toEqual([]);
    expect(generation).toBe(2);
    expect(read("username")).toBe("shop_pkgs_b");
    const g = await mesh.grant("shop", "pkgs");
    expect(g?.generation).toBe(2);
    // Generation 1 is retired at the registry: its user can no longer read the package.
    await waitFor("generation 1 refused", async () => {
      const r = await fetch(`${registry.endpoint}/${encodeURIComponent("@shop/lib")}`, { headers: { authorization: `Basic ${firstAuth}` } });
      await r.body?.cancel();
      return r.status === 401 || undefined;
    });
  });

  it("copies a package's versions in any order and leaves dist-tags.latest at the highest by semver", async () => {
    const scope = read("scope");
    const packumentOf = async (name: string) => {
      const res = await fetch(`${registry.endpoint}/${encodeURIComponent(`${scope}/${name}`)}`, { headers: { authorization: `Basic ${read("auth")}` } });
      expect(res.status).toBe(200);
      return (await res.json()) as { "dist-tags": Record<string, string>; versions: Record<string, unknown> };
    };
    const js = jetstream(mesh.nc);
    const os = await new Objm(js).create("npm_semver_src");
    const put = (version: string) =>
      putPackage(os, { name: "ranked", version, manifest: { name: `${scope}/ranked`, version }, tarball: Buffer.from(`ranked ${version}`) });
    const copy = () =>
      copyArtifacts(
        objectStoreArtifacts(js, os, Kinds.NpmRegistry, "the test's object store"),
        npmRegistrySink({ registry: read("registry"), scope, username: read("username"), password: read("password") }),
      );
    // Name order (the order a copy takes them) and semver order differ: 1.10.0 < 1.2.0 < 1.9.0.
    for (const v of ["1.2.0", "1.10.0", "1.9.0"]) await put(v);
    expect(await copy()).toMatchObject({ total: 3, copied: 3 });
    const first = await packumentOf("ranked");
    expect(Object.keys(first.versions).sort()).toEqual(["1.10.0", "1.2.0", "1.9.0"]);
    expect(first["dist-tags"].latest).toBe("1.10.0");
    // A lower version copied later leaves it; a higher one moves it up; a prerelease does not take it.
    for (const v of ["1.3.0", "1.11.0", "2.0.0-rc.1"]) await put(v);
    expect(await copy()).toMatchObject({ total: 6, copied: 3, present: 3 });
    expect((await packumentOf("ranked"))["dist-tags"].latest).toBe("1.11.0");
  });
});
