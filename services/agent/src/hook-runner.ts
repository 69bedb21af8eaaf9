/**
 * Running a part's `onRotate` hook: the COMMAND its node's agent allows under that name (see
 * allowed-hooks.ts), as an unprivileged user, with an environment of its own. The agent's
 * environment holds its NATS identity and may hold the master key's location: none of it
 * reaches a hook, which gets only {@link hookEnvironment}.
 */
import { execFileSync, spawn } from "node:child_process";
import { statSync } from "node:fs";
import { dirname, join } from "node:path";
import { ErrorCodes, MeshError, errorMessage, type Delivery } from "@mesh/shared";
import type { Logger } from "@mesh/shared/service";
import { HOOK_PATH, HookOptionError, type AllowedHooks } from "@mesh/shared";

/** How long a hook may run before it is killed (with every process it started). */
export const HOOK_TIMEOUT_MS = 60_000;

/** The user hooks run as unless `--hook-user` says otherwise. */
export const DEFAULT_HOOK_USER = "nobody";

/** Who a hook runs as: a uid and gid to switch to, or (`undefined`) the agent's own user. */
export type HookRunAs = { user: string; uid: number; gid: number } | undefined;

/**
 * The environment of a hook run for delivery `d`, whole: a fixed `PATH` ({@link HOOK_PATH}),
 * `HOME=/`, and what the hook is about. Nothing of the agent's own environment.
 */
export function hookEnvironment(d: Pick<Delivery, "grant" | "generation" | "module" | "part" | "requirement">, bindingPath: string): Record<string, string> {
  return {
    PATH: HOOK_PATH,
    HOME: "/",
    MESH_GRANT: d.grant,
    MESH_GENERATION: String(d.generation),
    MESH_BINDING_PATH: bindingPath,
    // The part's directory, which holds only its bindings: what a servicebinding.io library reads.
    SERVICE_BINDING_ROOT: dirname(bindingPath),
    MESH_MODULE: d.module,
    MESH_PART: d.part,
    MESH_REQUIREMENT: d.requirement,
  };
}

/** True when `path` is a regular file with an execute bit. */
function isExecutableFile(path: string): boolean {
  try {
    const s = statSync(path);
    return s.isFile() && (s.mode & 0o111) !== 0;
  } catch {
    return false;
  }
}

/**
 * `hooks` with each program as an absolute path: a bare name is looked up in {@link HOOK_PATH}
 * (the PATH the hook itself gets, never the agent's). Throws {@link HookOptionError} naming a
 * program that is not an executable file, so an agent does not start with a hook that could
 * never run.
 */
export function resolveHookPrograms(hooks: AllowedHooks, isExecutable: (path: string) => boolean = isExecutableFile): Map<string, string[]> {
  const resolved = new Map<string, string[]>();
  for (const [name, [program, ...args]] of hooks) {
    const path = program!.startsWith("/")
      ? program!
      : HOOK_PATH.split(":")
          .map((dir) => join(dir, program!))
          .find(isExecutable);
    if (!path || !isExecutable(path)) {
      throw new HookOptionError(
        program!.startsWith("/")
          ? `--allow-hook ${name}: ${program} is not an executable file on this node; install it, or fix the path`
          : `--allow-hook ${name}: no program ${program} in ${HOOK_PATH}; give its absolute path`,
      );
    }
    resolved.set(name, [path, ...args]);
  }
  return resolved;
}

/** The uid and gid of `user` on this machine (through `id`, so NSS users count), or undefined when there is no such user. */
export function lookUpUser(user: string): { uid: number; gid: number } | undefined {
  try {
    const id = (flag: string) =>
      Number(
        execFileSync("id", [flag, user], { env: { PATH: HOOK_PATH }, stdio: ["ignore", "pipe", "ignore"] })
          .toString()
          .trim(),
      );
    const uid = id("-u");
    const gid = id("-g");
    return Number.isInteger(uid) && Number.isInteger(gid) ? { uid, gid } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Who hooks run as, decided once at start. An agent running as root switches to `user` (and
 * drops its supplementary groups); one that is not root cannot, and runs hooks as itself, with
 * the same clean environment: `warning` then says so, for the agent to log once. Throws
 * {@link HookOptionError} when root is asked for a user this machine does not have.
 */
export function decideHookRunAs(
  user: string,
  processUid: number,
  lookUp: (user: string) => { uid: number; gid: number } | undefined = lookUpUser,
): { runAs: HookRunAs; warning?: string } {
  const found = lookUp(user);
  if (processUid === 0) {
    if (!found)
      throw new HookOptionError(
        `--hook-user ${user}: there is no such user on this node; create it, or name an unprivileged user that exists (default ${DEFAULT_HOOK_USER})`,
      );
    if (found.uid === 0)
      throw new HookOptionError(`--hook-user ${user}: that is root; hooks run as an unprivileged user: name one (default ${DEFAULT_HOOK_USER})`);
    return { runAs: { user, ...found } };
  }
  if (found?.uid === processUid) return { runAs: undefined };
  return {
    runAs: undefined,
    warning: `hooks run as the agent's own user (uid ${processUid}), not as ${user}: only an agent running as root can switch users. They still get only their own environment (PATH, HOME and the MESH_* variables of the rotation)`,
  };
}

/**
 * Runs hook `name` (`argv`, resolved) with `env` (from {@link hookEnvironment}, nothing added) as
 * `runAs`, in `/`, in a process group of its own. Resolves when it exits 0; otherwise throws a
 * retryable MeshError `HookFailed` saying how it ended. Its standard error (the last 500
 * characters) goes to `log` only, never into the error: the error is recorded on the grant,
 * which others read.
 */
export function runHook(
  hook: { name: string; argv: readonly string[] },
  env: Record<string, string>,
  opts: { runAs: HookRunAs; log: Logger; timeoutMs?: number },
): Promise<void> {
  const timeoutMs = opts.timeoutMs ?? HOOK_TIMEOUT_MS;
  const [program, ...args] = hook.argv;
  const what = `hook ${JSON.stringify(hook.name)} (${hook.argv.join(" ")})`;
  return new Promise((resolve, reject) => {
    const child = spawn(program!, args, {
      env,
      cwd: "/",
      // Its own process group, so a timeout kills what it started too.
      detached: true,
      stdio: ["ignore", "ignore", "pipe"],
      ...(opts.runAs ? { uid: opts.runAs.uid, gid: opts.runAs.gid } : {}),
    });
    let stderr = "";
    child.stderr?.on("data", (b: Buffer) => (stderr = (stderr + b.toString()).slice(-500)));
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        child.kill("SIGKILL");
      }
    }, timeoutMs);
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(
        new MeshError(ErrorCodes.HookFailed, `${what} could not start: ${errorMessage(e)}; fix the hook on this node (the confirmation waits for it)`, {
          retryable: true,
          cause: e,
        }),
      );
    });
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      if (code === 0) return resolve();
      const how = signal ? `was killed (${signal}${signal === "SIGKILL" ? `, after ${timeoutMs} ms at most` : ""})` : `exited with ${code}`;
      if (stderr.trim()) opts.log.warn({ hook: hook.name, stderr: stderr.trim() }, `${what} ${how}; its standard error`);
      reject(
        new MeshError(
          ErrorCodes.HookFailed,
          `${what} ${how}${opts.runAs ? ` as ${opts.runAs.user}` : ""}${stderr.trim() ? " (its standard error is in the agent's log)" : ""}; fix the hook on this node (the confirmation waits for it)`,
          {
            retryable: true,
          },
        ),
      );
    });
  });
}
