/**
 * A requirement's `env` against a whole mesh (resolver, provisioner, agent on a real
 * nats-server): the variables it names reach the part's env file beside the
 * `<REQUIREMENT>_<KEY>` names and the SDK's updates, the binding's directory is unchanged, a
 * changed mapping is written again without a new generation, and a key the kind does not bind
 * is refused at apply.
 */
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { envDigest, getCondition, type ModuleDoc } from "@mesh/shared";
import { watchCredentials, type CredentialUpdate } from "@mesh/client";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";

let mesh: TestMesh;

beforeAll(async () => {
  mesh = await startTestMesh();
});

afterAll(async () => {
  await mesh?.stop();
});

/** Module `name`, part api on node-a, requiring one secret `key` whose env is `env`. */
const module = (name: string, env?: Record<string, string>): ModuleDoc => ({
  kind: "Module",
  name,
  parts: [{ name: "api", node: "node-a", installed: true }],
  requires: [{ name: "key", kind: "secret", ...(env ? { env } : {}) }],
});

/** The part's env file, as `NAME → value` (the agent quotes every value in single quotes here: none holds one). */
function envFile(name: string): Map<string, string> {
  const text = readFileSync(join(mesh.bindingsRoot, "node-a", name, "api.env"), "utf8");
  return new Map(
    text
      .split("\n")
      .filter((l) => l && !l.startsWith("#"))
      .map((l) => {
        const [k, v] = l.split(/=(.*)/s) as [string, string];
        return [k, v.replace(/^'|'$/g, "")];
      }),
  );
}

/** The module applied and Ready, with its secret's value. */
async function ready(doc: ModuleDoc): Promise<string> {
  expect(await mesh.apply([doc])).toMatchObject({ ok: true });
  await mesh.waitForState(doc.name, "Ready");
  return readFileSync(join(mesh.bindingsRoot, "node-a", doc.name, "api", "key", "value"), "utf8");
}

describe("a requirement's env", () => {
  it("names the variables of the part's env file beside the plain names, and leaves the binding's directory as it is", async () => {
    const value = await ready(module("mapped", { SESSION_SECRET: "value", SECRET_KIND: "type" }));
    const env = envFile("mapped");
    expect(env.get("SESSION_SECRET")).toBe(value);
    expect(env.get("SECRET_KIND")).toBe("secret");
    expect(env.get("KEY_VALUE")).toBe(value);
    expect(readdirSync(join(mesh.bindingsRoot, "node-a", "mapped", "api", "key")).sort()).toEqual(["provider", "type", "value"]);
    expect(readdirSync(join(mesh.bindingsRoot, "node-a", "mapped", "api"))).toEqual(["key"]);
  });

  it("hands the same variables to the SDK with each generation", async () => {
    const value = await ready(module("sdk", { SESSION_SECRET: "value" }));
    const watch = await watchCredentials(mesh.nc, { module: "sdk", part: "api", requirement: "key" });
    try {
      const first = (await watch[Symbol.asyncIterator]().next()).value as CredentialUpdate;
      expect(first).toMatchObject({ generation: 1, env: { SESSION_SECRET: value } });
    } finally {
      await watch.stop();
    }
  });

  it("is written again when it changes, at the same generation, and the grant says so until then", async () => {
    const value = await ready(module("moved", { SESSION_SECRET: "value" }));
    const before = await mesh.grant("moved", "key");
    expect(before?.holders["node-a/api"]).toMatchObject({ generation: 1, env: envDigest({ SESSION_SECRET: "value" }) });

    expect(await mesh.apply([module("moved", { APP_SECRET: "value" })])).toMatchObject({ ok: true });
    const after = await waitFor("the holder to hold the new env", async () => {
      const g = await mesh.grant("moved", "key");
      return g?.holders["node-a/api"]?.env === envDigest({ APP_SECRET: "value" }) ? g : undefined;
    });
    expect(after.generation).toBe(1);
    expect(getCondition(after.conditions, "Delivered")).toMatchObject({ status: "True" });
    const env = envFile("moved");
    expect(env.get("APP_SECRET")).toBe(value);
    expect(env.has("SESSION_SECRET")).toBe(false);

    // Mapping nothing any more: the env file has the plain names alone.
    expect(await mesh.apply([module("moved")])).toMatchObject({ ok: true });
    await waitFor("the holder to hold no env", async () => (await mesh.grant("moved", "key"))?.holders["node-a/api"]?.env === undefined);
    expect([...envFile("moved").keys()]).toEqual(["KEY_PROVIDER", "KEY_TYPE", "KEY_VALUE"]);
  });

  it("refuses at apply a key the kind does not bind, and a variable set by two requirements", async () => {
    const reply = await mesh.apply([
      {
        kind: "Module",
        name: "wrong",
        parts: [{ name: "api", node: "node-a" }],
        requires: [
          { name: "a", kind: "secret", env: { DATABASE_URL: "uri" } },
          { name: "b", kind: "secret", env: { TOKEN: "value" } },
          { name: "c", kind: "secret", env: { TOKEN: "value" } },
        ],
      },
    ]);
    expect(reply).toMatchObject({ ok: false });
    const problems = reply.ok ? [] : reply.problems.map((p) => `${p.path}: ${p.message}`);
    expect(problems).toEqual([
      "requires[0].env.DATABASE_URL: secret binds no key uri; it binds type, provider, value",
      "requires[2].env.TOKEN: TOKEN is also set by requirement b: give each variable one source",
    ]);
    expect(await mesh.moduleStatus("wrong")).toBeUndefined();
  });
});
