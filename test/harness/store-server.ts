/**
 * A nats-server of the test's own with the mesh's store opened on it over one connection, for
 * tests that drive a service's functions directly rather than a whole mesh.
 */
import { connectNats, openStore, type NatsConnection, type Store } from "@mesh/shared/runtime";
import { startNatsServer, type NatsServer } from "./nats-server.js";

export interface StoreServer {
  nats: NatsServer;
  nc: NatsConnection;
  store: Store;
  /** Closes the connection and stops the server (its temporary store goes with it). */
  stop(): Promise<void>;
}

export async function startStoreServer(): Promise<StoreServer> {
  const nats = await startNatsServer();
  try {
    const nc = await connectNats(nats.url);
    const store = await openStore(nc);
    return {
      nats,
      nc,
      store,
      async stop() {
        await nc.close();
        await nats.stop();
      },
    };
  } catch (e) {
    await nats.stop();
    throw e;
  }
}
