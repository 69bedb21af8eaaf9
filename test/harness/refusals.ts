/** Assertions on errors that unit tests of names and options share. */
import { expect } from "vitest";
import { isMeshError, type ErrorCode } from "@mesh/shared";

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
