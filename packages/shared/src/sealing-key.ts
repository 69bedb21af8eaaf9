/**
 * A curve25519 sealing key pair (nkeys xkey) that seals and opens in the very format of
 * `@nats-io/nkeys` (`xkv1` + nonce + NaCl box), only faster where it counts at fan-out: its
 * public key is computed once, and the box key shared with each peer (X25519 through Node's
 * native crypto, then HSalsa20, as NaCl's `box.before`) is computed once per peer and kept
 * (bounded). A provisioner sealing to a thousand holders, or a holder opening a thousand
 * rotations from one provisioner, then pays only the symmetric XSalsa20-Poly1305 per message.
 * The shared keys are secret; they live only in this object's memory.
 */
import { createPrivateKey, createPublicKey, diffieHellman, randomFillSync, type KeyObject } from "node:crypto";
import type { KeyPair } from "@nats-io/nkeys";
import nacl from "tweetnacl";

/** How many peers' shared keys one key pair keeps (the oldest is dropped beyond). */
export const SHARED_KEY_CACHE = 20_000;

const XKV1 = [120, 107, 118, 49];
const NONCE_LEN = 24;
const PREFIX_CURVE = 23 << 3;
const PREFIX_PRIVATE = 15 << 3;
const SIGMA = new Uint8Array([101, 120, 112, 97, 110, 100, 32, 51, 50, 45, 98, 121, 116, 101, 32, 107]);
const b64url = (b: Uint8Array) => Buffer.from(b).toString("base64url");
const hsalsa20 = (nacl as unknown as { lowlevel: { crypto_core_hsalsa20(out: Uint8Array, inp: Uint8Array, k: Uint8Array, c: Uint8Array): void } }).lowlevel
  .crypto_core_hsalsa20;

const B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

function base32Decode(s: string): Uint8Array | undefined {
  const out: number[] = [];
  let bits = 0;
  let acc = 0;
  for (const ch of s) {
    const v = B32.indexOf(ch);
    if (v < 0) return undefined;
    acc = (acc << 5) | v;
    bits += 5;
    if (bits >= 8) {
      bits -= 8;
      out.push((acc >> bits) & 0xff);
    }
  }
  return Uint8Array.from(out);
}

/** CRC-16/XMODEM, the checksum of nkeys encodings. */
function crc16(data: Uint8Array): number {
  let crc = 0;
  for (const b of data) {
    crc ^= b << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/** The 32 raw bytes of an nkeys encoding with one prefix byte; throws when it is not one of `prefix`. */
function decodeKey(text: string, prefix: number, what: string): Uint8Array {
  const raw = base32Decode(text);
  if (!raw || raw.length !== 35 || raw[0] !== prefix || crc16(raw.subarray(0, 33)) !== (raw[33]! | (raw[34]! << 8))) {
    throw new Error(`not ${what}`);
  }
  return raw.slice(1, 33);
}

/** Random bytes drawn ahead for nonces: one call to the CSPRNG per {@link NONCES_AHEAD} seals, not one per seal (which cost a rotation to 1,000 holders about 12 ms). */
const NONCES_AHEAD = 256;
let noncePool = new Uint8Array(0);
let nonceAt = 0;

/** A fresh random nonce; each is handed out once, never reused. */
function nextNonce(): Uint8Array {
  if (nonceAt + NONCE_LEN > noncePool.length) {
    noncePool = randomFillSync(new Uint8Array(NONCE_LEN * NONCES_AHEAD));
    nonceAt = 0;
  }
  const n = noncePool.subarray(nonceAt, nonceAt + NONCE_LEN);
  nonceAt += NONCE_LEN;
  return n;
}

/**
 * Wraps an nkeys curve key pair: the same keys and format, with the public key and each
 * peer's shared box key computed once. Every other call goes to `inner`.
 */
export class SealingKeyPair implements KeyPair {
  private publicKey: string | undefined;
  private privateKey: KeyObject | undefined;
  private readonly shared = new Map<string, Uint8Array>();

  constructor(private readonly inner: KeyPair) {}

  getPublicKey(): string {
    return (this.publicKey ??= this.inner.getPublicKey());
  }
  getPrivateKey(): Uint8Array {
    return this.inner.getPrivateKey();
  }
  getSeed(): Uint8Array {
    return this.inner.getSeed();
  }
  sign(input: Uint8Array): Uint8Array {
    return this.inner.sign(input);
  }
  verify(input: Uint8Array, sig: Uint8Array): boolean {
    return this.inner.verify(input, sig);
  }
  clear(): void {
    this.shared.clear();
    this.privateKey = undefined;
    this.inner.clear();
  }

  /** NaCl's `box.before(peer, mine)`, cached per peer. Throws for a malformed peer key. */
  private sharedKey(peer: string): Uint8Array {
    const hit = this.shared.get(peer);
    if (hit) return hit;
    const peerRaw = decodeKey(peer, PREFIX_CURVE, "a curve25519 public key (an nkeys xkey starting with X)");
    // JWK, not DER: OpenSSL 3 imports raw keys from JWK many times faster.
    this.privateKey ??= createPrivateKey({
      key: {
        kty: "OKP",
        crv: "X25519",
        d: b64url(decodeKey(new TextDecoder().decode(this.inner.getPrivateKey()), PREFIX_PRIVATE, "a curve private key")),
        x: b64url(decodeKey(this.getPublicKey(), PREFIX_CURVE, "a curve public key")),
      },
      format: "jwk",
    });
    const s = diffieHellman({
      privateKey: this.privateKey,
      publicKey: createPublicKey({ key: { kty: "OKP", crv: "X25519", x: b64url(peerRaw) }, format: "jwk" }),
    });
    const k = new Uint8Array(32);
    hsalsa20(k, new Uint8Array(16), s, SIGMA);
    s.fill(0);
    if (this.shared.size >= SHARED_KEY_CACHE) this.shared.delete(this.shared.keys().next().value!);
    this.shared.set(peer, k);
    return k;
  }

  seal(input: Uint8Array, recipient: string, nonce?: Uint8Array): Uint8Array {
    const n = nonce ?? nextNonce();
    const boxed = nacl.secretbox(input, n, this.sharedKey(recipient));
    const out = new Uint8Array(XKV1.length + NONCE_LEN + boxed.length);
    out.set(XKV1, 0);
    out.set(n, XKV1.length);
    out.set(boxed, XKV1.length + NONCE_LEN);
    return out;
  }

  open(message: Uint8Array, sender: string): Uint8Array | null {
    if (message.length <= XKV1.length + NONCE_LEN || XKV1.some((b, i) => message[i] !== b)) return null;
    const nonce = message.subarray(XKV1.length, XKV1.length + NONCE_LEN);
    return nacl.secretbox.open(message.subarray(XKV1.length + NONCE_LEN), nonce, this.sharedKey(sender));
  }
}
