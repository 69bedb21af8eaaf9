import { describe, expect, it } from "vitest";
import { createCurve } from "@nats-io/nkeys";
import { SealingKeyPair } from "./sealing-key.js";

const msg = new TextEncoder().encode('{"password":"pw"}');

describe("SealingKeyPair", () => {
  it("seals what plain nkeys opens, and opens what plain nkeys sealed", () => {
    const plain = createCurve();
    const fast = new SealingKeyPair(createCurve());
    expect(fast.getPublicKey()).toMatch(/^X/);
    expect(plain.open(fast.seal(msg, plain.getPublicKey()), fast.getPublicKey())).toEqual(msg);
    expect(fast.open(plain.seal(msg, fast.getPublicKey()), plain.getPublicKey())).toEqual(msg);
    // Twice: the second time from the cached shared key.
    expect(fast.open(plain.seal(msg, fast.getPublicKey()), plain.getPublicKey())).toEqual(msg);
  });

  it("gives the same bytes as nkeys for the same nonce", () => {
    const inner = createCurve();
    const fast = new SealingKeyPair(inner);
    const peer = createCurve().getPublicKey();
    const nonce = new Uint8Array(24).fill(7);
    expect(fast.seal(msg, peer, nonce)).toEqual(inner.seal(msg, peer, nonce));
  });

  it("never uses a nonce twice, across refills of the nonces drawn ahead", () => {
    const a = new SealingKeyPair(createCurve());
    const peer = createCurve().getPublicKey();
    const seen = new Set<string>();
    // More seals than one draw of nonces holds (256), by two keys alike.
    for (let i = 0; i < 700; i++) {
      const sealed = (i % 2 ? a : new SealingKeyPair(createCurve())).seal(msg, peer);
      seen.add(Buffer.from(sealed.subarray(4, 28)).toString("hex"));
    }
    expect(seen.size).toBe(700);
  });

  it("does not open what was sealed to another key or altered", () => {
    const a = new SealingKeyPair(createCurve());
    const b = new SealingKeyPair(createCurve());
    const c = new SealingKeyPair(createCurve());
    const sealed = a.seal(msg, b.getPublicKey());
    expect(c.open(sealed, a.getPublicKey())).toBeNull();
    const altered = sealed.slice();
    altered[altered.length - 1]! ^= 1;
    expect(b.open(altered, a.getPublicKey())).toBeNull();
    expect(b.open(sealed.subarray(0, 20), a.getPublicKey())).toBeNull();
  });

  it("refuses a recipient that is not an xkey", () => {
    const a = new SealingKeyPair(createCurve());
    expect(() => a.seal(msg, "not-a-key")).toThrow(/curve25519 public key/);
    const user = a.getPublicKey().replace(/^X/, "U");
    expect(() => a.seal(msg, user)).toThrow();
  });
});
