/**
 * Reloading a nats-server's configuration file, as the tests that make JetStream gaps do
 * (test/jetstream-gap.test.ts): how the file must be written, and what Debian's 2.9.10 does
 * when one reload turns JetStream off and the next turns it on again, which is what a reload
 * of a file read while it was being rewritten did.
 */
import { mkdtempSync, openSync, closeSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { isJetStreamGap, isJetStreamTimeout } from "@mesh/shared/runtime";
import { startNatsServer, writeServerConfig, type NatsServer } from "./harness/nats-server.js";
import { waitFor } from "./harness/wait.js";

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "mesh-reload-"));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("writeServerConfig", () => {
  it("replaces the file whole: a reader that opened it before the write reads the old text in full, never a truncated one", () => {
    const path = join(dir, "whole.conf");
    const before = `authorization { users: [ { user: a, password: "${"x".repeat(4_096)}" } ] }\n`;
    writeServerConfig(path, before);
    // A server in the middle of reading it (a reload) holds it open.
    const fd = openSync(path, "r");
    try {
      writeServerConfig(path, "jetstream { }\n");
      expect(readFileSync(fd, "utf8")).toBe(before);
    } finally {
      closeSync(fd);
    }
    expect(readFileSync(path, "utf8")).toBe("jetstream { }\n");
    // Written in place instead, the reader sees the file truncated under it (what 2.9.10 reloaded).
    const fd2 = openSync(path, "r");
    try {
      writeFileSync(path, "");
      expect(readFileSync(fd2, "utf8")).toBe("");
    } finally {
      closeSync(fd2);
    }
  });
});

describe("nats-server 2.9.10: JetStream turned off by one reload and on by the next", () => {
  let nats: NatsServer | undefined;
  let nc: NatsConnection | undefined;
  afterAll(async () => {
    await nc?.close();
    await nats?.stop();
  });

  it("leaves the account's streams answering 'stream not found' until the server restarts", async (ctx) => {
    const storeDir = join(dir, "store");
    const configFile = join(dir, "server.conf");
    const config = `jetstream { store_dir: ${JSON.stringify(storeDir)} }\nauthorization { users: [ { user: a, password: p } ] }\n`;
    writeServerConfig(configFile, config);
    nats = await startNatsServer({ configFile, storeDir });
    nc = await connect({ servers: nats.url, user: "a", pass: "p", maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    if (nc.info?.version !== "2.9.10") ctx.skip(`a fact of nats-server 2.9.10, not of ${nc.info?.version}: check it again`);
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: "KEPT", subjects: ["kept.>"] });

    const loadedAt = async () => ((await (await fetch(`http://127.0.0.1:${nats!.monitorPort}/varz`)).json()) as { config_load_time: string }).config_load_time;
    /** Writes `text`, sends SIGHUP, and waits until the server has applied it (its config load time moved). */
    const reload = async (text: string) => {
      const before = await loadedAt();
      writeServerConfig(configFile, text);
      process.kill(nats!.pid, "SIGHUP");
      await waitFor("the reload to be applied", async () => (await loadedAt()) !== before, 10_000);
    };
    // What a reload of the file read empty (caught truncated while being rewritten) does: JetStream and authentication off.
    await reload("");
    await reload(config);
    // JetStream answers again ("Restarting JetStream"), but the account's JetStream state is the
    // one the shutdown stopped: 2.9.10 swaps the account object on every reload (reload.go,
    // reloadAuthorization: `newAcc.js = acc.js`), while the shutdown clears `js` only on the
    // object the state was made for (jetstream.go, shutdownJetStream: `jsa.acc()`), so the
    // restart finds the account enabled (configJetStream: `acc.JetStreamEnabled()`) and never
    // recovers its streams from the store.
    const answer = await waitFor(
      "JetStream to answer after the reloads",
      () =>
        jsm.streams.info("KEPT").then(
          () => "found",
          (e: unknown) => (isJetStreamGap(e) || isJetStreamTimeout(e) ? undefined : String(e)),
        ),
      10_000,
    );
    expect(answer).toMatch(/stream not found/);
    expect(await jsm.streams.names().next()).toEqual([]);

    // The store on disk is whole: a restart recovers the stream.
    await nats.stop({ keepStore: true });
    await nats.restart();
    await waitFor(
      "the stream after a restart",
      () =>
        jsm.streams.info("KEPT").then(
          (si) => si.config.name === "KEPT",
          () => undefined,
        ),
      10_000,
    );
  });
});
