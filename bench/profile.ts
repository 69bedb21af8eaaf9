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
