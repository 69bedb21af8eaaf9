/** Ending what a test started, in the order it depends on it. */
import { rmSync } from "node:fs";

/** Stops each of `parts` in turn (undefined ones skipped), then removes `dirs`. */
export async function stopInOrder(parts: ReadonlyArray<{ stop(): Promise<void> } | undefined>, dirs: readonly string[] = []): Promise<void> {
  for (const p of parts) await p?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
}
