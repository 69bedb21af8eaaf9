/**
 * Hooks as the agent runs them: real child processes (no NATS), as the unprivileged user when
 * the test runs as root (as it does on this machine), with their environment and nothing else.
 */
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isMeshError } from "@mesh/shared";
import { createLogger } from "@mesh/shared/service";
import { LogCapture } from "../../../test/harness/log-capture.js";
import { waitFor } from "../../../test/harness/wait.js";
import { HOOK_PATH, HookOptionError } from "@mesh/shared";
import { decideHookRunAs, hookEnvironment, lookUpUser, resolveHookPrograms, runHook } from "./hook-runner.js";

const delivery = { grant: "shop/db", generation: 3, module: "shop", part: "api", requirement: "db" };
const isRoot = process.getuid?.() === 0;

describe("hookEnvironment", () => {
  it("is PATH, HOME and the rotation's MESH_* variables, whole", () => {
    expect(hookEnvironment(delivery, "/b/shop/api/db")).toEqual({
      PATH: HOOK_PATH,
      HOME: "/",
      MESH_GRANT: "shop/db",
      MESH_GENERATION: "3",
      MESH_BINDING_PATH: "/b/shop/api/db",
      MESH_MODULE: "shop",
      MESH_PART: "api",
      MESH_REQUIREMENT: "db",
      SERVICE_BINDING_ROOT: "/b/shop/api",
    });
  });
});

describe("resolveHookPrograms", () => {
  const executables = new Set(["/usr/bin/systemctl", "/opt/app/reload"]);
  const isExecutable = (p: string) => executables.has(p);

  it("looks a bare name up in the hooks' PATH, and keeps an absolute path", () => {
    const hooks = new Map([
      ["reload", ["systemctl", "reload", "nginx"]],
      ["app", ["/opt/app/reload", "--graceful"]],
    ]);
    expect([...resolveHookPrograms(hooks, isExecutable)]).toEqual([
      ["reload", ["/usr/bin/systemctl", "reload", "nginx"]],
      ["app", ["/opt/app/reload", "--graceful"]],
    ]);
  });

  it.each<[string, string[], RegExp]>([
    ["an absolute path that is not an executable file", ["/opt/app/missing"], /--allow-hook x: \/opt\/app\/missing is not an executable file on this node/],
    [
      "a bare name in no directory of the PATH",
      ["no-such-program"],
      /--allow-hook x: no program no-such-program in \/usr\/local\/sbin:.*; give its absolute path/,
    ],
  ])("refuses %s", (_, argv, message) => {
    expect(() => resolveHookPrograms(new Map([["x", argv]]), isExecutable)).toThrow(HookOptionError);
    expect(() => resolveHookPrograms(new Map([["x", argv]]), isExecutable)).toThrow(message);
  });
});

