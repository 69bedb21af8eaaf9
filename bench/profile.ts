/**
 * A CPU profile of this process through the inspector, for the benchmarks' `BENCH_PROFILE_DIR`:
 * `startProfile()` starts it and returns the function that stops it and returns the profile
 * as `.cpuprofile` JSON (open it in Chrome's DevTools or VS Code).
 */
import { Session } from "node:inspector/promises";

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
