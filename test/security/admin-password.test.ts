/**
 * What a Provider's admin password source may reach, through the real services on a test
 * nats-server: `meshctl apply` (the resolver) refuses a Provider whose `passwordFile` names the
 * mesh's master key, or whose `passwordEnv` names one of the mesh's variables, naming the field
 * and the rule, and stores nothing; a Provider that got into the store anyway (stored before the
 * rule, or by a resolver that sees other files) is refused where the password is read: the
 * provisioner reads nothing and sends nothing to its endpoint, and says why on the grant.
 */
import { createServer, type Server } from "node:net";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorCodes, getCondition, isMeshError, type ProviderDoc } from "@mesh/shared";
import { providerConfig } from "@mesh/providers";
import { bufferOutput, runApply } from "../../packages/cli/src/index.js";
import { startTestMesh, type TestMesh } from "../mesh.js";
import { waitFor } from "../harness/wait.js";

let mesh: TestMesh;
let dir: string;
let state: string;
let masterKeyFile: string;
let endpoint: Server;
let port: number;
let received = 0;
const KEY = "ab".repeat(32);

const redisProvider = (name: string, admin: ProviderDoc["admin"]): ProviderDoc => ({
  kind: "Provider",
  name,
  serves: ["redis.user"],
  node: "node-a",
  endpoint: `redis://127.0.0.1:${port}`,
  ...(admin ? { admin } : {}),
  installed: true,
});

async function keysOf(kv: TestMesh["store"]["kv"]["providers"]): Promise<string[]> {
  const out: string[] = [];
  for await (const k of await kv.keys()) out.push(k);
  return out;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "mesh-admin-password-"));
  state = join(dir, ".mesh");
  mkdirSync(state);
  masterKeyFile = join(state, "master.key");
  writeFileSync(masterKeyFile, `${KEY}\n`, { mode: 0o600 });
  // The provider's endpoint: counts every byte anyone sends it.
  endpoint = createServer((socket) => socket.on("data", (b) => (received += b.length)));
  await new Promise<void>((r) => endpoint.listen(0, "127.0.0.1", r));
  port = (endpoint.address() as { port: number }).port;
  // The services as meshctl up runs them: they know the mesh's own directory.
  mesh = await startTestMesh({ nodes: [], env: { ...process.env, MESH_STATE_DIR: state, MESH_MASTER_KEY_FILE: masterKeyFile } });
});

