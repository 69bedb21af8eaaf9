/**
 * Polls `probe` until it returns a value that is not undefined/false, or fails after `timeoutMs`
 * saying what it waited for: `what`, or what `what()` says then (what the test saw by the end).
 */
export async function waitFor<T>(
  what: string | (() => string),
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 20_000,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined && v !== false) return v as T;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${typeof what === "string" ? what : what()}${last ? ` (last error: ${(last as Error).message})` : ""}`,
      );
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
