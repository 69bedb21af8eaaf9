/** Assertions on errors that unit tests of names and options share. */
import { expect } from "vitest";
import { isMeshError, type ErrorCode } from "@mesh/shared";
import type { NatsConnection } from "@mesh/shared/runtime";

/** The message of the MeshError `code` that `fn` throws; fails the test when it throws none or another. */
export function refused(code: ErrorCode, fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    expect(isMeshError(e, code), String(e)).toBe(true);
    return (e as Error).message;
  }
  throw new Error("expected a refusal, got none");
}

/**
 * Every error the server sends `nc` from now on (a permissions violation, say), as text, in the
 * order they came: the array fills as they arrive.
 */
export function serverErrors(nc: NatsConnection): string[] {
  const errors: string[] = [];
  void (async () => {
    for await (const s of nc.status()) if (s.type === "error") errors.push(String((s as { error?: unknown }).error));
  })();
  return errors;
}