afterAll(async () => {
  await mesh?.stop();
  endpoint?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("a Provider's admin password source", () => {
  it("is refused at apply when it names the master key or a variable of the mesh's, and nothing is stored", async () => {
    const reply = await mesh.apply([
      redisProvider("evil-file", { username: "default", passwordFile: `${dir}/x/../.mesh/master.key` }),
      redisProvider("evil-env", { username: "default", passwordEnv: "MESH_MASTER_KEY" }),
      redisProvider("fine", { username: "default", passwordEnv: "REDIS_ADMIN_PASSWORD" }),
    ]);
    expect(reply.ok).toBe(false);
    if (reply.ok) return;
    expect(reply.problems).toEqual([
      {
        document: 0,
        path: "admin.passwordFile",
        message: expect.stringMatching(
          /^".*\/x\/\.\.\/\.mesh\/master\.key" \(.*\/\.mesh\/master\.key\) is the mesh's master key: a provider's admin password may not be read from a file of the mesh's own/,
        ),
      },
      {
        document: 1,
        path: "admin.passwordEnv",
        message: expect.stringMatching(/^MESH_MASTER_KEY starts with MESH_.*ends in _PASSWORD and does not start with MESH_/),
      },
    ]);
    // All or nothing: not even the valid one.
    for (const name of ["evil-file", "evil-env", "fine"]) expect(await mesh.store.kv.providers.get(name), name).toBeNull();
  });

  it("is refused by meshctl apply with the document, the field and the rule", async () => {
    const file = join(dir, "evil.yaml");
    writeFileSync(
      file,
      `kind: Provider\nname: evil-yaml\nserves: [redis.user]\nnode: node-a\nendpoint: redis://127.0.0.1:${port}\nadmin: { username: default, passwordFile: ${masterKeyFile} }\n`,
    );
    const out = bufferOutput();
    const code = await runApply(async () => mesh.nc, { files: [file] }, out);
    expect(code).not.toBe(0);
    expect(out.stderr).toContain(`document 0: admin.passwordFile: "${masterKeyFile}" is the mesh's master key`);
    expect(out.stderr).toContain("put the admin password in a file of its own");
    expect(await mesh.store.kv.providers.get("evil-yaml")).toBeNull();
  });

  it("is refused where it is read, for a Provider stored without the check: nothing is read or sent, and the grant says why", async () => {
    // As a resolver that sees other files (or a store from before the rule) would have let it in.
    await mesh.store.kv.providers.put("evil", JSON.stringify(redisProvider("evil", { username: "default", passwordFile: masterKeyFile })));
    expect(
      (
        await mesh.apply([
          { kind: "Module", name: "shop", parts: [{ name: "api", node: "node-a" }], requires: [{ name: "cache", kind: "redis.user", parts: ["api"] }] },
        ])
      ).ok,
    ).toBe(true);
    const failed = await waitFor("shop/cache to fail provisioning", async () => {
      const c = getCondition((await mesh.grant("shop", "cache"))?.conditions ?? [], "Provisioned");
      return c?.reason === "ProvisionFailed" ? c : undefined;
    });
    expect(failed.message).toContain(`provider evil: admin.passwordFile "${masterKeyFile}" is the mesh's master key`);
    expect(failed.message).toContain("nothing was read or sent");
    expect(failed.message).not.toContain(KEY);
    expect(mesh.logs.text).not.toContain(KEY);
    expect(received).toBe(0);
  });

  it("providerConfig refuses before reading, with ProviderMisconfigured", () => {
    const env = { MESH_STATE_DIR: state, MESH_MASTER_KEY: KEY };
    const err = (() => {
      try {
        return providerConfig(redisProvider("evil", { username: "default", passwordEnv: "MESH_MASTER_KEY" }), env);
      } catch (e) {
        return e;
      }
    })();
    expect(isMeshError(err, ErrorCodes.ProviderMisconfigured)).toBe(true);
    expect((err as Error).message).toMatch(/^provider evil: admin\.passwordEnv MESH_MASTER_KEY starts with MESH_/);
    expect((err as Error).message).not.toContain(KEY);
    // A source of its own is read as before.
    expect(providerConfig(redisProvider("fine", { username: "default", passwordEnv: "REDIS_ADMIN_PASSWORD" }), { REDIS_ADMIN_PASSWORD: "pw" }).admin).toEqual({
      username: "default",
      password: "pw",
    });
  });
});

describe("a nats.user requirement past the operator's ceiling", () => {
  it("is refused at apply by the real resolver: asking for > when the provider allows the module's own namespace, and nothing is stored", async () => {
    const provider: ProviderDoc = {
      kind: "Provider",
      name: "nats-main",
      serves: ["nats.user"],
      node: "node-a",
      endpoint: "nats://127.0.0.1:4222",
      options: { signingKeysFile: "/etc/mesh/signing-keys.json" },
      installed: true,
    };
    const greedy = {
      kind: "Module",
      name: "greedy",
      parts: [{ name: "web", node: "node-a" }],
      requires: [{ name: "bus", kind: "nats.user", options: { publish: ">", subscribe: "$SYS.>" } }],
    };
    const reply = await mesh.apply([provider, greedy]);
    expect(reply.ok).toBe(false);
    if (reply.ok) return;
    expect(reply.problems[0]).toMatchObject({
      document: 1,
      path: "requires[0].options",
      message: expect.stringMatching(/asks to publish ">".*subscribe "\$SYS\.>".*past the ceiling of provider nats-main/),
    });
    expect(await mesh.store.kv.manifests.get("greedy")).toBeNull();
    expect(await keysOf(mesh.store.kv.providers)).not.toContain("nats-main");
  });

  it("is refused at apply, whatever the ceiling, when it would subscribe into another identity's inbox, and nothing is stored", async () => {
    const provider: ProviderDoc = {
      kind: "Provider",
      name: "nats-wide",
      serves: ["nats.user"],
      node: "node-a",
      endpoint: "nats://127.0.0.1:4222",
      options: { signingKeysFile: "/etc/mesh/signing-keys.json", allowSubscribe: ">" },
      installed: true,
    };
    for (const subscribe of [">", "_INBOX.>", "_GRANT_INBOX.shop.bus.>", "*.*.*"]) {
      const nosy = {
        kind: "Module",
        name: "nosy",
        parts: [{ name: "web", node: "node-a" }],
        requires: [{ name: "bus", kind: "nats.user", options: { subscribe } }],
      };
      const reply = await mesh.apply([provider, nosy]);
      expect(reply.ok, subscribe).toBe(false);
      if (reply.ok) return;
      expect(reply.problems[0], subscribe).toMatchObject({
        document: 1,
        path: "requires[0].options.subscribe",
        message: expect.stringMatching(
          /^nats\.user nosy\/bus: subscribe ".*" is refused: it reaches ".*", under _\w+\.>, where other identities get their replies/,
        ),
      });
      expect(await mesh.store.kv.manifests.get("nosy")).toBeNull();
    }
  });
});
