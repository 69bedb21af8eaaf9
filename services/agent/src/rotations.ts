/**
 * The agent's rotations: one durable consumer per part and grant it holds, in its node's holder
 * stream (holder-streams.ts in @mesh/shared), made by the control plane when the agent's receipt
 * says the part holds the grant, and removed when it says the binding was withdrawn. The agent
 * may make none: it looks at the consumers of its own stream (on start, soon after each
 * delivery, and every {@link LOOK_EVERY_MS}) and consumes each it does not consume yet. A
 * rotation's message is acknowledged only once it is applied: that ack is the confirmation.
 */
import { JetStreamApiError } from "@nats-io/jetstream";
import { HOLDER_ACK_WAIT_MS, agentHolderStream, errorMessage, isValidName } from "@mesh/shared";
import { consumeMessages, listConsumers, type Consumption, type Disposition, type JsMsg, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";

/** How often the agent looks for consumers made for it (a delivery also makes it look, soon). */
export const LOOK_EVERY_MS = 5_000;

/** The part a consumer of the agent's stream is for (`<module>_<requirement>_<part>`), or undefined for a name that is not one. */
export function partOfConsumer(name: string): string | undefined {
  const names = name.split("_");
  return names.length === 3 && names.every(isValidName) ? names[2] : undefined;
}

export function consumeRotations(opts: { store: Store; node: string; log: Logger; handle: (part: string) => (m: JsMsg) => Promise<Disposition> }): {
  lookSoon(): void;
  stop(): Promise<void>;
} {
  const { store, node, log } = opts;
  const stream = agentHolderStream(node);
  const running = new Map<string, Promise<Consumption | undefined>>();
  let stopped = false;
  let soon: NodeJS.Timeout | undefined;

  const start = (name: string, part: string) => {
    const c = consumeMessages({
      store,
      stream,
      durable: name,
      filter: "",
      create: false,
      handle: opts.handle(part),
      log: log.child({ consumer: name }),
      ackWaitMs: HOLDER_ACK_WAIT_MS,
      maxAckPending: 1,
    })
      .then((consumption) => {
        // A consumer removed (the binding withdrawn) or lost with its server: looked for again.
        void consumption.closed.catch(() => undefined).finally(() => running.delete(name));
        return consumption;
      })
      .catch((e: unknown) => {
        running.delete(name);
        log.debug({ consumer: name, err: e }, "could not consume a rotation consumer; looked for again");
        return undefined;
      });
    running.set(name, c);
  };

  const look = async () => {
    if (stopped) return;
    try {
      for await (const c of listConsumers(store.nc, stream)) {
        const name = c.name;
        const part = partOfConsumer(name);
        if (part && !running.has(name) && !stopped) start(name, part);
      }
    } catch (e) {
      // No stream yet: this node holds nothing the control plane has made a consumer for.
      if (!(e instanceof JetStreamApiError && /not found/i.test(e.message)))
        log.debug({ err: errorMessage(e) }, "could not list this node's rotation consumers; looked at again");
    }
  };

  const timer = setInterval(() => void look(), LOOK_EVERY_MS);
  timer.unref();
  void look();

  return {
    lookSoon() {
      if (soon || stopped) return;
      soon = setTimeout(() => {
        soon = undefined;
        void look();
      }, 300);
      soon.unref();
    },
    async stop() {
      stopped = true;
      clearInterval(timer);
      clearTimeout(soon);
      const all = await Promise.all(running.values());
      await Promise.all(all.map((c) => c?.stop()));
    },
  };
}
