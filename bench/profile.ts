/**
 * A CPU profile of this process through the inspector, for the benchmarks' `BENCH_PROFILE_DIR`:
 * `startProfile()` starts it and returns the function that stops it and returns the profile
 * as `.cpuprofile` JSON (open it in Chrome's DevTools or VS Code).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { join } from "node:path";

export async function startProfile(): Promise<() => Promise<string>> {
  const session = new Session();
  session.connect();
  await session.post("Profiler.enable");
  await session.post("Profiler.start");
  return async () => {
    const { profile } = await session.post("Profiler.stop");
    session.disconnect();
    return JSON.stringify(profile);
  };
}

/** Writes profile `text` as `<BENCH_PROFILE_DIR>/<name>.cpuprofile`, making the directory when it is not there yet. */
export function writeProfile(name: string, text: string): void {
  const dir = process.env.BENCH_PROFILE_DIR;
  if (!dir) throw new Error("BENCH_PROFILE_DIR is not set: there is nowhere to write a profile");
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${name}.cpuprofile`), text);
}

let running: (() => Promise<string>) | undefined;

/**
 * A benchmark child's `profile` request: the first call starts a profile of this process, the
 * next stops it and returns it (as from `startProfile`), and so on.
 */
export async function toggleProfile(): Promise<string | undefined> {
  if (!running) {
    running = await startProfile();
    return undefined;
  }
  const stop = running;
  running = undefined;
  return stop();
}