describe("decideHookRunAs", () => {
  const users: Record<string, { uid: number; gid: number }> = { nobody: { uid: 65534, gid: 65534 }, app: { uid: 1000, gid: 1000 }, root: { uid: 0, gid: 0 } };
  const lookUp = (u: string) => users[u];

  it("switches to the user when the agent is root", () => {
    expect(decideHookRunAs("nobody", 0, lookUp)).toEqual({ runAs: { user: "nobody", uid: 65534, gid: 65534 } });
  });
  it("runs as the agent's user when it is not root, and says so once", () => {
    const d = decideHookRunAs("nobody", 1000, lookUp);
    expect(d.runAs).toBeUndefined();
    expect(d.warning).toMatch(/hooks run as the agent's own user \(uid 1000\), not as nobody: only an agent running as root can switch users/);
    // Asked for the user it already is: nothing to say.
    expect(decideHookRunAs("app", 1000, lookUp)).toEqual({ runAs: undefined });
  });
  it("refuses, as root, a user this node does not have, and root itself", () => {
    expect(() => decideHookRunAs("ghost", 0, lookUp)).toThrow(/--hook-user ghost: there is no such user on this node/);
    expect(() => decideHookRunAs("root", 0, lookUp)).toThrow(/--hook-user root: that is root; hooks run as an unprivileged user/);
  });
  it("looks users up on this machine", () => {
    expect(lookUpUser("root")).toEqual({ uid: 0, gid: 0 });
    expect(lookUpUser("no-such-user-here")).toBeUndefined();
  });
});

describe("runHook", () => {
  let dir: string;
  let out: string;
  const logs = new LogCapture();
  const log = createLogger("agent", { destination: logs });
  const nobody = lookUpUser("nobody");
  const runAs = isRoot && nobody ? { user: "nobody", ...nobody } : undefined;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "mesh-hook-"));
    chmodSync(dir, 0o755);
    // Written by the hook as nobody: a directory anyone may write to.
    out = join(dir, "out");
    mkdirSync(out);
    chmodSync(out, 0o777);
    writeFileSync(join(dir, "record.sh"), `#!/bin/sh\nid -u > ${out}/uid\nenv > ${out}/env\n`, { mode: 0o755 });
    writeFileSync(join(dir, "fail.sh"), "#!/bin/sh\necho 'could not reload: s3cr3t-in-stderr' >&2\nexit 3\n", { mode: 0o755 });
    writeFileSync(join(dir, "hang.sh"), `#!/bin/sh\nsleep 30 &\necho $! > ${out}/background\nsleep 30\n`, { mode: 0o755 });
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it.skipIf(!runAs)("runs the program as the hook user with only its own environment, none of the agent's", async () => {
    const saved = { ...process.env };
    // What an agent's environment holds under meshctl up: none of it may reach a hook.
    Object.assign(process.env, {
      MESH_NATS_CREDENTIALS: "/x/admin.creds",
      MESH_MASTER_KEY_FILE: "/x/master.key",
      MESH_MASTER_KEY: "00".repeat(32),
      NATS_URL: "nats://127.0.0.1:4222",
    });
    try {
      await runHook({ name: "record", argv: [join(dir, "record.sh")] }, hookEnvironment(delivery, "/b/shop/api/db"), { runAs, log });
    } finally {
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
    }
    expect(readFileSync(join(out, "uid"), "utf8").trim()).toBe(String(nobody!.uid));
    const env = Object.fromEntries(
      readFileSync(join(out, "env"), "utf8")
        .trim()
        .split("\n")
        .map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]),
    );
    // sh adds PWD (and may add SHLVL, _): nothing else.
    const shell = new Set(["PWD", "SHLVL", "_", "OLDPWD"]);
    expect(
      Object.keys(env)
        .filter((k) => !shell.has(k))
        .sort(),
    ).toEqual(Object.keys(hookEnvironment(delivery, "")).sort());
    expect(env).toMatchObject({ PATH: HOOK_PATH, HOME: "/", MESH_GENERATION: "3", PWD: "/" });
  });

  it("fails retryably saying how the hook ended; its standard error goes to the log, not into the error", async () => {
    const err = await runHook({ name: "reload", argv: [join(dir, "fail.sh")] }, hookEnvironment(delivery, "/b"), { runAs, log }).catch((e: unknown) => e);
    expect(isMeshError(err, "HookFailed") && err.retryable).toBe(true);
    expect((err as Error).message).toMatch(
      /^hook "reload" \(.*fail\.sh\) exited with 3.* \(its standard error is in the agent's log\); fix the hook on this node \(the confirmation waits for it\)$/,
    );
    expect((err as Error).message).not.toContain("s3cr3t");
    expect(logs.text).toContain("could not reload: s3cr3t-in-stderr");
  });

  it("kills a hook that runs past its time, and what it started", async () => {
    const started = Date.now();
    const err = await runHook({ name: "hang", argv: [join(dir, "hang.sh")] }, hookEnvironment(delivery, "/b"), { runAs, log, timeoutMs: 300 }).catch(
      (e: unknown) => e,
    );
    expect(Date.now() - started).toBeLessThan(5_000);
    expect((err as Error).message).toMatch(/hook "hang" .* was killed \(SIGKILL, after 300 ms at most\)/);
    // Its process group went with it: the background sleep is gone (or a zombie no one reaped yet).
    const pid = readFileSync(join(out, "background"), "utf8").trim();
    await waitFor(
      "the hook's background process to end",
      () => {
        try {
          return readFileSync(`/proc/${pid}/stat`, "utf8").split(" ")[2] === "Z";
        } catch {
          return true;
        }
      },
      5_000,
    );
  });

  it("fails retryably when the program cannot start", async () => {
    const err = await runHook({ name: "gone", argv: [join(dir, "gone.sh")] }, hookEnvironment(delivery, "/b"), { runAs, log }).catch((e: unknown) => e);
    expect(isMeshError(err, "HookFailed") && err.retryable).toBe(true);
    expect((err as Error).message).toMatch(/hook "gone" .* could not start: .*ENOENT/);
  });
});
