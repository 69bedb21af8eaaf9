/** The npm client as a holder runs it: with the binding's npmrc as its only configuration, in a home of its own. */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/**
 * Runs `npm args` in `cwd` with `npmrc` as its user config, and `extraEnv` (`NODE_EXTRA_CA_CERTS`:
 * a binding's `ca.crt`); resolves with its exit code and output (never rejects).
 */
export async function npm(npmrc: string, cwd: string, args: string[], extraEnv: Record<string, string> = {}): Promise<{ code: number; out: string }> {
  const home = mkdtempSync(join(tmpdir(), "mesh-npm-home-"));
  const env = {
    PATH: process.env.PATH,
    HOME: home,
    NPM_CONFIG_USERCONFIG: npmrc,
    NPM_CONFIG_GLOBALCONFIG: join(home, "none"),
    NPM_CONFIG_CACHE: join(home, "cache"),
    NPM_CONFIG_UPDATE_NOTIFIER: "false",
    NPM_CONFIG_AUDIT: "false",
    NPM_CONFIG_FUND: "false",
    ...extraEnv,
  };
  try {
    const { stdout, stderr } = await run("npm", args, { cwd, env, timeout: 60_000 });
    return { code: 0, out: stdout + stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string; message: string };
    return { code: typeof err.code === "number" ? err.code : 1, out: `${err.stdout ?? ""}${err.stderr ?? ""}${err.message}` };
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}
