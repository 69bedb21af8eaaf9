/** Running meshctl's command functions in a test as its entry point runs them. */
import { CliError } from "../../packages/cli/src/index.js";

/** Runs a command function; a thrown CliError becomes its exit code and message, as meshctl's entry point does. */
export async function exitOf(fn: () => Promise<number>): Promise<{ code: number; message: string }> {
  try {
    return { code: await fn(), message: "" };
  } catch (e) {
    if (e instanceof CliError) return { code: e.exitCode, message: e.message };
    throw e;
  }
}
