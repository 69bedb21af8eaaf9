/**
 * Issuing identities: 1,000 `nats.user` grants created by the adapter, 16 at a time (the
 * provisioner's concurrency), on a nats-server of the benchmark's own.
 *
 * - the JWT path (the adapter as it ships: operator mode, a user JWT per identity, no server
 *   change), against its floor measured in the same run: signing the same 1,000 user JWTs with
 *   the same library and nothing else (`issueUser`), so the ratio is what the adapter adds (its
 *   record in the KV bucket, the account lookup);
 * - the users-file path it replaced (records, a rendered users file, SIGHUP and a probe login
 *   per change) was measured beside it in one run while its code was still in the tree; its
 *   figures are in docs/design.md ("The cost model of a holder").
 *
 * Then the account JWT's size over BENCH_ROTATIONS (default 10,000) rotations of one identity
 * (create generation k+1, retire k) with `userExpiry` BENCH_EXPIRY (default 5s): revocations of
 * keys whose JWTs have expired are pruned, so the size levels off instead of growing with the
 * number of rotations. Nothing here asserts a time.
 */
import { readFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { accountClaims, createNatsUserAdapter, issueUser, newUserSeed, openSigningKeys } from "@mesh/providers";
import { startOperatorNats } from "../test/harness/nats-operator.js";

const N = Number(process.env.BENCH_IDENTITIES ?? 1_000);
const ROTATIONS = Number(process.env.BENCH_ROTATIONS ?? 10_000);
const EXPIRY = process.env.BENCH_EXPIRY ?? "5s";
const CONCURRENCY = 16;

const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
function pct(values: number[], p: number): number {
  const v = [...values].sort((a, b) => a - b);
  return v[Math.min(v.length - 1, Math.max(0, Math.ceil((p / 100) * v.length) - 1))] ?? NaN;
}

/** Runs `fn(i)` for i < n, `CONCURRENCY` at a time; returns the total time and each call's latency. */
async function pool(n: number, fn: (i: number) => Promise<unknown>): Promise<{ total: number; each: number[] }> {
  const each: number[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < n) {
        const i = next++;
        const t = performance.now();
        await fn(i);
        each.push(performance.now() - t);
      }
    }),
  );
  return { total: performance.now() - t0, each };
}

const line = (what: string, r: { total: number; each: number[] }) =>
  `${what.padEnd(44)} ${s(r.total).padStart(9)}  ${(N / (r.total / 1000)).toFixed(0).padStart(6)}/s  p50 ${pct(r.each, 50).toFixed(1)} ms  p95 ${pct(r.each, 95).toFixed(1)} ms`;

const grant = (i: number, run: string) => ({ module: `b${run}-n${i}`, requirement: "bus", generation: 1 });

async function jwtPath(): Promise<{ floor: { total: number; each: number[] }; adapter: { total: number; each: number[] } }> {
  const nats = await startOperatorNats();
  const keys = openSigningKeys(nats.masterKey, readFileSync(nats.files.signingKeysFile, "utf8"));
  const adapter = createNatsUserAdapter(nats.provider());
  try {
    const run = randomBytes(3).toString("hex");
    const permissions = { publish: ["app.x.>"], subscribe: ["app.x.>", "_INBOX.>"] };
    const floor = await pool(N, (i) =>
      issueUser(keys, { name: `floor_${i}`, seed: newUserSeed(), permissions, expiresAt: Math.floor(Date.now() / 1000) + 3600 }),
    );
    await adapter.create({ grant: { module: `w${run}`, requirement: "bus", generation: 1 }, secret: adapter.generate() }); // its bucket and connections exist first
    const made: Array<Record<string, string>> = [];
    const timed = await pool(N, async (i) => made.push((await adapter.create({ grant: grant(i, run), secret: adapter.generate() })).bindings));
    for (const bindings of made.filter((_, i) => i % 100 === 0)) {
      const r = await adapter.login({ bindings });
      if (!r.ok) throw new Error(`an issued identity does not log in: ${r.message}`);
    }
    return { floor, adapter: timed };
  } finally {
    await adapter.close();
    await nats.stop();
  }
}

async function accountSize(): Promise<void> {
  const nats = await startOperatorNats();
  const keys = openSigningKeys(nats.masterKey, readFileSync(nats.files.signingKeysFile, "utf8"));
  const adapter = createNatsUserAdapter(nats.provider({ options: { signingKeysFile: nats.files.signingKeysFile, userExpiry: EXPIRY } }));
  const sys = await nats.connect(keys.systemUserCreds);
  const size = async () => {
    const jwt = (await sys.request(`$SYS.REQ.ACCOUNT.${keys.account}.CLAIMS.LOOKUP`, "", { timeout: 5_000 })).string();
    return { bytes: jwt.length, revocations: Object.keys(accountClaims(jwt).revocations).length };
  };
  try {
    const g = { module: "rotated", requirement: "bus" };
    await adapter.create({ grant: { ...g, generation: 1 }, secret: adapter.generate() });
    console.log(`\naccount JWT over ${ROTATIONS} rotations of one identity (userExpiry ${EXPIRY}):`);
    const first = await size();
    console.log(`  ${"rotations".padStart(9)}  ${"elapsed".padStart(8)}  ${"revocations".padStart(11)}  ${"JWT bytes".padStart(9)}`);
    console.log(`  ${"0".padStart(9)}  ${"0.0 s".padStart(8)}  ${String(first.revocations).padStart(11)}  ${String(first.bytes).padStart(9)}`);
    const t0 = performance.now();
    const step = Math.max(1, Math.floor(ROTATIONS / 10));
    let max = first.bytes;
    for (let k = 1; k <= ROTATIONS; k++) {
      await adapter.create({ grant: { ...g, generation: k + 1 }, secret: adapter.generate() });
      await adapter.retire({ grant: { ...g, generation: k } });
      if (k % step === 0 || k === ROTATIONS) {
        const now = await size();
        max = Math.max(max, now.bytes);
        console.log(
          `  ${String(k).padStart(9)}  ${s(performance.now() - t0).padStart(8)}  ${String(now.revocations).padStart(11)}  ${String(now.bytes).padStart(9)}`,
        );
      }
    }
    const unpruned = first.bytes + ROTATIONS * 69; // each revocation adds about 69 bytes (a key and a time, base64url)
    console.log(`  largest ${max} bytes; without pruning it would be about ${unpruned} bytes (${(unpruned / max).toFixed(1)}× larger)`);
  } finally {
    await sys.close();
    await adapter.close();
    await nats.stop();
  }
}

const jwt = await jwtPath();
console.log(`\nissuing ${N} nats.user identities, ${CONCURRENCY} at a time:`);
console.log(line("floor: signing the user JWTs alone", jwt.floor));
console.log(line("JWT path (the adapter, operator mode)", jwt.adapter));
console.log(`  ratio to the floor: ${(jwt.adapter.total / jwt.floor.total).toFixed(1)}× (total time)`);
if (ROTATIONS > 0) await accountSize();
