import { mkdirSync, mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it, onTestFinished } from "vitest";
import { createUser } from "@nats-io/nkeys";
import { cliIdentity } from "./connect.js";
import { natsContextFile, readNatsContext } from "./nats-context.js";

/** A temporary directory, removed when the test that made it finishes. */
function scratch(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A config directory with the nats CLI's contexts `contexts` (name → its JSON). */
function configWith(contexts: Record<string, unknown>): NodeJS.ProcessEnv {
  const config = scratch("mesh-nats-context-");
  mkdirSync(join(config, "nats", "context"), { recursive: true });
  for (const [name, body] of Object.entries(contexts)) writeFileSync(join(config, "nats", "context", `${name}.json`), JSON.stringify(body));
  return { XDG_CONFIG_HOME: config, HOME: "/nonexistent" };
}

/** A .creds file of a new user. */
function credsFile(): string {
  const kp = createUser();
  const file = join(scratch("mesh-creds-"), "user.creds");
  writeFileSync(
    file,
    `-----BEGIN NATS USER JWT-----\neyJ.a.jwt\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n${new TextDecoder().decode(kp.getSeed())}\n------END USER NKEY SEED------\n`,
  );
  return file;
}

describe("the nats CLI's contexts", () => {
  it("are read from $XDG_CONFIG_HOME/nats/context, else ~/.config/nats/context", () => {
    expect(natsContextFile("prod", { XDG_CONFIG_HOME: "/cfg" })).toBe("/cfg/nats/context/prod.json");
    expect(natsContextFile("prod", { HOME: "/home/op" })).toBe("/home/op/.config/nats/context/prod.json");
  });

  it("give meshctl their server, credentials and inbox prefix", () => {
    const env = configWith({ prod: { description: "", url: "nats://a:4222", creds: "/x/admin.creds", inbox_prefix: "_I.op", nkey: "" } });
    expect(readNatsContext("prod", env)).toMatchObject({ name: "prod", url: "nats://a:4222", creds: "/x/admin.creds", inboxPrefix: "_I.op" });
    const home = configWith({ dev: { url: "nats://b:4222", creds: "~/.creds/dev.creds" } });
    expect(readNatsContext("dev", { ...home, HOME: "/home/op" }).creds).toBe("/home/op/.creds/dev.creds");
  });

  it("refuse a context that is not there, a name that would leave their directory, and what meshctl does not use", () => {
    const env = configWith({ tls: { url: "tls://a:4222", cert: "/x/c.pem", key: "/x/k.pem" } });
    expect(() => readNatsContext("nope", env)).toThrow(/NATS context nope does not exist: no .*nope\.json\. Make it with: nats context add nope/);
    expect(() => readNatsContext("../etc/passwd", env)).toThrow(/not a context name/);
    expect(() => readNatsContext("tls", env)).toThrow(/sets cert, key, which meshctl does not use; give meshctl a \.creds file with --creds/);
  });
});

describe("the identity meshctl connects with", () => {
  it("is --creds first, then the context's, then MESH_NATS_CREDENTIALS, then none here", () => {
    const creds = credsFile();
    const env = { MESH_NATS_USER: "someone", MESH_NATS_PASSWORD: "pw" };
    const cwd = scratch("mesh-cwd-");
    expect(cliIdentity(env, cwd, { creds })).toHaveProperty("authenticator");
    const context = { name: "t", file: "/x/t.json", token: "s3cret", inboxPrefix: "_I.t" };
    expect(cliIdentity(env, cwd, { context })).toEqual({ token: "s3cret", inboxPrefix: "_I.t" });
    // A context with a URL alone names no identity: the environment's is taken.
    expect(cliIdentity(env, cwd, { context: { name: "u", file: "/x/u.json", url: "nats://a:4222" } })).toEqual({ user: "someone", pass: "pw" });
    expect(cliIdentity({}, cwd, {})).toEqual({});
  });

  it("says which --creds it could not read, in those words", () => {
    expect(() => cliIdentity({}, tmpdir(), { creds: "/nonexistent/admin.creds" })).toThrow(/^--creds \/nonexistent\/admin\.creds: cannot read it \(ENOENT\)/);
  });
});
