/**
 * A test file's own nats-server and one connection to it, as vitest hooks (this is apart from
 * nats-server.ts, which test/global-setup.ts imports outside any test).
 */
import { afterAll, beforeAll } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { startNatsServer, type NatsServer } from "./nats-server.js";

/**
 * A test file's own server and one connection to it, started before the file's tests and
 * stopped after them: `const { nc } = natsForFile();` then `nc()` inside the tests.
 */
export function natsForFile(): { server(): NatsServer; nc(): NatsConnection } {
  let server: NatsServer | undefined;
  let nc: NatsConnection | undefined;
  beforeAll(async () => {
    server = await startNatsServer();
    nc = await connect({ servers: server.url });
  });
  afterAll(async () => {
    await nc?.close();
    await server?.stop();
  });
  return { server: () => server!, nc: () => nc! };
}
