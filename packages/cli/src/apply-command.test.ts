import { describe, expect, it } from "vitest";
import { Limits, type ManifestDoc } from "@mesh/shared";
import type { NatsConnection } from "@mesh/shared/runtime";
import { applyBatches, sendApply } from "./apply-command.js";
import { CliError } from "./cli-error.js";
import type { ManifestFile } from "./manifest-files.js";

/** A connection whose request says it was reached: the limits are checked before anything is sent. */
const REACHED = "request sent";
const nc = { request: async () => Promise.reject(new Error(REACHED)), getServer: () => "127.0.0.1:4222" } as unknown as NatsConnection;

const doc = (name: string): ManifestDoc => ({ kind: "Module", name, parts: [], requires: [] });
const outcome = (files: ManifestFile[]) =>
  sendApply(nc, files).then(
    () => "sent",
    (e: unknown) => (e instanceof CliError ? `${e.exitCode}: ${e.message}` : (e as Error).message),
  );

describe("sendApply's limits, checked before anything is sent", () => {
  it("sends 256 documents in one request and 1,000 in four, in order, none twice", () => {
    const docs = Array.from({ length: 1_000 }, (_, i) => doc(`m${i}`));
    const one = applyBatches([
      { source: "a.yaml", documents: docs.slice(0, 200) },
      { source: "b.yaml", documents: docs.slice(200, Limits.documents) },
    ]);
    expect(one.map((b) => [b.from, b.count])).toEqual([[0, Limits.documents]]);
    const four = applyBatches([0, 250, 500, 750].map((from, i) => ({ source: `${i}.yaml`, documents: docs.slice(from, from + 250) })));
    expect(four.map((b) => [b.from, b.count])).toEqual([
      [0, 256],
      [256, 256],
      [512, 256],
      [768, 232],
    ]);
    const names = four.flatMap((b) => (JSON.parse(b.payload) as { documents: Array<{ name: string }> }).documents.map((d) => d.name));
    expect(names).toEqual(docs.map((d) => d.name));
  });

  it("splits by size too: no request passes 900 KiB", () => {
    const big = (name: string): ManifestDoc =>
      ({ kind: "Module", name, parts: [], requires: [], ...({ annotations: "x".repeat(100 * 1024) } as object) }) as ManifestDoc;
    const batches = applyBatches([{ source: "a.yaml", documents: Array.from({ length: 20 }, (_, i) => big(`m${i}`)) }]);
    expect(batches.length).toBeGreaterThan(2);
    for (const b of batches) expect(Buffer.byteLength(b.payload)).toBeLessThanOrEqual(Limits.applyRequestBytes);
    expect(batches.reduce((n, b) => n + b.count, 0)).toBe(20);
  });

  it("sends a document that makes a request of 900 KiB and refuses one byte more", async () => {
    // The request is {"documents":[…],"source":"<file names>"}: a file name padded to the size wanted.
    const base = Buffer.byteLength(JSON.stringify({ documents: [doc("m")], source: "" }));
    const named = (bytes: number): ManifestFile[] => [{ source: "f".repeat(bytes - base), documents: [doc("m")] }];
    expect(await outcome(named(Limits.applyRequestBytes))).toMatch(REACHED);
    expect(await outcome(named(Limits.applyRequestBytes + 1))).toMatch(
      /^2: document 1 of f+ makes a request of 921601 bytes; one apply may be at most 921600 \(900 KiB\): make it smaller/,
    );
  });
});
