import { describe, expect, it } from "vitest";
import { followCredential, type FollowEvent, type Held } from "./follow-credential.js";

/** An iterable the test feeds, as the SDK's holder yields: each generation with its confirm(). */
function feed() {
  const queue: Held[] = [];
  let wake: (() => void) | undefined;
  let ended = false;
  const iterable: AsyncIterable<Held> = {
    async *[Symbol.asyncIterator]() {
      for (;;) {
        const next = queue.shift();
        if (next) yield next;
        else if (ended) return;
        else await new Promise<void>((r) => (wake = r));
      }
    },
  };
  return {
    iterable,
    push: (h: Held) => (queue.push(h), wake?.()),
    end: () => ((ended = true), wake?.()),
  };
}

const held = (generation: number, log: string[], password = `p${generation}`): Held => ({
  generation,
  values: { username: `u${generation}`, password },
  env: {},
  confirm: async () => void log.push(`confirm ${generation}`),
});

type Pool = { user: string | undefined; end(): Promise<void> };

describe("followCredential", () => {
  it("builds and checks the new pool, swaps it in, ends the old one, and confirms last", async () => {
    const log: string[] = [];
    const events: FollowEvent[] = [];
    const f = feed();
    f.push(held(1, log));
    const following = await followCredential<Pool>(f.iterable, {
      open: ({ values: v }) => ({ user: v.username, end: async () => void log.push(`end ${v.username}`) }),
      check: async (p) => void log.push(`check ${p.user}`),
      onEvent: (e) => events.push(e),
    });
    expect(following.pools.inUse.generation).toBe(1);
    f.push(held(2, log));
    f.end();
    await following.done;
    expect(log).toEqual(["check u1", "confirm 1", "check u2", "end u1", "confirm 2"]);
    expect(events.map((e) => e.event)).toEqual(["in-use", "checked", "old-pool-ended", "confirming", "confirmed"]);
    expect(following.pools.inUse).toMatchObject({ generation: 2, pool: { user: "u2" } });
  });

  it("does not confirm a generation whose pool fails its check: it builds the pool again, the old one serving meanwhile", async () => {
    const log: string[] = [];
    const f = feed();
    f.push(held(1, log));
    let refusals = 2;
    const following = await followCredential<Pool>(f.iterable, {
      open: ({ values: v }) => ({ user: v.username, end: async () => void log.push(`end ${v.username}`) }),
      check: async (p) => {
        if (p.user === "u2" && refusals-- > 0) {
          log.push(`refused ${p.user} (old in use: ${following.pools.inUse.generation})`);
          throw new Error("password authentication failed");
        }
      },
      retryMs: () => 0,
    });
    f.push(held(2, log));
    f.end();
    await following.done;
    expect(log).toEqual(["confirm 1", "refused u2 (old in use: 1)", "end u2", "refused u2 (old in use: 1)", "end u2", "end u1", "confirm 2"]);
  });

  it("confirms, without a new pool, a generation it already uses", async () => {
    const log: string[] = [];
    const f = feed();
    f.push(held(2, log));
    const following = await followCredential<Pool>(f.iterable, {
      open: ({ values: v }) => ({ user: v.username, end: async () => undefined }),
      check: async () => undefined,
    });
    f.push(held(2, log));
    f.end();
    await following.done;
    expect(log).toEqual(["confirm 2", "confirm 2"]);
  });

  it("rejects when the holder stops before a first generation", async () => {
    const f = feed();
    f.end();
    await expect(followCredential(f.iterable, { open: () => ({ end: async () => undefined }), check: async () => undefined })).rejects.toThrow(
      "before it held a generation",
    );
  });
});
