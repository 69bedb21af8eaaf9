/**
 * What JetStream itself says of a committed rotation's confirmations: for every holder the
 * record names as confirmed, its consumer (the one holder-streams.ts names for it, which the
 * record then need not name) has acknowledged the broadcast's sequence the record names.
 */
import { expect } from "vitest";
import { holderAckedOn, holderEndpoint, type Rotation } from "@mesh/shared";
import type { Store } from "@mesh/shared/runtime";

export async function expectAcksInConsumers(mesh: { store: Store }, r: Rotation): Promise<void> {
  const holders = Object.entries(r.holders).filter(([, p]) => p.e === undefined);
  expect(holders.length).toBeGreaterThan(0);
  for (const [holder, p] of holders) {
    const e = holderEndpoint(r.grant, holder)!;
    // Each acknowledged on its own consumer: the record names no other (and so names none).
    expect({ holder, s: p.s, k: p.k }).toEqual({ holder, s: undefined, k: undefined });
    expect({ holder, ...holderAckedOn(r.grant, holder, p) }).toEqual({ holder, stream: e.stream, consumer: e.consumer });
    const sent = r.broadcasts.find((b) => b.stream === e.stream && b.subject === e.subject);
    expect(sent, `the broadcast to ${holder}'s stream is in the record`).toBeDefined();
    expect(p.q).toBeGreaterThanOrEqual(sent!.seq);
    const info = await mesh.store.jsm.consumers.info(e.stream, e.consumer);
    expect(info.config.filter_subject).toBe(e.subject);
    expect(info.ack_floor.stream_seq, `${holder}'s consumer acknowledged the broadcast`).toBeGreaterThanOrEqual(p.q!);
  }
}
