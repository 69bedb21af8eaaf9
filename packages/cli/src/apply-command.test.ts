import { describe, expect, it } from "vitest";
import { Limits, type ManifestDoc, type NatsConnection } from "@mesh/shared";
import { sendApply } from "./apply-command.js";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import type { ManifestFile } from "./manifest-files.js";

/** A connection whose request says it was reached: the limits are checked before anything is sent. */
const REACHED = "request sent";
const nc = { request: async () => Promise.reject(new Error(REACHED)), getServer: () => "127.0.0.1:4222" } as unknown as NatsConnection;

const doc = (name: string): ManifestDoc => ({ kind: "Module", name, parts: [], requires: [] });
const outcome = (files: ManifestFile[]) => sendApply(nc, files).then(
  () => "sent",
  (e: unknown) => (e instanceof CliError ? `${e.exitCode}: ${e.message}` : (e as Error).message),
);

describe("sendApply's limits, checked before anything is sent", () => {
  it("sends 256 documents and refuses 257, saying to apply in several commands", async () => {
    const docs = Array.from({ length: Limits.documents + 1 }, (_, i) => doc(`m${i}`));
    expect(await outcome([{ source: "a.yaml", documents: docs.slice(0, 200) }, { source: "b.yaml", documents: docs.slice(200, Limits.documents) }])).toMatch(REACHED);
    expect(await outcome([{ source: "a.yaml", documents: docs.slice(0, 200) }, { source: "b.yaml", documents: docs.slice(200) }])).toBe(
      `${ExitCodes.Usage}: 257 documents in one apply; at most 256 go in one: apply the files in several commands`,
    );
  });

  it("sends a request of 900 KiB and refuses one byte more", async () => {
    // The request is {"documents":[…],"source":"<file names>"}: a file name padded to the size wanted.
    const base = Buffer.byteLength(JSON.stringify({ documents: [doc("m")], source: "" }));
    const named = (bytes: number): ManifestFile[] => [{ source: "f".repeat(bytes - base), documents: [doc("m")] }];
    expect(await outcome(named(Limits.applyRequestBytes))).toMatch(REACHED);
    expect(await outcome(named(Limits.applyRequestBytes + 1))).toMatch(/^2: the documents make a request of 921601 bytes; one apply may be at most 921600 \(900 KiB\)/);
  });
});
